// The SDPA dropout state (Attention.cpp's forward fills the cache, its
// backward takes from it). Kept apart from the kernels: the cache is a
// simulation shortcut, not part of the fused-attention template.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

namespace torch_openreg {

// Where a dropout forward's mask sits in the openreg generator's stream: the
// op's philox_seed and philox_offset outputs, as on CUDA.
struct DropoutRng {
  uint64_t seed = 0, offset = 0;
};

// The dropout keep-mask at `rng`: element i of the (contiguous) mask is
// kept when Philox position rng.offset + i draws below 1 - dropout_p (the
// bernoulli rule of Random.cpp). Identical in forward and backward because
// it depends only on (seed, offset) and the fixed shape.
at::Tensor keep_mask(const at::Tensor& like, double dropout_p, DropoutRng rng);

// What a dropout forward computed, by seed, until its backward takes it: the
// keep-mask (a bernoulli draw per weight, the costliest step) and the softmax
// probabilities, so the backward needs neither to regenerate the mask nor to
// recompute the scores and softmax -- the same tensors the CPU's math path
// keeps in its autograd graph. Only a cache: a missing entry (evicted, or a
// forward without backward) is recomputed from the seed with identical
// results. The tensors stay in device memory (the kernel allocated them);
// the cache is bounded so that forwards without backwards cannot hoard it.
// Vendor: a real fused kernel regenerates its mask from Philox seed/offset
// inside the kernel; this cache is the simulation's shortcut.
class KeepMaskCache {
 public:
  struct Entry {
    at::Tensor keep, probs;
    bool taken = false;
    size_t bytes() const { return keep.nbytes() + probs.nbytes(); }
  };
  // A forward is identified by its seed *and* its inputs: users may reseed
  // (gradcheck does, for every evaluation), so equal seeds alone do not mean
  // the same forward. The inputs' version counters change with every
  // in-place update, and autograd guarantees the backward sees the versions
  // its forward saw.
  struct Key {
    uint64_t seed, offset;
    std::array<const void*, 4> data;
    std::array<uint32_t, 4> version;
    bool operator==(const Key& o) const {
      return seed == o.seed && offset == o.offset && data == o.data && version == o.version;
    }
  };
  static Key key(DropoutRng rng, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& bias) {
    Key r{rng.seed, rng.offset, {}, {}};
    const at::Tensor* ts[4] = {&q, &k, &v, &bias};
    for (int i = 0; i < 4; ++i) {
      if (ts[i]->defined()) {
        r.data[i] = ts[i]->const_data_ptr();
        r.version[i] = ts[i]->_version();
      }
    }
    return r;
  }
  void put(const Key& key, Entry e) {
    const size_t bytes = e.bytes();
    std::lock_guard<std::mutex> g(mu_);
    // Entries a backward has used go once the next forward runs: until then
    // a second backward over the same graph (retain_graph, gradcheck's
    // reentrancy check) finds exactly the same tensors.
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.taken) {
        bytes_ -= it->second.bytes();
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    if (bytes > kMaxBytes) return;
    entries_.emplace_back(key, std::move(e));
    bytes_ += bytes;
    while (bytes_ > kMaxBytes || entries_.size() > kMaxEntries) {
      bytes_ -= entries_.front().second.bytes();
      entries_.pop_front();
    }
  }
  Entry take(const Key& key) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [k, e] : entries_) {
      if (k == key) {
        e.taken = true;
        return e;
      }
    }
    return Entry();
  }

 private:
  static constexpr size_t kMaxBytes = size_t(256) << 20;
  static constexpr size_t kMaxEntries = 256;
  std::mutex mu_;
  std::deque<std::pair<Key, Entry>> entries_;
  size_t bytes_ = 0;
};

// The process-wide cache.
KeepMaskCache& keep_mask_cache();

}  // namespace torch_openreg
