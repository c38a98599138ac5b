// Streams: creation, destruction, queries and synchronisation
// (cudaStream* and cudaDeviceSynchronize). The queues themselves are run by
// scheduler.cpp.
#include "sanitizer.h"
#include "scheduler.h"

#include <new>

using namespace openreg;

namespace {
// Destroyed streams' objects, reused by the next creations instead of freed:
// a synchronous launch racing with the destruction on another thread may
// still read the object's flags before it notices (scheduler.cpp,
// try_claim_idle), so its memory stays a Stream.
std::mutex& spare_mu() {
  static auto* m = new std::mutex();
  return *m;
}
std::vector<orStream_st*>& spare_streams() {
  static auto* v = new std::vector<orStream_st*>();
  return *v;
}

orStream_st* new_stream() {
  {
    std::lock_guard<std::mutex> g(spare_mu());
    auto& v = spare_streams();
    if (!v.empty()) {
      orStream_st* s = v.back();
      v.pop_back();
      return s;
    }
  }
  return new orStream_st();
}

void recycle_stream(orStream_st* s) {
  s->~orStream_st();
  new (s) orStream_st();  // a fresh, idle stream object
  std::lock_guard<std::mutex> g(spare_mu());
  spare_streams().push_back(s);
}
}  // namespace

extern "C" {

orError_t orStreamCreate(orStream_t* stream) {
  return orStreamCreateWithPriority(stream, 0, 0);
}

orError_t orStreamCreateWithPriority(orStream_t* stream, unsigned int flags,
                                     int priority) {
  (void)flags;
  if (!stream) return fail(orErrorInvalidValue, "orStreamCreate: stream is NULL");
  Device* dev = get_device(current_device_index(), "orStreamCreate");
  if (!dev) return orPeekAtLastError();
  int least, greatest;
  orDeviceGetStreamPriorityRange(&least, &greatest);
  // Like CUDA, out-of-range priorities are clamped.
  if (priority > least) priority = least;
  if (priority < greatest) priority = greatest;
  orStream_st* s = new_stream();
  s->device = dev->index;
  s->priority = priority;
  register_stream(*dev, s);
  *stream = s;
  return orSuccess;
}

orError_t orStreamDestroy(orStream_t stream) {
  if (!stream)
    return fail(orErrorInvalidResourceHandle,
                "orStreamDestroy: the default stream cannot be destroyed");
  Stream* s = resolve_stream(stream, "orStreamDestroy");
  if (!s) return orPeekAtLastError();
  if (s->is_default)
    return fail(orErrorInvalidResourceHandle,
                "orStreamDestroy: the default stream cannot be destroyed");
  if (capture::any()) {
    std::lock_guard<std::mutex> g(sched_mu());
    capture::stream_destroyed_locked(s);
  }
  unregister_stream(s);
  recycle_stream(static_cast<orStream_st*>(s));
  return orSuccess;
}

orError_t orStreamQuery(orStream_t stream) {
  Stream* s = resolve_stream(stream, "orStreamQuery");
  if (!s) return orPeekAtLastError();
  std::lock_guard<std::mutex> g(sched_mu());
  if (orError_t e = capture::check_stream_locked(s, "orStreamQuery")) return e;
  drain_markers(s);
  return s->idle() ? orSuccess : orErrorNotReady;
}

orError_t orStreamSynchronize(orStream_t stream) {
  Stream* s = resolve_stream(stream, "orStreamSynchronize");
  if (!s) return orPeekAtLastError();
  std::unique_lock<std::mutex> lk(sched_mu());
  if (orError_t e = capture::check_stream_locked(s, "orStreamSynchronize")) return e;
  wait_idle_locked(lk, s);
  if (san::on()) san::host_join_stream(s);
  return take_error(s, "orStreamSynchronize");
}

orError_t orStreamWaitEvent(orStream_t stream, orEvent_t event,
                            unsigned int flags) {
  (void)flags;
  Stream* s = resolve_stream(stream, "orStreamWaitEvent");
  if (!s) return orPeekAtLastError();
  std::lock_guard<std::mutex> g(sched_mu());
  if (orError_t e = check_live_event(event, "orStreamWaitEvent")) return e;
  if (capture::any() || event->captured) {
    bool handled = false;
    orError_t e = capture::stream_wait_locked(s, event, &handled);
    if (handled) return e;
  }
  // The sanitizer orders by the record, not by whether it has completed yet.
  if (san::on() && event->recorded) san::stream_wait(s, event->state.get());
  // A never-recorded or already-completed event imposes no wait.
  if (!event->recorded || event->state->completed) return orSuccess;
  Item it;
  it.type = Item::Wait;
  it.name = "orStreamWaitEvent";
  it.event = event->state;
  enqueue_locked(s, std::move(it));
  return orSuccess;
}

orError_t orStreamGetPriority(orStream_t stream, int* priority) {
  if (!priority) return fail(orErrorInvalidValue, "orStreamGetPriority: priority is NULL");
  Stream* s = resolve_stream(stream, "orStreamGetPriority");
  if (!s) return orPeekAtLastError();
  *priority = s->priority;
  return orSuccess;
}

orError_t orStreamGetDevice(orStream_t stream, int* device) {
  if (!device) return fail(orErrorInvalidValue, "orStreamGetDevice: device is NULL");
  Stream* s = resolve_stream(stream, "orStreamGetDevice");
  if (!s) return orPeekAtLastError();
  *device = s->device;
  return orSuccess;
}

orError_t orStreamGetId(orStream_t stream, unsigned long long* id) {
  if (!id) return fail(orErrorInvalidValue, "orStreamGetId: id is NULL");
  Stream* s = resolve_stream(stream, "orStreamGetId");
  if (!s) return orPeekAtLastError();
  *id = s->id;
  return orSuccess;
}

orError_t orStreamSetName(orStream_t stream, const char* name) {
  Stream* s = resolve_stream(stream, "orStreamSetName");
  if (!s) return orPeekAtLastError();
  san::set_name(s, name);
  return orSuccess;
}

orError_t orDeviceSynchronize(void) {
  Device* dev = get_device(current_device_index(), "orDeviceSynchronize");
  if (!dev) return orPeekAtLastError();
  std::unique_lock<std::mutex> lk(sched_mu());
  if (orError_t e = capture::check_unsafe_locked("orDeviceSynchronize")) return e;
  wait_done(lk, [&] {
    for (Stream* s : dev->streams) {
      drain_markers(s);
      if (!s->idle()) return false;
    }
    return true;
  });
  if (san::on()) san::host_join_device(dev->index);
  // Report the first pending error; the others are cleared with it.
  orError_t first = orSuccess;
  for (Stream* s : dev->streams) {
    if (s->error == orSuccess) continue;
    if (first == orSuccess) {
      first = take_error(s, "orDeviceSynchronize");
    } else {
      s->error = orSuccess;
      s->error_message.clear();
    }
  }
  return first;
}

}  // extern "C"
