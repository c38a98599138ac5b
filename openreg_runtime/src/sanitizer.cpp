// The stream-race sanitizer: happens-before tracking with vector clocks over
// streams and the host, and a shadow map of the memory that device work
// touches. See sanitizer.h for the model and docs/sanitizer.md for what it
// reports.
//
// Why in the runtime: the runtime is the one place that sees every launch,
// copy, memset, event record and wait, synchronisation and free, whatever
// issued them (the torch glue, the caching allocators, a profiler, a test
// talking to the C API). Only a kernel's memory accesses are invisible here,
// so its launcher declares them (orSanitizerDeclareAccess).
// Vendor: a real driver does not carry this; it is the simulation's
// equivalent of running under compute-sanitizer.
#include "sanitizer.h"

#include "scheduler.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace openreg {
namespace san {

namespace {
bool env_on() {
  const char* s = getenv("OPENREG_STREAM_SANITIZER");
  return s && *s && strcmp(s, "0") != 0;
}
}  // namespace

std::atomic<bool> g_on{env_on()};

namespace {

using Clock = std::vector<uint64_t>;

uint64_t at(const Clock& c, unsigned i) { return i < c.size() ? c[i] : 0; }

void join(Clock& a, const Clock& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (size_t i = 0; i < b.size(); ++i) a[i] = std::max(a[i], b[i]);
}

// Slot 0 is the host (all host threads together: they order each other
// through locks the runtime cannot see, so they count as one); streams get
// slots 1, 2, ... on first sight and keep them for the process's life.
struct Slot {
  int device = -1;
  unsigned long long id = 0;
  bool is_default = false;
  std::string name;  // orStreamSetName at first sight
  Clock clock;
};

struct Access {
  unsigned slot = 0;
  uint64_t epoch = 0;
  const char* op = "";
  std::string label;
  bool freed = false;  // the memory was freed after this access
};

// The accesses to one byte range [start, end): the last write, and the last
// read of each slot since that write.
struct Seg {
  uintptr_t end = 0;
  bool has_write = false;
  Access write;
  std::vector<Access> reads;
};

struct State {
  std::mutex mu;
  uint64_t gen = 1;  // bumped when history is forgotten (enable/disable)
  std::vector<Slot> slots = std::vector<Slot>(1);
  std::map<uintptr_t, Seg> shadow;  // start -> segment, non-overlapping
};

State& state() {
  static auto* s = new State();  // leaked: workers outlive static dtors
  return *s;
}

// Accesses declared for the next launch from this thread, and the kernel
// this thread is running (declarations from inside a kernel body).
struct Decl {
  uintptr_t p;
  size_t n;
  bool write;
  std::string label;
};
thread_local std::vector<Decl> t_pending;
struct KernelCtx {
  bool active = false;
  unsigned slot = 0;
  uint64_t epoch = 0;
  uint64_t gen = 0;
  Clock clock;
  const char* op = "";
};
thread_local KernelCtx t_ctx;

// Who is accessing now.
struct Cur {
  unsigned slot;
  uint64_t epoch;
  const Clock* clock;
  const char* op;
};

unsigned slot_of(State& S, Stream* s) {
  if (s->san_slot == 0) {
    s->san_slot = unsigned(S.slots.size());
    Slot info;
    info.device = s->device;
    info.id = s->id;
    info.is_default = s->is_default;
    info.name = s->name;
    S.slots.push_back(std::move(info));
  }
  return s->san_slot;
}

// [docs:sanitizer-clocks]
// New work on `slot`: it runs after everything the host knows is done (the
// host launched it), and gets the next epoch of its stream.
uint64_t tick(State& S, unsigned slot) {
  Clock& c = S.slots[slot].clock;
  join(c, S.slots[0].clock);
  if (c.size() <= slot) c.resize(slot + 1, 0);
  return ++c[slot];
}

// An earlier access happened before the current one if it was made on the
// same stream, or if the current clock has seen its epoch (through events,
// waits, synchronisations and the host's launches).
bool ordered(const Access& a, const Cur& c) {
  return a.slot == c.slot || at(*c.clock, a.slot) >= a.epoch;
}
// [docs:sanitizer-clocks:end]

struct Race {
  Access prev;
  bool prev_write = false;
  uintptr_t p = 0;
  size_t n = 0;
  bool write = false;
  std::string label;
};

// Does an access to [p, p+n) by `c` race with a recorded one?
bool check(State& S, uintptr_t p, size_t n, bool write, const Cur& c,
           const std::string& label, Race* race) {
  auto it = S.shadow.upper_bound(p);
  if (it != S.shadow.begin()) {
    auto before = std::prev(it);
    if (before->second.end > p) it = before;
  }
  for (; it != S.shadow.end() && it->first < p + n; ++it) {
    const Seg& g = it->second;
    const Access* bad = nullptr;
    bool bad_write = false;
    if (g.has_write && !ordered(g.write, c)) {
      bad = &g.write;
      bad_write = true;
    } else if (write) {
      for (const Access& r : g.reads) {
        if (!ordered(r, c)) {
          bad = &r;
          break;
        }
      }
    }
    if (bad) {
      race->prev = *bad;
      race->prev_write = bad_write;
      race->p = p;
      race->n = n;
      race->write = write;
      race->label = label;
      return true;
    }
  }
  return false;
}

void split_at(State& S, uintptr_t x) {
  auto it = S.shadow.upper_bound(x);
  if (it == S.shadow.begin()) return;
  --it;
  if (it->first < x && x < it->second.end) {
    Seg right = it->second;
    it->second.end = x;
    S.shadow.emplace(x, std::move(right));
  }
}

void erase_range(State& S, uintptr_t p, uintptr_t e) {
  split_at(S, p);
  split_at(S, e);
  S.shadow.erase(S.shadow.lower_bound(p), S.shadow.lower_bound(e));
}

void record(State& S, uintptr_t p, size_t n, bool write, const Cur& c,
            const std::string& label) {
  const uintptr_t e = p + n;
  Access a;
  a.slot = c.slot;
  a.epoch = c.epoch;
  a.op = c.op;
  a.label = label;
  if (write) {  // a write supersedes everything before it in the range
    erase_range(S, p, e);
    Seg g;
    g.end = e;
    g.has_write = true;
    g.write = std::move(a);
    S.shadow.emplace(p, std::move(g));
    return;
  }
  split_at(S, p);
  split_at(S, e);
  uintptr_t cur = p;
  auto it = S.shadow.lower_bound(p);
  while (cur < e) {
    if (it == S.shadow.end() || it->first > cur) {
      Seg gap;
      gap.end = it == S.shadow.end() ? e : std::min(e, it->first);
      it = S.shadow.emplace_hint(it, cur, std::move(gap));
    }
    Seg& g = it->second;
    auto r = std::find_if(g.reads.begin(), g.reads.end(),
                          [&](const Access& x) { return x.slot == c.slot; });
    if (r != g.reads.end()) *r = a;
    else g.reads.push_back(a);
    cur = g.end;
    ++it;
  }
}

std::string stream_name(const State& S, unsigned slot) {
  if (slot == 0) return "the host";
  const Slot& i = S.slots[slot];
  if (!i.name.empty()) return i.name;
  if (i.is_default) return format("the runtime's default stream of openreg:%d", i.device);
  return format("stream %llu of openreg:%d", i.id, i.device);
}

std::string memory_name(uintptr_t p, size_t n) {
  int d = device_of_pointer(reinterpret_cast<const void*>(p));
  if (d >= 0)
    return format("openreg:%d memory at 0x%llx (%zu bytes)", d,
                  static_cast<unsigned long long>(p), n);
  return format("pinned host memory at 0x%llx (%zu bytes)",
                static_cast<unsigned long long>(p), n);
}

std::string what(const std::string& label) {
  return label.empty() ? std::string() : " " + label;
}

orError_t report(const State& S, const Race& r, const Cur& c) {
  const std::string now = stream_name(S, c.slot);
  const std::string then = stream_name(S, r.prev.slot);
  const char* kind;
  std::string why, fix;
  if (r.prev.freed) {
    kind = "freed memory reused while its last user may still be running";
    why = format("The memory was freed after '%s' used it on %s and then reused "
                 "on %s, which is not ordered after that use: on a real device "
                 "'%s' may still be running when '%s' touches the block.",
                 r.prev.op, then.c_str(), now.c_str(), r.prev.op, c.op);
    fix = format("call tensor.record_stream(s) for the stream s that used the "
                 "tensor (%s) before the tensor is freed, so the caching "
                 "allocator reuses its block only after that stream's work is "
                 "done; or make the tensor's own stream wait for it "
                 "(wait_stream or an Event) before the tensor is freed.",
                 then.c_str());
  } else if (c.slot == 0) {
    kind = "the host reads memory that device work may still be writing";
    why = format("'%s' on %s is asynchronous and the host has not synchronised "
                 "with it since.", r.prev.op, then.c_str());
    fix = format("synchronise before the host reads the buffer: synchronize() "
                 "the stream (%s), or an Event recorded after '%s', or "
                 "torch.openreg.synchronize().", then.c_str(), r.prev.op);
  } else {
    kind = "a race between two streams";
    why = format("Nothing orders '%s' on %s before '%s' on %s (no event wait, "
                 "wait_stream or synchronisation connects them since), so on a "
                 "real device the two may run at the same time.",
                 r.prev.op, then.c_str(), c.op, now.c_str());
    fix = format("make %s wait for %s before '%s': consumer.wait_stream(producer) "
                 "(e.g. torch.openreg.current_stream().wait_stream(side)), or "
                 "record an Event on %s after '%s' and call wait_event(event) on "
                 "%s. If the memory belongs to a tensor freed in between, "
                 "tensor.record_stream(stream) keeps it from being reused early.",
                 now.c_str(), then.c_str(), c.op, then.c_str(), r.prev.op,
                 now.c_str());
  }
  return fail(orErrorStreamRace,
              "openreg stream sanitizer: %s, on %s.\n"
              "  now:    '%s' %s it%s on %s\n"
              "  before: '%s' %s it%s on %s\n"
              "%s\nFix: %s%s",
              kind, memory_name(r.p, r.n).c_str(), c.op,
              r.write ? "writes" : "reads", what(r.label).c_str(), now.c_str(),
              r.prev.op, r.prev_write ? "wrote" : "read", what(r.prev.label).c_str(),
              then.c_str(), why.c_str(), fix.c_str(),
              (S.slots[c.slot].name.empty() && c.slot) ||
                      (S.slots[r.prev.slot].name.empty() && r.prev.slot)
                  ? "\n(Streams are named by their runtime id, "
                    "torch.openreg.Stream.native_id.)"
                  : "");
}

// Device memory and pinned host memory are tracked; pageable host memory is
// not (copies from it are staged synchronously, nothing asynchronous can
// touch it).
bool tracked(const void* p, size_t n) {
  return n && p && (device_of_pointer(p) >= 0 || is_pinned_range(p, n));
}

// Check every access of one operation, then record them all: a racing
// operation records nothing (it does not run).
orError_t check_and_record(State& S, const Cur& c, const Decl* d, size_t count) {
  Race race;
  for (size_t i = 0; i < count; ++i) {
    if (check(S, d[i].p, d[i].n, d[i].write, c, d[i].label, &race))
      return report(S, race, c);
  }
  for (size_t i = 0; i < count; ++i) record(S, d[i].p, d[i].n, d[i].write, c, d[i].label);
  return orSuccess;
}

}  // namespace

orError_t kernel_begin(Stream* s, const char* name, bool in_kernel) {
  std::vector<Decl> pending;
  pending.swap(t_pending);
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  const unsigned slot = slot_of(S, s);
  const uint64_t epoch = tick(S, slot);
  const Cur c{slot, epoch, &S.slots[slot].clock, name};
  if (orError_t e = check_and_record(S, c, pending.data(), pending.size())) return e;
  if (in_kernel) {
    t_ctx.active = true;
    t_ctx.slot = slot;
    t_ctx.epoch = epoch;
    t_ctx.gen = S.gen;
    t_ctx.clock = S.slots[slot].clock;
    t_ctx.op = name;
  }
  return orSuccess;
}

void kernel_end() { t_ctx.active = false; }

void launch(Stream* s) {
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  tick(S, slot_of(S, s));
}

orError_t copy(Stream* s, void* dst, const void* src, size_t count,
               orMemcpyKind kind, const char* call) {
  (void)kind;
  Decl d[2];
  size_t nd = 0;
  if (tracked(src, count)) d[nd++] = {reinterpret_cast<uintptr_t>(src), count, false, {}};
  if (tracked(dst, count)) d[nd++] = {reinterpret_cast<uintptr_t>(dst), count, true, {}};
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  const unsigned slot = slot_of(S, s);
  const uint64_t epoch = tick(S, slot);
  return check_and_record(S, Cur{slot, epoch, &S.slots[slot].clock, call}, d, nd);
}

orError_t memset(Stream* s, void* dst, size_t count, const char* call) {
  Decl d{reinterpret_cast<uintptr_t>(dst), count, true, {}};
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  const unsigned slot = slot_of(S, s);
  const uint64_t epoch = tick(S, slot);
  return check_and_record(S, Cur{slot, epoch, &S.slots[slot].clock, call}, &d,
                          count ? 1 : 0);
}

uint64_t epoch_of(Stream* s) {
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  const unsigned slot = slot_of(S, s);
  return at(S.slots[slot].clock, slot);
}

void host_after(Stream* s, int host_sync, uint64_t epoch_before) {
  if (host_sync == 0) return;
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  const unsigned slot = slot_of(S, s);
  Clock c = S.slots[slot].clock;
  if (host_sync == 1 && c.size() > slot) c[slot] = std::min(c[slot], epoch_before);
  join(S.slots[0].clock, c);
}

void event_record(EventState* st, Stream* s) {
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  const unsigned slot = slot_of(S, s);
  join(S.slots[slot].clock, S.slots[0].clock);
  st->san_clock = S.slots[slot].clock;
  st->san_gen = S.gen;
}

void stream_wait(Stream* s, const EventState* st) {
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  const unsigned slot = slot_of(S, s);
  join(S.slots[slot].clock, S.slots[0].clock);
  if (st->san_gen == S.gen) join(S.slots[slot].clock, st->san_clock);
}

void host_join_stream(Stream* s) {
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  if (s->san_slot != 0) join(S.slots[0].clock, S.slots[s->san_slot].clock);
}

void host_join_event(const EventState* st) {
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  if (st->san_gen == S.gen) join(S.slots[0].clock, st->san_clock);
}

void host_join_device(int device) {
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  for (size_t i = 1; i < S.slots.size(); ++i) {
    if (S.slots[i].device == device) join(S.slots[0].clock, S.slots[i].clock);
  }
}

void set_name(Stream* s, const char* name) {
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  s->name = name ? name : "";
  if (s->san_slot) S.slots[s->san_slot].name = s->name;
}

void freed(const void* p, size_t n) {
  if (!p || !n) return;
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  const auto b = reinterpret_cast<uintptr_t>(p), e = b + n;
  split_at(S, b);
  split_at(S, e);
  for (auto it = S.shadow.lower_bound(b); it != S.shadow.end() && it->first < e; ++it) {
    it->second.write.freed = true;
    for (Access& r : it->second.reads) r.freed = true;
  }
}

void forget(const void* p, size_t n) {
  if (!p || !n) return;
  State& S = state();
  std::lock_guard<std::mutex> g(S.mu);
  const auto b = reinterpret_cast<uintptr_t>(p);
  erase_range(S, b, b + n);
}

}  // namespace san
}  // namespace openreg

using namespace openreg;

extern "C" {

orError_t orSanitizerSetEnabled(int enabled) {
  san::State& S = san::state();
  std::lock_guard<std::mutex> g(S.mu);
  // Forget everything: history from before a disabled stretch would be
  // incomplete, and clocks carried across it would order nothing real.
  S.gen++;
  S.shadow.clear();
  for (san::Slot& s : S.slots) s.clock.clear();
  san::t_pending.clear();
  san::g_on.store(enabled != 0, std::memory_order_relaxed);
  return orSuccess;
}

orError_t orSanitizerGetEnabled(int* enabled) {
  if (!enabled) return fail(orErrorInvalidValue, "orSanitizerGetEnabled: enabled is NULL");
  *enabled = san::on() ? 1 : 0;
  return orSuccess;
}

orError_t orSanitizerDeclareAccess(const void* ptr, size_t bytes, int is_write,
                                   const char* label) {
  if (!san::on() || !ptr || !bytes) return orSuccess;
  san::Decl d{reinterpret_cast<uintptr_t>(ptr), bytes, is_write != 0,
              label ? label : ""};
  if (!san::t_ctx.active) {
    san::t_pending.push_back(std::move(d));
    return orSuccess;
  }
  san::State& S = san::state();
  std::lock_guard<std::mutex> g(S.mu);
  if (san::t_ctx.gen != S.gen) return orSuccess;  // history was reset meanwhile
  const san::Cur c{san::t_ctx.slot, san::t_ctx.epoch, &san::t_ctx.clock, san::t_ctx.op};
  return san::check_and_record(S, c, &d, 1);
}

orError_t orSanitizerHostAccess(const void* ptr, size_t bytes, int is_write,
                                const char* op) {
  if (!san::on() || !san::tracked(ptr, bytes)) return orSuccess;
  san::Decl d{reinterpret_cast<uintptr_t>(ptr), bytes, is_write != 0, {}};
  san::State& S = san::state();
  std::lock_guard<std::mutex> g(S.mu);
  san::Clock& host = S.slots[0].clock;
  if (host.empty()) host.resize(1, 0);
  const uint64_t epoch = ++host[0];
  return san::check_and_record(S, san::Cur{0, epoch, &host, op ? op : "host access"},
                               &d, 1);
}

orError_t orSanitizerMarkFreed(const void* ptr, size_t bytes) {
  if (san::on()) san::freed(ptr, bytes);
  return orSuccess;
}

orError_t orSanitizerRelease(const void* ptr, size_t bytes, orEvent_t event) {
  if (!san::on() || !ptr || !bytes) return orSuccess;
  if (!event) {
    san::forget(ptr, bytes);
    return orSuccess;
  }
  san::Clock clock;
  uint64_t gen = 0;
  {
    std::lock_guard<std::mutex> g(sched_mu());
    if (orError_t e = check_live_event(event, "orSanitizerRelease")) return e;
    if (!event->recorded) return orSuccess;
    clock = event->state->san_clock;
    gen = event->state->san_gen;
  }
  san::State& S = san::state();
  std::lock_guard<std::mutex> g(S.mu);
  if (gen != S.gen) return orSuccess;
  const auto b = reinterpret_cast<uintptr_t>(ptr), e = b + bytes;
  san::split_at(S, b);
  san::split_at(S, e);
  auto done = [&](const san::Access& a) { return san::at(clock, a.slot) >= a.epoch; };
  for (auto it = S.shadow.lower_bound(b); it != S.shadow.end() && it->first < e;) {
    san::Seg& s = it->second;
    if (s.has_write && done(s.write)) s.has_write = false;
    s.reads.erase(std::remove_if(s.reads.begin(), s.reads.end(), done), s.reads.end());
    if (!s.has_write && s.reads.empty()) it = S.shadow.erase(it);
    else ++it;
  }
  return orSuccess;
}

}  // extern "C"
