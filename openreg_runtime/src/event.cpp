// Events: record, wait, query, synchronise and time (cudaEvent*).
#include "sanitizer.h"
#include "scheduler.h"

namespace openreg {
namespace {
std::unordered_set<orEvent_st*>& live_events() {  // guarded by sched_mu()
  static auto* s = new std::unordered_set<orEvent_st*>();
  return *s;
}
}  // namespace

orError_t check_live_event(orEvent_t e, const char* call) {
  if (e && live_events().count(e)) return orSuccess;
  return fail(orErrorInvalidResourceHandle, "%s: %p is not a live event", call,
              static_cast<void*>(e));
}

}  // namespace openreg

using namespace openreg;

extern "C" {

orError_t orEventCreate(orEvent_t* event) {
  return orEventCreateWithFlags(event, orEventDefault);
}

orError_t orEventCreateWithFlags(orEvent_t* event, unsigned int flags) {
  if (!event) return fail(orErrorInvalidValue, "orEventCreate: event is NULL");
  if (flags & ~unsigned(orEventBlockingSync | orEventDisableTiming))
    return fail(orErrorInvalidValue, "orEventCreateWithFlags: unknown flags 0x%x", flags);
  if (in_forked_child())
    return fail(orErrorInitializationError,
                "orEventCreate: " OPENREG_FORK_MESSAGE);
  auto* e = new orEvent_st();
  e->flags = flags;
  e->device = current_device_index();
  e->state = std::make_shared<EventState>();
  std::lock_guard<std::mutex> g(sched_mu());
  live_events().insert(e);
  *event = e;
  return orSuccess;
}

orError_t orEventDestroy(orEvent_t event) {
  std::lock_guard<std::mutex> g(sched_mu());
  if (orError_t e = check_live_event(event, "orEventDestroy")) return e;
  live_events().erase(event);
  delete event;  // queued Record/Wait items keep the shared state alive
  return orSuccess;
}

orError_t orEventRecord(orEvent_t event, orStream_t stream) {
  Stream* s = resolve_stream(stream, "orEventRecord");
  if (!s) return orPeekAtLastError();
  std::lock_guard<std::mutex> g(sched_mu());
  if (orError_t e = check_live_event(event, "orEventRecord")) return e;
  if (capture::event_record_locked(event, s)) return orSuccess;
  // Each record starts a new generation: waits captured earlier keep
  // waiting for the generation they saw, as in CUDA.
  auto st = std::make_shared<EventState>();
  st->device = s->device;
  st->stream = s;
  event->state = st;
  event->recorded = true;
  event->device = s->device;
  if (san::on()) san::event_record(st.get(), s);
  drain_markers(s);
  if (s->idle()) {
    st->time_ns = now_ns();
    st->completed = true;
    return orSuccess;
  }
  Item it;
  it.type = Item::Record;
  it.name = "orEventRecord";
  it.event = st;
  enqueue_locked(s, std::move(it));
  return orSuccess;
}

orError_t orEventQuery(orEvent_t event) {
  std::lock_guard<std::mutex> g(sched_mu());
  if (orError_t e = check_live_event(event, "orEventQuery")) return e;
  if (orError_t e = capture::check_event_locked(event, "orEventQuery")) return e;
  if (!event->recorded || event->state->completed) return orSuccess;
  return orErrorNotReady;
}

orError_t orEventSynchronize(orEvent_t event) {
  std::unique_lock<std::mutex> lk(sched_mu());
  if (orError_t e = check_live_event(event, "orEventSynchronize")) return e;
  if (orError_t e = capture::check_event_locked(event, "orEventSynchronize")) return e;
  if (!event->recorded) return orSuccess;
  std::shared_ptr<EventState> st = event->state;
  wait_done(lk, [&] { return st->completed; });
  if (san::on()) san::host_join_event(st.get());
  // Report an asynchronous failure of the recording stream, if it is still
  // alive and has one pending.
  if (is_live_stream(st->stream)) return take_error(st->stream, "orEventSynchronize");
  return orSuccess;
}

orError_t orEventElapsedTime(float* ms, orEvent_t start, orEvent_t end) {
  if (!ms) return fail(orErrorInvalidValue, "orEventElapsedTime: ms is NULL");
  std::lock_guard<std::mutex> g(sched_mu());
  for (orEvent_t e : {start, end}) {
    if (orError_t err = check_live_event(e, "orEventElapsedTime")) return err;
    if (orError_t err = capture::check_event_locked(e, "orEventElapsedTime")) return err;
    if (e->flags & orEventDisableTiming)
      return fail(orErrorInvalidResourceHandle,
                  "orEventElapsedTime: event %p was created with "
                  "orEventDisableTiming", static_cast<void*>(e));
    if (!e->recorded)
      return fail(orErrorInvalidResourceHandle,
                  "orEventElapsedTime: event %p has not been recorded",
                  static_cast<void*>(e));
  }
  if (!start->state->completed || !end->state->completed)
    return fail(orErrorNotReady,
                "orEventElapsedTime: the work before one of the events has "
                "not completed yet");
  *ms = float(double(int64_t(end->state->time_ns - start->state->time_ns)) / 1e6);
  return orSuccess;
}

}  // extern "C"
