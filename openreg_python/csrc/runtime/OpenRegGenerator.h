// The openreg random number generator: counter-based Philox with CUDA's
// (seed, offset) state.
//
// Kernels do not keep an engine: each random kernel takes a (seed, base
// offset) pair from the generator when it is enqueued (philox_state()) and
// computes every element from its stream position (aten/core/Philox.h has the
// rule). That is CUDA's model: the state is 16 bytes, get_rng_state() is
// (seed, offset) as two little-endian uint64, and DTensor's RNG tracker can
// move the offset to give each shard its part of one stream.
//
// Graph capture (CUDA's Note [CUDA Graph-safe RNG states]): the state lives
// in a shared OpenRegGeneratorState object that graphsafe_get_state() hands
// out and graphsafe_set_state() swaps in. While a graph captures, kernels get
// a PhiloxState that refers to the capture's seed/offset slots plus an
// intra-graph offset instead of values, and every replay refills the slots
// from the generator and advances its offset by the whole graph's increment
// (capture_prologue / capture_epilogue / replay_prologue).
// Vendor: these are the hooks your graph implementation calls; the state
// layout is what DTensor and torch.random code assume of an accelerator.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <memory>
#include <utility>

namespace torch_openreg {

// What a random kernel receives (CUDA's PhiloxCudaState): either the seed
// and base offset themselves, or, inside a captured graph, where to read them
// when the kernel runs plus the kernel's offset within the graph.
struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  // Captured: the capture's slots (refilled by every replay) and the offset
  // of this kernel inside the graph.
  std::shared_ptr<const std::pair<uint64_t, uint64_t>> captured;
  uint64_t offset_intragraph = 0;
};

// The (seed, base offset) a kernel uses, read when it runs (CUDA's
// at::cuda::philox::unpack).
inline std::pair<uint64_t, uint64_t> unpack(const PhiloxState& s) {
  if (s.captured) return {s.captured->first, s.captured->second + s.offset_intragraph};
  return {s.seed, s.offset};
}

// A generator's state, shared between a generator and the graphs that
// registered it (CUDA's CUDAGeneratorState).
struct OpenRegGeneratorState : public c10::intrusive_ptr_target {
  uint64_t seed;
  uint64_t offset = 0;
  // Capture bookkeeping: one capture at a time per state.
  bool capturing = false;
  uint64_t offset_intragraph = 0;
  std::shared_ptr<std::pair<uint64_t, uint64_t>> slots;  // (seed, offset) for replays

  explicit OpenRegGeneratorState(uint64_t s = c10::default_rng_seed_val) : seed(s) {}
  // Advance by `increment` (already a multiple of 4); checked for overflow.
  void increase(uint64_t increment);
  c10::intrusive_ptr<OpenRegGeneratorState> clone() const;
};

// A graph node's share of the generator (see the graph glue, Graph.cpp): at
// capture the node reserves `reserved` offset units of the capture and gets
// `state` (the capture's slots + its offset in the graph); while its replay
// runs the node's operator, philox_state() of that generator on this thread
// hands out parts of the reservation instead of advancing the generator.
struct PinnedPhilox {
  const OpenRegGeneratorState* owner = nullptr;
  PhiloxState state;
  uint64_t reserved = 0;
  uint64_t used = 0;
  const char* op = "";
};
// This thread's pinned share, or null.
PinnedPhilox*& pinnedPhilox();

struct OpenRegGeneratorImpl : public c10::GeneratorImpl {
  explicit OpenRegGeneratorImpl(c10::DeviceIndex device_index);
  OpenRegGeneratorImpl(c10::DeviceIndex device_index,
                       c10::intrusive_ptr<OpenRegGeneratorState> state);
  ~OpenRegGeneratorImpl() override = default;

  void set_current_seed(uint64_t seed) override;  // also resets the offset to 0
  void set_offset(uint64_t offset) override;      // a multiple of 4, as on CUDA
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override;
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;

  // The inputs of one random kernel that consumes `increment` offset units
  // (philox::increment_for(n) for n elements), and advances the offset (or,
  // while capturing, the intra-graph offset) by it. Call with mutex_ held
  // (see Note [Acquire lock when using random generators]).
  PhiloxState philox_state(uint64_t increment);

  // Graph capture hooks (see the header comment). Call with mutex_ held.
  void capture_prologue();
  uint64_t capture_epilogue();  // the whole graph's offset increment
  void replay_prologue(uint64_t wholegraph_increment);
  // replay_prologue for a replay that runs later, in stream order: returns
  // this replay's (seed, base offset) instead of writing the slots (the
  // caller writes them on the replay's stream, as CUDA's replay fills its
  // seed/offset tensors with kernels) and advances the generator.
  std::pair<uint64_t, uint64_t> replay_values(uint64_t wholegraph_increment);
  // The capture's slots (null before any capture) and the state's identity.
  std::shared_ptr<std::pair<uint64_t, uint64_t>> capture_slots() const { return state_->slots; }
  const OpenRegGeneratorState* state_id() const { return state_.get(); }
  bool capturing() const { return state_->capturing; }

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  OpenRegGeneratorImpl* clone_impl() const override;
  void check_not_capturing(const char* what) const;
  c10::intrusive_ptr<OpenRegGeneratorState> state_;
};

const at::Generator& getDefaultOpenRegGenerator(c10::DeviceIndex device_index = -1);
at::Generator createOpenRegGenerator(c10::DeviceIndex device_index = -1);

// The generator a random kernel on `device` uses: `gen` if given (it must be
// an openreg generator, as CUDA kernels require CUDA generators), else the
// device's default one.
OpenRegGeneratorImpl* openregGeneratorOrDefault(const std::optional<at::Generator>& gen,
                                                c10::DeviceIndex device);

// Takes the Philox inputs for one kernel that fills `n` elements on `device`,
// under the generator's lock.
PhiloxState takePhiloxState(const std::optional<at::Generator>& gen, c10::DeviceIndex device,
                            uint64_t n);

}  // namespace torch_openreg
