#include "OpenRegGenerator.h"

#include "OpenRegFunctions.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Generator.h>
#include <c10/core/ScalarType.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

namespace torch_openreg {

namespace {
// [docs:rng-state-layout]
// get_rng_state() bytes, as CUDA's: seed (uint64) then offset (int64), both
// in the host's byte order (little-endian here).
constexpr size_t kSeedBytes = sizeof(uint64_t);
constexpr size_t kOffsetBytes = sizeof(int64_t);
constexpr size_t kStateBytes = kSeedBytes + kOffsetBytes;
// [docs:rng-state-layout:end]
}  // namespace

void OpenRegGeneratorState::increase(uint64_t increment) {
  TORCH_CHECK(offset <= std::numeric_limits<uint64_t>::max() - increment,
              "openreg generator: the Philox offset would overflow (offset ", offset,
              " + ", increment, ")");
  offset += increment;
}

c10::intrusive_ptr<OpenRegGeneratorState> OpenRegGeneratorState::clone() const {
  auto s = c10::make_intrusive<OpenRegGeneratorState>(seed);
  s->offset = offset;
  return s;
}

OpenRegGeneratorImpl::OpenRegGeneratorImpl(c10::DeviceIndex device_index)
    : OpenRegGeneratorImpl(device_index, c10::make_intrusive<OpenRegGeneratorState>()) {}

OpenRegGeneratorImpl::OpenRegGeneratorImpl(c10::DeviceIndex device_index,
                                           c10::intrusive_ptr<OpenRegGeneratorState> state)
    : c10::GeneratorImpl{c10::Device(c10::DeviceType::PrivateUse1, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)},
      state_(std::move(state)) {}

// As on CUDA: a generator whose state a graph is capturing cannot be
// reseeded or read, or the graph's replays would not match eager runs.
void OpenRegGeneratorImpl::check_not_capturing(const char* what) const {
  TORCH_CHECK(!state_->capturing, "openreg generator: cannot call ", what,
              " while a graph is capturing this generator's state");
}

void OpenRegGeneratorImpl::set_current_seed(uint64_t seed) {
  check_not_capturing("set_current_seed");
  state_->seed = seed;
  state_->offset = 0;
}

void OpenRegGeneratorImpl::set_offset(uint64_t offset) {
  check_not_capturing("set_offset");
  // Kernels start on a Philox block (four positions), as on CUDA.
  TORCH_CHECK(offset % 4 == 0, "offset must be a multiple of 4");
  state_->offset = offset;
}

uint64_t OpenRegGeneratorImpl::get_offset() const {
  check_not_capturing("get_offset");
  return state_->offset;
}

uint64_t OpenRegGeneratorImpl::current_seed() const { return state_->seed; }

uint64_t OpenRegGeneratorImpl::seed() {
  const uint64_t s = c10::detail::getNonDeterministicRandom(true);
  set_current_seed(s);
  return s;
}

void OpenRegGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  const auto n = new_state.numel();
  // 8 bytes (a seed alone) or 16 (seed and offset), as CUDA accepts.
  TORCH_CHECK(n == static_cast<int64_t>(kStateBytes) || n == static_cast<int64_t>(kSeedBytes),
              "RNG state is wrong size: an openreg generator's state is ", kStateBytes,
              " bytes (a uint64 seed and an int64 Philox offset), got ", n);
  const auto* bytes = new_state.data_dtype_initialized<uint8_t>();
  uint64_t seed = 0;
  int64_t offset = 0;
  std::memcpy(&seed, bytes, kSeedBytes);
  if (n == static_cast<int64_t>(kStateBytes)) std::memcpy(&offset, bytes + kSeedBytes, kOffsetBytes);
  TORCH_CHECK(offset >= 0, "RNG state: the Philox offset must not be negative, got ", offset);
  check_not_capturing("set_state");
  TORCH_CHECK(offset % 4 == 0, "offset must be a multiple of 4");
  state_->seed = seed;
  state_->offset = static_cast<uint64_t>(offset);
}

c10::intrusive_ptr<c10::TensorImpl> OpenRegGeneratorImpl::get_state() const {
  auto t = at::detail::empty_cpu({static_cast<int64_t>(kStateBytes)}, c10::ScalarType::Byte,
                                 std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  auto* bytes = t.data_ptr<uint8_t>();
  const uint64_t seed = state_->seed;
  const int64_t offset = static_cast<int64_t>(state_->offset);
  std::memcpy(bytes, &seed, kSeedBytes);
  std::memcpy(bytes + kSeedBytes, &offset, kOffsetBytes);
  return t.getIntrusivePtr();
}

void OpenRegGeneratorImpl::graphsafe_set_state(
    const c10::intrusive_ptr<c10::GeneratorImpl>& gen) {
  auto* other = dynamic_cast<OpenRegGeneratorImpl*>(gen.get());
  TORCH_CHECK(other, "graphsafe_set_state: expected an openreg generator, got one for ",
              gen->device());
  state_ = other->state_;
}

c10::intrusive_ptr<c10::GeneratorImpl> OpenRegGeneratorImpl::graphsafe_get_state() const {
  // A generator that shares this one's state (not a copy).
  return c10::make_intrusive<OpenRegGeneratorImpl>(device().index(), state_);
}

// [docs:rng-philox-state]
PhiloxState OpenRegGeneratorImpl::philox_state(uint64_t increment) {
  increment = (increment + 3) / 4 * 4;  // CUDA's round-up to a Philox block
  PhiloxState s;
  if (PinnedPhilox* p = pinnedPhilox(); C10_UNLIKELY(p != nullptr) && p->owner == state_.get()) {
    // A graph replay: the node's reservation, not the generator.
    TORCH_CHECK(p->used + increment <= p->reserved, "openreg graph replay: '", p->op,
                "' drew ", p->used + increment, " random offsets, more than the ",
                p->reserved, " its capture reserved");
    s = p->state;
    s.offset_intragraph += p->used;
    p->used += increment;
    return s;
  }
  if (state_->capturing) {
    s.captured = state_->slots;
    s.offset_intragraph = state_->offset_intragraph;
    state_->offset_intragraph += increment;
    return s;
  }
  s.seed = state_->seed;
  s.offset = state_->offset;
  state_->increase(increment);
  return s;
}
// [docs:rng-philox-state:end]

void OpenRegGeneratorImpl::capture_prologue() {
  TORCH_CHECK(!state_->capturing,
              "openreg generator: its state is already being captured by another graph");
  state_->capturing = true;
  state_->offset_intragraph = 0;
  state_->slots = std::make_shared<std::pair<uint64_t, uint64_t>>(state_->seed, state_->offset);
}

uint64_t OpenRegGeneratorImpl::capture_epilogue() {
  TORCH_CHECK(state_->capturing, "openreg generator: capture_epilogue without a capture");
  state_->capturing = false;
  return state_->offset_intragraph;
}

void OpenRegGeneratorImpl::replay_prologue(uint64_t wholegraph_increment) {
  check_not_capturing("replay_prologue");
  TORCH_CHECK(state_->slots, "openreg generator: replay_prologue before any capture");
  // The replay's kernels read these when they run: this replay's seed and
  // base offset. Then the generator moves past everything the graph draws.
  *state_->slots = {state_->seed, state_->offset};
  state_->increase(wholegraph_increment);
}

std::pair<uint64_t, uint64_t> OpenRegGeneratorImpl::replay_values(uint64_t wholegraph_increment) {
  check_not_capturing("replay_values");
  std::pair<uint64_t, uint64_t> v{state_->seed, state_->offset};
  state_->increase(wholegraph_increment);
  return v;
}

PinnedPhilox*& pinnedPhilox() {
  thread_local PinnedPhilox* p = nullptr;
  return p;
}

OpenRegGeneratorImpl* OpenRegGeneratorImpl::clone_impl() const {
  return new OpenRegGeneratorImpl(device().index(), state_->clone());
}

const at::Generator& getDefaultOpenRegGenerator(c10::DeviceIndex device_index) {
  static std::once_flag once;
  static std::vector<at::Generator>* gens = nullptr;
  std::call_once(once, [] {
    gens = new std::vector<at::Generator>();
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      gens->push_back(at::make_generator<OpenRegGeneratorImpl>(i));
    }
  });
  if (device_index < 0) device_index = current_device();
  check_device_index(device_index);
  return (*gens)[device_index];
}

at::Generator createOpenRegGenerator(c10::DeviceIndex device_index) {
  if (device_index < 0) device_index = current_device();
  check_device_index(device_index);
  return at::make_generator<OpenRegGeneratorImpl>(device_index);
}

OpenRegGeneratorImpl* openregGeneratorOrDefault(const std::optional<at::Generator>& gen,
                                                c10::DeviceIndex device) {
  // check_generator raises CUDA's "Expected a 'openreg' device type for
  // generator but found 'cpu'" for a CPU generator.
  return at::get_generator_or_default<OpenRegGeneratorImpl>(gen,
                                                            getDefaultOpenRegGenerator(device));
}

PhiloxState takePhiloxState(const std::optional<at::Generator>& gen, c10::DeviceIndex device,
                            uint64_t n) {
  OpenRegGeneratorImpl* g = openregGeneratorOrDefault(gen, device);
  // See Note [Acquire lock when using random generators].
  std::lock_guard<std::mutex> lock(g->mutex_);
  return g->philox_state(n);
}

}  // namespace torch_openreg
