// The openreg Kineto plugin: device activity in torch.profiler traces.
//
// torch.profiler (with ProfilerActivity.PrivateUse1) asks this plugin for a
// session per trace. While the session records, it
//   * forwards the correlation id of the CPU op running on each thread to the
//     runtime (orTraceSetCorrelationId), which stamps every launch with it;
//   * subscribes to the runtime's trace (orTraceSubscribe) and keeps one
//     record per kernel, copy, memset and host function;
// and when the trace is processed it turns each record into Kineto
// activities: the device work itself (CONCURRENT_KERNEL, GPU_MEMCPY,
// GPU_MEMSET on row device/stream), linked to the CPU op that launched it
// (so key_averages() reports its device time), plus the launching runtime
// call (PRIVATEUSE1_RUNTIME on the launching thread) as the start of a flow
// arrow. Range markers (openreg_profiler.h) become GPU_USER_ANNOTATIONs.
//
// Vendor: keep this file. What you replace is the producer side: your driver
// fills orTraceRecord-like records (CUPTI's activity records play this role
// for CUDA); only onRecord and the kind mapping below know their layout.
#include "openreg_profiler.h"

#include <openreg.h>

#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegStream.h"

#include <libkineto.h>  // IActivityProfiler, GenericTraceActivity, CpuTraceBuffer
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace torch_openreg::profiler {
namespace {

using libkineto::ActivityType;

const std::set<ActivityType> kDeviceTypes = {
    ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY, ActivityType::GPU_MEMSET,
    ActivityType::GPU_USER_ANNOTATION};

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// One piece of device work (or a user range), as the runtime reported it.
struct Record {
  ActivityType type;
  std::string name;
  int device;
  unsigned long long stream;
  unsigned long long correlation;
  int64_t start_ns, end_ns;  // CLOCK_MONOTONIC
  int64_t launch_ns;
  unsigned long long launch_thread;
  size_t bytes;
  orMemcpyKind copy_kind;
  bool host_func;
  std::string annotation;  // "key=value" lines (orTraceSetLaunchAnnotation)
};

const char* copy_kind_name(orMemcpyKind k) {
  switch (k) {
    case orMemcpyHostToDevice: return "HtoD";
    case orMemcpyDeviceToHost: return "DtoH";
    case orMemcpyDeviceToDevice: return "DtoD";
    case orMemcpyHostToHost: return "HtoH";
    default: return "Default";
  }
}

const char* launch_api(const Record& r) {
  switch (r.type) {
    case ActivityType::GPU_MEMCPY: return r.name.c_str();  // orMemcpy / orMemcpyAsync
    case ActivityType::GPU_MEMSET: return r.name.c_str();
    default: return r.host_func ? "orLaunchHostFunc" : "orLaunchKernel";
  }
}

// Device copies and memsets are named as CUDA traces name them; the runtime
// call that launched them keeps its API name (orMemcpyAsync, ...).
std::string activity_name(const Record& r) {
  if (r.type == ActivityType::GPU_MEMCPY) return std::string("Memcpy ") + copy_kind_name(r.copy_kind);
  if (r.type == ActivityType::GPU_MEMSET) return "Memset";
  return r.name;
}

// "key=value" lines -> activity arguments (values are JSON already).
void add_annotation(libkineto::GenericTraceActivity& act, const std::string& text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    size_t eq = text.find('=', pos);
    if (eq != std::string::npos && eq < end) {
      act.addMetadata(text.substr(pos, eq - pos), text.substr(eq + 1, end - eq - 1));
    }
    pos = end + 1;
  }
}

class Session;
// The recording session, if any (ranges and the trace callback reach it).
std::atomic<Session*> g_active{nullptr};

// Correlation ids kineto pushes for the CPU ops running on this thread.
thread_local std::vector<uint64_t> t_correlation;
// Open user ranges of this thread: name, start, device, stream.
struct OpenRange {
  std::string name;
  int64_t start_ns;
  int device;
  unsigned long long stream;
};
thread_local std::vector<OpenRange> t_ranges;

class Session final : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(std::set<ActivityType> types) : types_(std::move(types)) {}
  ~Session() override { unsubscribe(); }

  void start() override {
    // Kineto's time base is the epoch (system_clock); the runtime's is
    // CLOCK_MONOTONIC. One offset, taken now, maps one to the other.
    int64_t sys = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    offset_ns_ = sys - monotonic_ns();
    {
      std::lock_guard<std::mutex> g(mu_);
      records_.clear();
    }
    OPENREG_CHECK(orTraceSubscribe(&subscriber_, &Session::onRecord, this));
    g_active.store(this);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    // torch synchronises the device before stopping, so queued work has
    // reported by now.
    g_active.store(nullptr);
    unsubscribe();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; },
                 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked, int64_t, int64_t) override {
    std::lock_guard<std::mutex> g(mu_);
    const int32_t pid = static_cast<int32_t>(getpid());
    // Activity ids of our own, distinct from torch's op ids (which the
    // correlation links point at), as CUPTI's correlation ids are for CUDA.
    int32_t next_id = int32_t(1) << 30;
    for (const Record& r : records_) {
      if (!types_.count(r.type)) continue;
      const auto corr = static_cast<int32_t>(r.correlation);
      const libkineto::ITraceActivity* op = corr ? linked(corr) : nullptr;

      libkineto::GenericTraceActivity act(span_, r.type, activity_name(r));
      act.startTime = r.start_ns + offset_ns_;
      act.endTime = r.end_ns + offset_ns_;
      act.id = next_id++;
      act.device = r.device;
      act.resource = static_cast<int32_t>(r.stream);
      act.linked = op;
      act.addMetadata("device", r.device);
      act.addMetadata("stream", r.stream);
      if (corr) act.addMetadata("correlation", corr);
      if (r.type == ActivityType::GPU_MEMCPY) {
        act.addMetadataQuoted("kind", copy_kind_name(r.copy_kind));
        act.addMetadata("bytes", r.bytes);
      } else if (r.type == ActivityType::GPU_MEMSET) {
        act.addMetadata("bytes", r.bytes);
      } else if (r.host_func) {
        act.addMetadataQuoted("kind", "host function");
      }
      add_annotation(act, r.annotation);
      if (corr && r.type != ActivityType::GPU_USER_ANNOTATION) {
        act.flow.id = static_cast<uint32_t>(corr);
        act.flow.type = libkineto::kLinkAsyncCpuGpu;
        act.flow.start = 0;
      }
      act.log(logger);

      // The runtime call that launched it, on the launching thread: the
      // start of the launch -> kernel arrow in trace viewers.
      if (corr && r.launch_thread && types_.count(ActivityType::PRIVATEUSE1_RUNTIME) &&
          r.type != ActivityType::GPU_USER_ANNOTATION) {
        libkineto::GenericTraceActivity api(span_, ActivityType::PRIVATEUSE1_RUNTIME,
                                            launch_api(r));
        api.startTime = r.launch_ns + offset_ns_;
        api.endTime = api.startTime + 1000;  // the launch instant (1 us wide)
        api.id = next_id++;
        api.device = pid;
        api.resource = static_cast<int32_t>(r.launch_thread);
        api.threadId = static_cast<int32_t>(r.launch_thread);
        api.linked = op;
        api.flow.id = static_cast<uint32_t>(corr);
        api.flow.type = libkineto::kLinkAsyncCpuGpu;
        api.flow.start = 1;
        api.log(logger);
      }
      streams_[r.device].insert(r.stream);
    }
    status_ = libkineto::TraceStatus::READY;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    // Kineto names one device row per session: the lowest device used.
    int device = streams_.empty() ? 0 : streams_.begin()->first;
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        device, 5000000 + device, "openreg:" + std::to_string(device),
        "openreg simulated device " + std::to_string(device)});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [device, streams] : streams_) {
      for (unsigned long long s : streams) {
        out.push_back(libkineto::ResourceInfo{static_cast<int64_t>(s), static_cast<int64_t>(s),
                                              device, "stream " + std::to_string(s)});
      }
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return nullptr;  // activities were logged (copied) in processTrace
  }

  void pushCorrelationId(uint64_t id) override {
    t_correlation.push_back(id);
    orTraceSetCorrelationId(id);
  }
  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
    // The runtime keeps one id per thread: restore the enclosing op's.
    orTraceSetCorrelationId(t_correlation.empty() ? 0 : t_correlation.back());
  }

  std::string getDeviceProperties() override { return ""; }

  void addRange(const OpenRange& open, int64_t end_ns) {
    std::lock_guard<std::mutex> g(mu_);
    records_.push_back(Record{ActivityType::GPU_USER_ANNOTATION, open.name, open.device,
                              open.stream, 0, open.start_ns, end_ns, open.start_ns, 0, 0,
                              orMemcpyDefault, false, {}});
  }

 private:
  static void onRecord(const orTraceRecord* r, void* self) {
    auto* s = static_cast<Session*>(self);
    ActivityType type;
    switch (r->kind) {
      case orTraceMemcpy: type = ActivityType::GPU_MEMCPY; break;
      case orTraceMemset: type = ActivityType::GPU_MEMSET; break;
      default: type = ActivityType::CONCURRENT_KERNEL; break;
    }
    std::lock_guard<std::mutex> g(s->mu_);
    s->records_.push_back(Record{type, r->name ? r->name : "", r->device, r->stream_id,
                                 r->correlation_id, int64_t(r->start_ns), int64_t(r->end_ns),
                                 int64_t(r->launch_ns), r->launch_thread, r->bytes,
                                 r->copy_kind, r->kind == orTraceHostFunc,
                                 r->annotation ? r->annotation : ""});
  }

  void unsubscribe() {
    if (!subscriber_) return;
    if (orTraceUnsubscribe(subscriber_) != orSuccess) orGetLastError();
    subscriber_ = nullptr;
  }

  std::set<ActivityType> types_;
  libkineto::TraceSpan span_{0, 0, "openreg"};
  orTraceSubscriber_t subscriber_ = nullptr;
  int64_t offset_ns_ = 0;
  std::mutex mu_;
  std::vector<Record> records_;
  std::map<int, std::set<unsigned long long>> streams_;
};

class OpenRegProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return available_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& types, const libkineto::Config&) override {
    // CPU-only profiles configure every plugin too (PRIVATEUSE1_RUNTIME is a
    // CPU type): record nothing unless device activity was asked for.
    std::set<ActivityType> wanted;
    bool device = false;
    for (ActivityType t : types) {
      if (available_.count(t)) wanted.insert(t);
      if (kDeviceTypes.count(t)) device = true;
    }
    if (!device) return nullptr;
    return std::make_unique<Session>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "openreg";
  std::set<ActivityType> available_ = {
      ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY, ActivityType::GPU_MEMSET,
      ActivityType::GPU_USER_ANNOTATION, ActivityType::PRIVATEUSE1_RUNTIME};
};

}  // namespace
}  // namespace torch_openreg::profiler

// [docs:profiler-register]
namespace torch_openreg::profiler {
REGISTER_PRIVATEUSE1_PROFILER(OpenRegProfiler);
}  // namespace torch_openreg::profiler
// [docs:profiler-register:end]

// ---------------------------------------------------------------- ranges
using namespace torch_openreg::profiler;

namespace {
OpenRange open_range_here(const char* name) {
  int device = static_cast<int>(torch_openreg::current_device());
  unsigned long long stream = 0;
  if (orStreamGetId(torch_openreg::currentNativeStream(device), &stream) != orSuccess)
    orGetLastError();
  return OpenRange{name ? name : "", monotonic_ns(), device, stream};
}
}  // namespace

extern "C" {

int openreg_profiler_range_push(const char* name) {
  t_ranges.push_back(open_range_here(name));
  return static_cast<int>(t_ranges.size());
}

int openreg_profiler_range_pop(void) {
  if (t_ranges.empty()) return -1;
  OpenRange open = std::move(t_ranges.back());
  t_ranges.pop_back();
  if (Session* s = g_active.load()) s->addRange(open, monotonic_ns());
  return static_cast<int>(t_ranges.size());
}

void openreg_profiler_mark(const char* name) {
  OpenRange open = open_range_here(name);
  if (Session* s = g_active.load()) s->addRange(open, open.start_ns);
}

}  // extern "C"
