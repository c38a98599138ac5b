// Stream capture and graphs (cudaStreamBeginCapture, cudaStreamEndCapture,
// cudaGraphInstantiate, cudaGraphLaunch).
//
// A capture is shared by the streams that record into it: the stream that
// began it (its origin) and every stream that joined it by waiting on an
// event recorded in it. Each of them has a frontier: the nodes its next
// recorded operation depends on. A graph is the list of nodes in capture
// order (a topological order of their dependencies) and a replay runs them in
// that order, as one item of the launch stream.
#include "sanitizer.h"
#include "scheduler.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace openreg {

struct GraphNode {
  Item item;              // Kernel (owned arguments), HostFunc, Memcpy, Memset, Graph
  std::vector<int> deps;  // earlier nodes this one depends on
};

struct GraphNodes {
  std::vector<GraphNode> nodes;
};

struct Capture {
  orStreamCaptureMode mode = orStreamCaptureModeGlobal;
  std::thread::id thread;
  Stream* origin = nullptr;
  unsigned long long origin_id = 0;
  unsigned long long id = 0;  // unique per process, shared by joined streams
  bool invalidated = false;
  std::string reason;  // the first error that invalidated it
  std::shared_ptr<GraphNodes> graph = std::make_shared<GraphNodes>();
  std::map<Stream*, std::vector<int>> frontier;  // every stream in the capture
};

}  // namespace openreg

struct orGraph_st {
  std::shared_ptr<const openreg::GraphNodes> nodes;
};
struct orGraphExec_st {
  std::shared_ptr<const openreg::GraphNodes> nodes;
};

namespace openreg {
namespace {

std::atomic<int> g_active{0};
// Active captures (sched_mu()).
std::vector<std::shared_ptr<Capture>>& active() {
  static auto* v = new std::vector<std::shared_ptr<Capture>>();
  return *v;
}

// Live graph and executable-graph handles.
std::mutex& handles_mu() {
  static auto* m = new std::mutex();
  return *m;
}
std::unordered_set<const void*>& live_handles() {
  static auto* s = new std::unordered_set<const void*>();
  return *s;
}
const char* handle_kind(const orGraph_st*) { return "graph"; }
const char* handle_kind(const orGraphExec_st*) { return "executable graph"; }

// A new graph or executable graph over `nodes`, registered as live.
template <class Handle>
Handle* make_handle(std::shared_ptr<const GraphNodes> nodes) {
  auto* h = new Handle{std::move(nodes)};
  std::lock_guard<std::mutex> g(handles_mu());
  live_handles().insert(h);
  return h;
}

// The nodes of a live graph or executable graph, or null with the thread's
// error set (naming `call`). Taken under the lock, against a concurrent destroy.
template <class Handle>
std::shared_ptr<const GraphNodes> live_nodes(const Handle* h, const char* call) {
  std::lock_guard<std::mutex> g(handles_mu());
  if (!h || !live_handles().count(h)) {
    fail(orErrorInvalidResourceHandle, "%s: %p is not a live %s", call,
         static_cast<const void*>(h), handle_kind(h));
    return nullptr;
  }
  return h->nodes;
}

template <class Handle>
orError_t destroy_handle(Handle* h, const char* call) {
  {
    std::lock_guard<std::mutex> g(handles_mu());
    if (!h || !live_handles().erase(h))
      return fail(orErrorInvalidResourceHandle, "%s: %p is not a live %s", call,
                  static_cast<void*>(h), handle_kind(h));
  }
  delete h;  // executable graphs and queued launches keep the nodes
  return orSuccess;
}

const char* mode_name(orStreamCaptureMode m) {
  switch (m) {
    case orStreamCaptureModeGlobal: return "global";
    case orStreamCaptureModeThreadLocal: return "thread-local";
    default: return "relaxed";
  }
}

void invalidate(Capture& c, const std::string& reason) {
  if (c.invalidated) return;
  c.invalidated = true;
  c.reason = reason;
}

// The capture is over (ended, or its origin destroyed): its streams record
// no more.
void finish(const std::shared_ptr<Capture>& c) {
  for (auto& [s, f] : c->frontier) {
    (void)f;
    if (s->capture == c) s->capture.reset();
  }
  auto& v = active();
  auto it = std::find(v.begin(), v.end(), c);
  if (it != v.end()) {
    v.erase(it);
    g_active.fetch_sub(1, std::memory_order_relaxed);
  }
}

void merge_deps(std::vector<int>& into, const std::vector<int>& more) {
  for (int n : more) {
    if (std::find(into.begin(), into.end(), n) == into.end()) into.push_back(n);
  }
}

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

const char* kind_name(orMemcpyKind k) {
  switch (k) {
    case orMemcpyHostToHost: return "HtoH";
    case orMemcpyHostToDevice: return "HtoD";
    case orMemcpyDeviceToHost: return "DtoH";
    case orMemcpyDeviceToDevice: return "DtoD";
    default: return "default";
  }
}

// `s` is capturing: record `it` into its capture, or fail.
orError_t record_locked(Stream* s, Item& it, const char* call) {
  Capture& c = *s->capture;
  if (c.invalidated)
    return fail(orErrorStreamCaptureInvalidated,
                "%s: the capture begun on stream %llu was invalidated: %s", call,
                c.origin_id, c.reason.c_str());
  if (it.type == Item::Kernel && !it.args_owned) {
    invalidate(c, format("%s: kernel '%s' was launched with orLaunchKernel, whose "
                         "arguments the caller owns", call, it.name));
    return fail(orErrorStreamCaptureUnsupported,
                "%s: stream %llu is capturing and kernel '%s' was launched with "
                "orLaunchKernel: its arguments may be gone when the graph replays; launch "
                "it with orLaunchKernelOwned (the capture is invalidated)",
                call, s->id, it.name);
  }
  GraphNode n;
  stamp_launch(it);
  n.item = std::move(it);
  n.item.may_defer = false;
  auto& f = c.frontier[s];
  n.deps = f;
  c.graph->nodes.push_back(std::move(n));
  f.assign(1, int(c.graph->nodes.size()) - 1);
  return orSuccess;
}

}  // namespace

namespace capture {

bool any() { return g_active.load(std::memory_order_relaxed) != 0; }

bool recorded(Stream* s, Item& it, const char* call, orError_t* err) {
  if (!any()) return false;
  std::lock_guard<std::mutex> g(sched_mu());
  if (!s->capture) return false;
  *err = record_locked(s, it, call);
  return true;
}

orError_t check_unsafe(const char* call) {
  if (!any()) return orSuccess;
  std::lock_guard<std::mutex> g(sched_mu());
  return check_unsafe_locked(call);
}

orError_t check_stream_locked(Stream* s, const char* call) {
  if (!s->capture) return orSuccess;
  Capture& c = *s->capture;
  invalidate(c, format("%s on capturing stream %llu", call, s->id));
  return fail(orErrorStreamCaptureUnsupported,
              "%s: stream %llu is capturing (begun on stream %llu): its work is recorded, "
              "not run, until the graph is launched; the capture is invalidated",
              call, s->id, c.origin_id);
}

orError_t check_unsafe_locked(const char* call) {
  const auto self = std::this_thread::get_id();
  for (const auto& c : active()) {
    const bool applies = c->mode == orStreamCaptureModeGlobal ||
                         (c->mode == orStreamCaptureModeThreadLocal && c->thread == self);
    if (!applies) continue;
    const bool same_thread = c->thread == self;
    invalidate(*c, format("%s %s during the capture", call,
                          same_thread ? "was called" : "was called from another thread"));
    return fail(orErrorStreamCaptureUnsupported,
                "%s: not permitted while stream %llu captures in %s mode%s; the capture is "
                "invalidated (orStreamCaptureModeRelaxed allows it)",
                call, c->origin_id, mode_name(c->mode),
                same_thread ? "" : " (begun by another thread)");
  }
  return orSuccess;
}

bool event_record_locked(orEvent_t e, Stream* s) {
  if (!s->capture) {
    e->captured = false;
    e->capture.reset();
    e->capture_deps.clear();
    return false;
  }
  e->captured = true;
  e->capture = s->capture;
  e->capture_deps = s->capture->frontier[s];
  // Never waited on for real: a wait joins the capture instead.
  auto st = std::make_shared<EventState>();
  st->device = s->device;
  st->stream = s;
  st->completed = true;
  e->state = st;
  e->recorded = true;
  e->device = s->device;
  return true;
}

orError_t stream_wait_locked(Stream* s, orEvent_t e, bool* handled) {
  *handled = true;
  std::shared_ptr<Capture> ec = e->capture.lock();
  const bool ec_active =
      ec && std::find(active().begin(), active().end(), ec) != active().end();
  if (e->captured) {
    if (!ec_active)
      return fail(orErrorCapturedEvent,
                  "orStreamWaitEvent: event %p was recorded in a capture that has ended; "
                  "record it again outside a capture", static_cast<void*>(e));
    if (!s->capture) {  // fork: s joins the capture
      s->capture = ec;
      ec->frontier[s] = e->capture_deps;
      return orSuccess;
    }
    if (s->capture == ec) {  // join (or any edge inside one capture)
      merge_deps(ec->frontier[s], e->capture_deps);
      return orSuccess;
    }
    invalidate(*s->capture, "a wait on an event of another capture");
    invalidate(*ec, "a wait on one of its events by a stream of another capture");
    return fail(orErrorStreamCaptureIsolation,
                "orStreamWaitEvent: stream %llu captures (begun on stream %llu) and the event "
                "was recorded in another capture (begun on stream %llu); both are invalidated",
                s->id, s->capture->origin_id, ec->origin_id);
  }
  if (!s->capture) {
    *handled = false;
    return orSuccess;
  }
  if (!e->recorded) return orSuccess;  // no wait, as outside a capture
  Capture& c = *s->capture;
  invalidate(c, "a wait on an event recorded outside the capture");
  return fail(orErrorStreamCaptureIsolation,
              "orStreamWaitEvent: stream %llu is capturing and the event was recorded "
              "outside the capture: a graph cannot depend on work outside it (wait before "
              "orStreamBeginCapture); the capture is invalidated", s->id);
}

orError_t check_event_locked(orEvent_t e, const char* call) {
  if (!e->captured) return orSuccess;
  std::shared_ptr<Capture> ec = e->capture.lock();
  const bool ec_active =
      ec && std::find(active().begin(), active().end(), ec) != active().end();
  if (ec_active) invalidate(*ec, format("%s on an event recorded in the capture", call));
  else ec.reset();
  return fail(orErrorCapturedEvent,
              "%s: event %p was last recorded in a capturing stream%s; it completes only "
              "as part of a graph launch", call, static_cast<void*>(e),
              ec ? " (the capture is invalidated)" : "");
}

void stream_destroyed_locked(Stream* s) {
  std::shared_ptr<Capture> c = s->capture;
  if (!c) return;
  invalidate(*c, format("stream %llu was destroyed during the capture", s->id));
  c->frontier.erase(s);
  s->capture.reset();
  if (c->origin == s) finish(c);  // nobody can end it any more
}

}  // namespace capture

orError_t run_graph(const Item& it, std::string* why) {
  const bool tracing = tracing_enabled();
  const auto& nodes = it.graph->nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Item& n = nodes[i].item;
    const uint64_t t0 = tracing ? now_ns() : 0;
    std::string w;
    const orError_t e = execute(n, it.graph_device, it.graph_stream, &w);
    if (tracing) {
      // The node's trace event belongs to this launch.
      Item rec = n;
      rec.correlation = it.correlation;
      rec.launch_ns = it.launch_ns;
      rec.launch_thread = it.launch_thread;
      rec.annotation = it.annotation;
      trace_item(rec, it.graph_device, it.graph_stream, t0, now_ns());
    }
    if (e != orSuccess) {
      *why = format("graph node %zu ('%s'): %s", i, n.name, w.c_str());
      return e;
    }
  }
  return orSuccess;
}

}  // namespace openreg

using namespace openreg;

extern "C" {

orError_t orStreamBeginCapture(orStream_t stream, orStreamCaptureMode mode) {
  if (int(mode) < int(orStreamCaptureModeGlobal) || int(mode) > int(orStreamCaptureModeRelaxed))
    return fail(orErrorInvalidValue, "orStreamBeginCapture: unknown capture mode %d", int(mode));
  Stream* s = resolve_stream(stream, "orStreamBeginCapture");
  if (!s) return orPeekAtLastError();
  if (s->is_default)
    return fail(orErrorStreamCaptureUnsupported,
                "orStreamBeginCapture: the default stream of openreg:%d cannot be captured; "
                "capture on a created stream", s->device);
  std::lock_guard<std::mutex> g(sched_mu());
  if (s->capture)
    return fail(orErrorNotPermitted,
                "orStreamBeginCapture: stream %llu is already capturing (begun on stream %llu)",
                s->id, s->capture->origin_id);
  auto c = std::make_shared<Capture>();
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  c->origin_id = s->id;
  static std::atomic<unsigned long long> next_id{1};
  c->id = next_id.fetch_add(1, std::memory_order_relaxed);
  c->frontier[s] = {};
  s->capture = c;
  active().push_back(c);
  g_active.fetch_add(1, std::memory_order_relaxed);
  return orSuccess;
}

orError_t orStreamEndCapture(orStream_t stream, orGraph_t* graph) {
  if (!graph) return fail(orErrorInvalidValue, "orStreamEndCapture: graph is NULL");
  *graph = nullptr;
  Stream* s = resolve_stream(stream, "orStreamEndCapture");
  if (!s) return orPeekAtLastError();
  std::lock_guard<std::mutex> g(sched_mu());
  std::shared_ptr<Capture> c = s->capture;
  if (!c)
    return fail(orErrorNotPermitted, "orStreamEndCapture: stream %llu is not capturing", s->id);
  if (c->origin != s) {
    invalidate(*c, format("orStreamEndCapture on joined stream %llu", s->id));
    return fail(orErrorStreamCaptureUnmatched,
                "orStreamEndCapture: stream %llu joined the capture begun on stream %llu; "
                "end it there (the capture is invalidated)", s->id, c->origin_id);
  }
  if (c->mode != orStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return fail(orErrorStreamCaptureWrongThread,
                "orStreamEndCapture: the %s-mode capture on stream %llu was begun by another "
                "thread; end it there", mode_name(c->mode), s->id);
  finish(c);
  if (c->invalidated)
    return fail(orErrorStreamCaptureInvalidated,
                "orStreamEndCapture: the capture on stream %llu was invalidated: %s", s->id,
                c->reason.c_str());
  // Joined: every other stream's frontier is among the origin's ancestors.
  const auto& nodes = c->graph->nodes;
  std::vector<char> reached(nodes.size(), 0);
  std::vector<int> todo = c->frontier[s];
  while (!todo.empty()) {
    int n = todo.back();
    todo.pop_back();
    if (reached[n]) continue;
    reached[n] = 1;
    for (int d : nodes[n].deps) todo.push_back(d);
  }
  for (const auto& [other, f] : c->frontier) {
    if (other == s) continue;
    for (int n : f) {
      if (!reached[n])
        return fail(orErrorStreamCaptureUnjoined,
                    "orStreamEndCapture: stream %llu joined the capture on stream %llu and "
                    "did not join back: its last work ('%s') is not ordered before the end "
                    "(record an event on it and make stream %llu wait on it)",
                    other->id, s->id, nodes[n].item.name, s->id);
    }
  }
  *graph = make_handle<orGraph_st>(c->graph);
  return orSuccess;
}

orError_t orStreamIsCapturing(orStream_t stream, orStreamCaptureStatus* status) {
  if (!status) return fail(orErrorInvalidValue, "orStreamIsCapturing: status is NULL");
  Stream* s = resolve_stream(stream, "orStreamIsCapturing");
  if (!s) return orPeekAtLastError();
  std::lock_guard<std::mutex> g(sched_mu());
  *status = !s->capture ? orStreamCaptureStatusNone
            : s->capture->invalidated ? orStreamCaptureStatusInvalidated
                                      : orStreamCaptureStatusActive;
  return orSuccess;
}

orError_t orStreamGetCaptureInfo(orStream_t stream, orStreamCaptureStatus* status,
                                 unsigned long long* id) {
  if (!status) return fail(orErrorInvalidValue, "orStreamGetCaptureInfo: status is NULL");
  Stream* s = resolve_stream(stream, "orStreamGetCaptureInfo");
  if (!s) return orPeekAtLastError();
  if (!capture::any()) {  // the allocator asks on every allocation while any capture runs
    *status = orStreamCaptureStatusNone;
    if (id) *id = 0;
    return orSuccess;
  }
  std::lock_guard<std::mutex> g(sched_mu());
  *status = !s->capture ? orStreamCaptureStatusNone
            : s->capture->invalidated ? orStreamCaptureStatusInvalidated
                                      : orStreamCaptureStatusActive;
  if (id) *id = s->capture ? s->capture->id : 0;
  return orSuccess;
}

orError_t orGraphInstantiate(orGraphExec_t* exec, orGraph_t graph) {
  if (!exec) return fail(orErrorInvalidValue, "orGraphInstantiate: exec is NULL");
  *exec = nullptr;
  auto nodes = live_nodes(graph, "orGraphInstantiate");
  if (!nodes) return orPeekAtLastError();
  *exec = make_handle<orGraphExec_st>(std::move(nodes));
  return orSuccess;
}

orError_t orGraphLaunch(orGraphExec_t exec, orStream_t stream) {
  auto nodes = live_nodes(exec, "orGraphLaunch");
  if (!nodes) return orPeekAtLastError();
  Stream* s = resolve_stream(stream, "orGraphLaunch");
  if (!s) return orPeekAtLastError();
  Item it;
  it.type = Item::Graph;
  it.name = "orGraphLaunch";
  it.graph = std::move(nodes);
  it.graph_device = s->device;
  it.graph_stream = s->id;
  orError_t e;
  if (capture::recorded(s, it, "orGraphLaunch", &e)) return e;
  // The sanitizer checks a replay as one kernel: the accesses its launcher
  // declared (the union of its nodes', see orSanitizerDeclareAccess).
  if (san::on()) {
    if (orError_t err = san::kernel_begin(s, "orGraphLaunch", /*in_kernel=*/false)) return err;
  }
  submit(s, std::move(it), /*inline_ok=*/true);
  return orSuccess;
}

orError_t orGraphDestroy(orGraph_t graph) { return destroy_handle(graph, "orGraphDestroy"); }

orError_t orGraphExecDestroy(orGraphExec_t exec) {
  return destroy_handle(exec, "orGraphExecDestroy");
}

orError_t orGraphGetNodeCount(orGraph_t graph, size_t* count) {
  if (!count) return fail(orErrorInvalidValue, "orGraphGetNodeCount: count is NULL");
  auto nodes = live_nodes(graph, "orGraphGetNodeCount");
  if (!nodes) return orPeekAtLastError();
  *count = nodes->nodes.size();
  return orSuccess;
}

orError_t orGraphDebugDotPrint(orGraph_t graph, const char* path) {
  if (!path) return fail(orErrorInvalidValue, "orGraphDebugDotPrint: path is NULL");
  auto nodes = live_nodes(graph, "orGraphDebugDotPrint");
  if (!nodes) return orPeekAtLastError();
  FILE* f = std::fopen(path, "w");
  if (!f)
    return fail(orErrorInvalidValue, "orGraphDebugDotPrint: cannot write %s: %s", path,
                std::strerror(errno));
  std::fprintf(f, "digraph openreg_graph {\n  node [shape=box];\n");
  for (size_t i = 0; i < nodes->nodes.size(); ++i) {
    const Item& it = nodes->nodes[i].item;
    std::string label;
    switch (it.type) {
      case Item::Kernel: label = format("kernel\\n%s", dot_escape(it.name).c_str()); break;
      case Item::HostFunc: label = "host function"; break;
      case Item::Memcpy:
        label = format("memcpy %s\\n%zu bytes", kind_name(it.kind), it.count);
        break;
      case Item::Memset: label = format("memset %d\\n%zu bytes", it.value, it.count); break;
      case Item::Graph:
        label = format("graph launch\\n%zu nodes", it.graph->nodes.size());
        break;
      default: label = "?"; break;
    }
    std::fprintf(f, "  n%zu [label=\"%zu: %s\"];\n", i, i, label.c_str());
    for (int d : nodes->nodes[i].deps) std::fprintf(f, "  n%d -> n%zu;\n", d, i);
  }
  std::fprintf(f, "}\n");
  if (std::fclose(f) != 0)
    return fail(orErrorInvalidValue, "orGraphDebugDotPrint: writing %s failed", path);
  return orSuccess;
}

}  // extern "C"
