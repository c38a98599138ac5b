#include "OpenRegStream.h"

#include "OpenRegFunctions.h"

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

namespace torch_openreg {

namespace {

constexpr int kMaxStreams = 4096;  // per device
constexpr int kPoolSize = 32;      // per priority level, as in CUDA
// Upper bound for the pool tables; the levels in use come from the runtime
// (orDeviceGetStreamPriorityRange), see priority_levels().
constexpr int kMaxPriorityLevels = 8;

int priority_levels() {
  static const int levels = [] {
    int least = 0, greatest = 0;
    OPENREG_CHECK(orDeviceGetStreamPriorityRange(&least, &greatest));
    int n = least - greatest + 1;
    TORCH_CHECK(n >= 1 && n <= kMaxPriorityLevels, "openreg: the runtime reports ",
                n, " stream priority levels; the glue supports at most ",
                kMaxPriorityLevels);
    return n;
  }();
  return levels;
}

struct DeviceStreams {
  // Entries are written once, before `count` is published, then read without
  // locking. (`count` first: every launch reads it and, usually, handles[0],
  // the default stream, in the same cache line.)
  std::atomic<int> count{0};
  std::array<std::atomic<orStream_t>, kMaxStreams> handles{};
  std::array<int, kMaxStreams> priorities{};
  std::once_flag init;
  std::mutex mu;
  // Pools: lazily filled ids per priority level.
  std::array<std::array<int, kPoolSize>, kMaxPriorityLevels> pool_ids{};
  std::array<bool, kMaxPriorityLevels> pool_ready{};
  std::array<std::atomic<uint32_t>, kMaxPriorityLevels> pool_next{};
};

// (The tables are made out of line: with their construction inlined, the
// compiler would not inline this lookup, which every launch and allocation
// makes.)
C10_NOINLINE DeviceStreams* make_tables() { return new DeviceStreams[OR_MAX_DEVICES]; }

inline DeviceStreams& table(c10::DeviceIndex device) {
  static DeviceStreams* const tables = make_tables();
  return tables[device];
}

int add_stream_locked(DeviceStreams& t, c10::DeviceIndex device, int priority) {
  int n = t.count.load();
  TORCH_CHECK(n < kMaxStreams, "openreg: too many streams on device openreg:",
              static_cast<int>(device), " (limit ", kMaxStreams, ")");
  orStream_t s = nullptr;
  {
    DeviceScope scope(device);  // streams are created on the current device
    OPENREG_CHECK(orStreamCreateWithPriority(&s, 0, priority));
  }
  int actual = 0;
  OPENREG_CHECK(orStreamGetPriority(s, &actual));
  t.handles[n].store(s, std::memory_order_relaxed);
  t.priorities[n] = actual;
  t.count.store(n + 1, std::memory_order_release);
  return n;
}

DeviceStreams& init_table(c10::DeviceIndex device) {
  check_device_index(device);
  DeviceStreams& t = table(device);
  std::call_once(t.init, [&] {
    std::lock_guard<std::mutex> g(t.mu);
    add_stream_locked(t, device, 0);  // id 0: the default stream
    const std::string name = "the default stream of openreg:" + std::to_string(device);
    OPENREG_CHECK(orStreamSetName(t.handles[0].load(), name.c_str()));
  });
  return t;
}

// Per-thread current stream ids per device; 0 is the default stream.
thread_local std::array<int, OR_MAX_DEVICES> t_current{};

c10::Stream make(c10::DeviceIndex device, int id) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, device),
                     static_cast<c10::StreamId>(id));
}

}  // namespace

c10::Stream getDefaultStream(c10::DeviceIndex device) {
  init_table(device);
  return make(device, 0);
}

c10::Stream getCurrentStream(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  // Hot path (every allocation): a known device whose table is set up.
  if (C10_LIKELY(device < OR_MAX_DEVICES && table(device).count.load(std::memory_order_acquire) > 0))
    return make(device, t_current[device]);
  init_table(device);
  return make(device, t_current[device]);
}

c10::Stream exchangeCurrentStream(c10::Stream stream) {
  auto device = stream.device_index();
  nativeStream(stream);  // validates
  auto prev = make(device, t_current[device]);
  t_current[device] = static_cast<int>(stream.id());
  return prev;
}

c10::Stream getStreamFromPool(c10::DeviceIndex device, int priority) {
  if (device < 0) device = current_device();
  DeviceStreams& t = init_table(device);
  int level = priority >= 0 ? 0 : -priority;
  if (level >= priority_levels()) level = priority_levels() - 1;
  {
    std::lock_guard<std::mutex> g(t.mu);
    if (!t.pool_ready[level]) {
      for (int i = 0; i < kPoolSize; ++i)
        t.pool_ids[level][i] = add_stream_locked(t, device, -level);
      t.pool_ready[level] = true;
    }
  }
  uint32_t k = t.pool_next[level].fetch_add(1) % kPoolSize;
  return make(device, t.pool_ids[level][k]);
}

c10::Stream getNewStream(c10::DeviceIndex device, int priority) {
  if (device < 0) device = current_device();
  DeviceStreams& t = init_table(device);
  std::lock_guard<std::mutex> g(t.mu);
  return make(device, add_stream_locked(t, device, priority));
}

orStream_t nativeStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "expected an openreg stream, got a stream on ", stream.device());
  auto device = stream.device_index();
  DeviceStreams& t = init_table(device);
  auto id = stream.id();
  TORCH_CHECK(id >= 0 && id < t.count.load(std::memory_order_acquire),
              "openreg: unknown stream id ", id, " on device openreg:",
              static_cast<int>(device));
  return t.handles[id].load(std::memory_order_relaxed);
}

c10::Stream streamFromNative(c10::DeviceIndex device, orStream_t handle) {
  DeviceStreams& t = init_table(device);
  const int n = t.count.load(std::memory_order_acquire);
  for (int id = 0; id < n; ++id) {
    if (t.handles[id].load(std::memory_order_relaxed) == handle) return make(device, id);
  }
  TORCH_CHECK(false, "openreg: the stream handle ", static_cast<const void*>(handle),
              " is not a stream of openreg:", static_cast<int>(device),
              " made through torch (torch.Stream, torch.openreg.Stream, the stream pool)");
}

int streamPriority(const c10::Stream& stream) {
  nativeStream(stream);
  return table(stream.device_index()).priorities[stream.id()];
}

orStream_t currentNativeStream(c10::DeviceIndex device) {
  // Hot path (every kernel launch): a known device whose table is set up.
  if (C10_LIKELY(device >= 0 && device < OR_MAX_DEVICES)) {
    DeviceStreams& t = table(device);
    if (C10_LIKELY(t.count.load(std::memory_order_acquire) > 0))
      return t.handles[t_current[device]].load(std::memory_order_relaxed);
  }
  DeviceStreams& t = init_table(device);
  return t.handles[t_current[device]].load(std::memory_order_relaxed);
}

}  // namespace torch_openreg
