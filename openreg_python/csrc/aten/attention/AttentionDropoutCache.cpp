#include "AttentionDropoutCache.h"

#include "aten/core/Philox.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

namespace torch_openreg {

// Runs inside the attention kernel, on CPU aliases: the mask lands in device
// memory (KernelScope).
at::Tensor keep_mask(const at::Tensor& like, double dropout_p, DropoutRng rng) {
  auto keep = at::empty(like.sizes(), like.options().dtype(at::kBool));
  bool* data = keep.data_ptr<bool>();
  const int64_t n = keep.numel();
  const double p1m = 1.0 - dropout_p;
  at::parallel_for(0, (n + 3) / 4, 1 << 12, [&](int64_t g0, int64_t g1) {
    philox::for_groups<1>(rng.seed, rng.offset, n, g0, g1, [&](int64_t i, const uint32_t (&w)[1]) {
      data[i] = philox::to_unit32(w[0]) < p1m;  // bernoulli_'s rule
    });
  });
  return keep;
}

KeepMaskCache& keep_mask_cache() {
  static auto* c = new KeepMaskCache();
  return *c;
}

}  // namespace torch_openreg
