// Private declarations shared by the runtime's translation units.
// Nothing in here is visible to the torch glue: it only sees openreg.h.
#pragma once

#include <openreg.h>

#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace openreg {

constexpr int kMaxDevices = OR_MAX_DEVICES;
constexpr size_t kAlignment = OR_MALLOC_ALIGNMENT;
constexpr size_t kPageSize = 4096;  // capacities and pinned buffers are whole pages

constexpr size_t round_up(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// The entry of an offset->length map whose range [first, first+second)
// contains `key`, or m.end(). Used for device blocks and pinned buffers.
template <typename Key>
typename std::map<Key, size_t>::const_iterator find_enclosing(
    const std::map<Key, size_t>& m, Key key) {
  auto it = m.upper_bound(key);
  if (it == m.begin()) return m.end();
  --it;
  return key < it->first + it->second ? it : m.end();
}

uint64_t now_ns();

// ------------------------------------------------------------ errors
// Record `err` as this thread's last error with a printf-style detail that
// names the call, and return it. Use as `return fail(err, "orX: ...", ...)`.
orError_t fail(orError_t err, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char* fmt, va_list ap);

// ------------------------------------------------------------ config
struct Config {
  int device_count = 2;
  size_t capacity = size_t(4) << 30;  // per device
  bool strict = true;
  int workers = 4;                    // per device
  // OPENREG_MEMCHECK and its options (memcheck.h).
  int memcheck = 0;                   // 0 off, 1 memcheck, 2 memcheck + initcheck
  bool memcheck_raise = false;        // OPENREG_MEMCHECK_ON_ERROR=raise
  bool memcheck_guard_start = false;  // OPENREG_MEMCHECK_GUARD=start
  size_t memcheck_quarantine = size_t(256) << 20;
  orError_t init_error = orSuccess;   // set when the environment is invalid
  std::string init_message;
};
const Config& config();
bool in_forked_child();
#define OPENREG_FORK_MESSAGE                                               \
  "the openreg runtime was initialised in the parent process and cannot " \
  "be used in a forked child; use the 'spawn' start method"

// ------------------------------------------------------------ memory
struct Arena {
  char* base = nullptr;   // device addresses (PROT_NONE in strict mode)
  char* kview = nullptr;  // kernel view; == base when strict mode is off
  size_t capacity = 0;
  int memfd = -1;
  std::mutex mu;
  std::map<size_t, size_t> free_by_off;             // offset -> length
  std::set<std::pair<size_t, size_t>> free_by_len;  // (length, offset)
  std::map<size_t, size_t> used;                    // offset -> length
  size_t used_bytes = 0;
  // Memcheck (memcheck.cpp): what each live and each quarantined allocation
  // occupies, keyed by the allocation's offset.
  struct McAlloc {
    size_t region = 0, region_len = 0;  // whole pages, guard page included
    size_t off = 0, size = 0;           // the allocation itself
    uint64_t seq = 0;                   // its number, for reports
  };
  std::map<size_t, McAlloc> mc_live;
  std::deque<McAlloc> mc_quarantine;   // oldest first
  size_t mc_quarantine_bytes = 0;
  // Initcheck: each page's state (memcheck.cpp's PageState), readable by the
  // fault handler without the lock.
  std::unique_ptr<std::atomic<uint8_t>[]> mc_pages;
};

// Which device's arena holds p, or -1. Lock-free: arena ranges never change.
int device_of_pointer(const void* p);
Arena& arena(int device);

// Validates that [p, p+n) lies inside one live allocation of `device`'s
// arena. On success returns the kernel-view address, on failure nullptr and
// fills *why.
void* kernel_address(int device, const void* p, size_t n, std::string* why);

bool is_pinned_range(const void* p, size_t n);

// ------------------------------------------------------------ devices
struct Stream;
struct Device {
  int index = -1;
  std::unique_ptr<Arena> arena;
  Stream* default_stream = nullptr;
  std::vector<Stream*> streams;  // guarded by the scheduler lock
  std::vector<std::thread> workers;
  bool workers_started = false;
  // This device's workers wait here for runnable items (scheduler lock).
  std::condition_variable work_cv;
};

// Initialise (once) and return the device, or nullptr with the error set.
Device* get_device(int index, const char* call);
// The device if it is already initialised, else nullptr (never initialises).
Device* peek_device(int index);
int current_device_index();
void init_arena(Device& dev);  // memory.cpp
// memory.cpp: give a range back to the arena's free lists (a.mu held).
void arena_insert_free(Arena& a, size_t off, size_t len);
size_t arena_take(Arena& a, size_t len);
void install_fault_handler();  // memory.cpp
void init_device_streams(Device& dev);  // scheduler.cpp

// ------------------------------------------------------------ scheduler
struct EventState;
struct GraphNodes;
struct Capture;

struct Item {
  enum Type { Kernel, HostFunc, Memcpy, Memset, Record, Wait, Graph } type;
  const char* name = "";
  uint64_t order = 0;  // global enqueue order (FIFO between equal priorities)
  unsigned long long correlation = 0;
  uint64_t launch_ns = 0;                 // set while tracing
  unsigned long long launch_thread = 0;   // set while tracing
  std::string annotation;                 // set while tracing
  orKernelFn_t kfn = nullptr;
  orHostFn_t hfn = nullptr;
  void* args = nullptr;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t count = 0;
  int value = 0;
  orMemcpyKind kind = orMemcpyDefault;
  std::shared_ptr<EventState> event;  // Record: the state to complete;
                                      // Wait: the state to wait for
  // orLaunchMayDefer: the inline run may hand the kernel to a worker
  // (cleared once it has); while tracing, when that attempt started (the
  // kernel's trace event spans the attempt and the worker's call).
  bool may_defer = false;
  uint64_t attempt_ns = 0;
  bool untraced = false;  // orLaunchUntraced: no trace record
  // orLaunchKernelOwned: the arguments, freed with the last copy of the item
  // (after it ran, or with the graph that recorded it). args == owned.get().
  std::shared_ptr<void> owned;
  bool args_owned = false;
  // Graph: the executable graph's nodes, and where the launch runs (for the
  // nodes' trace events).
  std::shared_ptr<const GraphNodes> graph;
  int graph_device = 0;
  unsigned long long graph_stream = 0;
};

struct Stream {
  int device = 0;
  int priority = 0;
  unsigned long long id = 0;
  bool is_default = false;
  std::deque<Item> queue;
  // An item (or a synchronous launch) is executing. Set from false to true
  // only by compare-and-swap: under the scheduler lock by workers and locked
  // launches, and without it by a synchronous launch claiming an idle stream
  // (scheduler.cpp, try_claim_idle).
  std::atomic<bool> running{false};
  // queue.size(), written under the scheduler lock, readable without it.
  std::atomic<size_t> queued{0};
  unsigned san_slot = 0;  // the stream sanitizer's index for it (0: none yet)
  std::string name;       // orStreamSetName; guarded by the sanitizer's mutex
  orError_t error = orSuccess;  // first asynchronous error, until reported
  std::string error_message;
  // The capture this stream records into (it began it or joined it), or
  // null. sched_mu() guards it.
  std::shared_ptr<Capture> capture;

  bool idle() const { return queue.empty() && !running.load(); }  // lock held
  // Mark the stream running if it was not: the one way to claim it.
  bool try_claim() {
    bool was_running = false;
    return running.compare_exchange_strong(was_running, true);
  }
};

struct EventState {
  bool completed = false;
  uint64_t time_ns = 0;
  int device = -1;
  Stream* stream = nullptr;  // only compared, never dereferenced after
                             // the stream is destroyed
  // Stream sanitizer: the recording stream's vector clock at the record,
  // valid for sanitizer generation san_gen (0: none). sched_mu() guards it.
  std::vector<uint64_t> san_clock;
  uint64_t san_gen = 0;
};

}  // namespace openreg

struct orStream_st : openreg::Stream {};
struct orEvent_st {
  unsigned flags = 0;
  int device = 0;
  bool recorded = false;
  std::shared_ptr<openreg::EventState> state;
  // Last recorded in a capturing stream: the capture and the nodes a stream
  // that waits on the event depends on (sched_mu() guards both).
  bool captured = false;
  std::weak_ptr<openreg::Capture> capture;
  std::vector<int> capture_deps;
};
