// torch.accelerator.Graph on openreg: the at::GraphImplInterface
// (registered with REGISTER_GRAPH_IMPL) over the runtime's stream capture
// (orStreamBeginCapture ... orGraphLaunch). Capture begin and end route the
// allocator to the graph's pool, register the default generator with the
// capture and turn on the operator recording (GraphCapture.cpp); a replay is
// one graph launch on the current stream.
//
// Vendor: this is the part you keep. With a device whose kernels take their
// arguments by value (most real ones), the runtime capture of the kernels'
// own launches is enough and GraphCapture.cpp's operator-level recording is
// not needed.
#include "Graph.h"
#include "GraphCapture.h"

#include "runtime/OpenRegAllocator.h"
#include "runtime/OpenRegException.h"
#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegGenerator.h"
#include "runtime/OpenRegStream.h"

#include <ATen/core/GraphImplInterface.h>

#include <atomic>
#include <mutex>

namespace torch_openreg {

namespace {

std::atomic<unsigned long long> g_pool_uid{1};

struct SlotFill {
  std::shared_ptr<std::pair<uint64_t, uint64_t>> slots;
  std::pair<uint64_t, uint64_t> values;
};
orError_t fill_slots(void* p) {
  auto* f = static_cast<SlotFill*>(p);
  *f->slots = f->values;
  return orSuccess;
}
void delete_fill(void* p) { delete static_cast<SlotFill*>(p); }

orStreamCaptureMode runtime_mode(at::GraphCaptureMode mode) {
  switch (mode) {
    case at::GraphCaptureMode::ThreadLocal: return orStreamCaptureModeThreadLocal;
    case at::GraphCaptureMode::Relaxed: return orStreamCaptureModeRelaxed;
    default: return orStreamCaptureModeGlobal;  // CUDA's default too
  }
}

}  // namespace

// [docs:graph-impl]
class OpenRegGraph final : public at::GraphImplInterface {
 public:
  explicit OpenRegGraph(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}
  ~OpenRegGraph() override {
    try {
      reset();
    } catch (const std::exception& e) {
      TORCH_WARN("openreg graph: reset at destruction failed: ", e.what());
    }
  }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    TORCH_CHECK(!has_graph_ && !capturing_,
                "This openreg graph has already been captured; call reset() before capturing "
                "it again");
    const c10::DeviceIndex device = current_device();
    const c10::Stream stream = getCurrentStream(device);
    TORCH_CHECK(stream != getDefaultStream(device),
                "openreg graphs must be captured on a non-default stream. (However, after "
                "capture, it's ok to replay them on the default stream.)");
    if (pool.first != 0 || pool.second != 0) {
      TORCH_CHECK(pool.first == 0 || pool.second == 0,
                  "openreg graph: invalid pool id (", pool.first, ", ", pool.second,
                  "); use another graph's pool() or torch.openreg.graph_pool_handle()");
      pool_ = pool;  // shared with another graph
    } else {
      pool_ = {g_pool_uid.fetch_add(1), 0};  // this graph's own
    }
    gen_ = openregGeneratorOrDefault(std::nullopt, device);
    {
      std::lock_guard<std::mutex> lock(gen_->mutex_);
      gen_->capture_prologue();
      slots_ = gen_->capture_slots();
    }
    const orStream_t s = nativeStream(stream);
    if (const orError_t e = orStreamBeginCapture(s, runtime_mode(mode)); e != orSuccess) {
      std::lock_guard<std::mutex> lock(gen_->mutex_);
      gen_->capture_epilogue();
      throw_runtime_error(e, "orStreamBeginCapture");
    }
    orStreamCaptureStatus status = orStreamCaptureStatusNone;
    OPENREG_CHECK(orStreamGetCaptureInfo(s, &status, &capture_id_));
    beginAllocateToPool(device, pool_, capture_id_);
    pool_held_ = true;
    device_ = device;
    stream_ = stream;
    capturing_ = true;
    g_graph_captures.fetch_add(1);
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "openreg graph: capture_end() without capture_begin()");
    TORCH_CHECK(getCurrentStream(device_) == stream_,
                "Capture must end on the same stream it began on.");
    const uint64_t increment = stop_capturing();
    orGraph_t graph = nullptr;
    if (const orError_t e = orStreamEndCapture(nativeStream(stream_), &graph); e != orSuccess) {
      release_pool();
      throw_runtime_error(e, "orStreamEndCapture");
    }
    graph_ = graph;
    rng_increment_ = increment;
    has_graph_ = true;
    if (!keep_graph_) {
      instantiate();
      if (!debug_) destroy_graph();
    }
  }

  void instantiate() override {
    TORCH_CHECK(has_graph_, "openreg graph: instantiate() before a capture");
    TORCH_CHECK(graph_, "openreg graph: the graph was not kept after capture (keep_graph=False)");
    destroy_exec();
    OPENREG_CHECK(orGraphInstantiate(&exec_, graph_));
  }

  void replay() override {
    TORCH_CHECK(has_graph_, "Called replay() on an openreg graph that was not captured (or "
                            "was reset)");
    if (!exec_) instantiate();
    DeviceScope scope(device_);
    const orStream_t s = currentNativeStream(device_);
    if (rng_increment_ > 0) {
      // This replay's seed and offset, written in stream order before it.
      auto* fill = new SlotFill{slots_, {}};
      {
        std::lock_guard<std::mutex> lock(gen_->mutex_);
        fill->values = gen_->replay_values(rng_increment_);
      }
      OPENREG_CHECK(orLaunchKernelOwned(s, &fill_slots, fill, &delete_fill,
                                        "openreg graph rng", 0));
    }
    if (C10_UNLIKELY(sanitizer_on())) {
      // The stream sanitizer checks the replay as one launch touching what
      // its nodes touch.
      for (const SanitizerAccess& a : accesses_)
        OPENREG_CHECK(orSanitizerDeclareAccess(a.ptr, a.bytes, a.write, a.label.c_str()));
    }
    OPENREG_CHECK(orGraphLaunch(exec_, s));
  }

  void reset() override {
    if (capturing_) {
      stop_capturing();
      orGraph_t graph = nullptr;
      if (orStreamEndCapture(nativeStream(stream_), &graph) == orSuccess) orGraphDestroy(graph);
      orGetLastError();
    }
    destroy_exec();
    destroy_graph();
    has_graph_ = false;
    accesses_.clear();
    release_pool();
  }

  c10::MempoolId_t pool() const override { return pool_; }

  void enable_debug_mode() override { debug_ = true; }

  void debug_dump(const std::string& path) override {
    TORCH_CHECK(debug_, "openreg graph: call enable_debug_mode() before capture to keep the "
                        "graph for debug_dump()");
    TORCH_CHECK(graph_, "openreg graph: nothing to dump (capture first)");
    OPENREG_CHECK(orGraphDebugDotPrint(graph_, path.c_str()));
  }

 private:
  // The glue's side of ending a capture: the kernels' hook, the allocator's
  // routing and the generator. Returns the graph's random-offset increment.
  uint64_t stop_capturing() {
    capturing_ = false;
    accesses_ = take_accesses(capture_id_);
    g_graph_captures.fetch_sub(1);
    endAllocateToPool(device_, capture_id_);
    std::lock_guard<std::mutex> lock(gen_->mutex_);
    return gen_->capture_epilogue();
  }
  void release_pool() {
    if (!pool_held_) return;
    pool_held_ = false;
    releasePool(device_, pool_);
  }
  void destroy_exec() {
    if (exec_) orGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  void destroy_graph() {
    if (graph_) orGraphDestroy(graph_);
    graph_ = nullptr;
  }

  bool keep_graph_ = false;
  bool debug_ = false;
  bool capturing_ = false;
  bool has_graph_ = false;
  bool pool_held_ = false;
  c10::DeviceIndex device_ = 0;
  c10::Stream stream_{c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  unsigned long long capture_id_ = 0;
  c10::MempoolId_t pool_{0, 0};
  OpenRegGeneratorImpl* gen_ = nullptr;
  std::shared_ptr<std::pair<uint64_t, uint64_t>> slots_;
  uint64_t rng_increment_ = 0;
  std::vector<SanitizerAccess> accesses_;  // what the nodes touch (stream sanitizer)
  orGraph_t graph_ = nullptr;
  orGraphExec_t exec_ = nullptr;
};

}  // namespace torch_openreg

// torch.accelerator.Graph looks the implementation up in
// at::GraphImplRegistry under c10::DeviceTypeName(device_type), which for
// PrivateUse1 is the backend's name in upper case ("OPENREG" once
// torch.utils.rename_privateuse1_backend("openreg") ran). The macro names
// the registry unqualified: use it in namespace at.
namespace at {
REGISTER_GRAPH_IMPL(OPENREG, torch_openreg::OpenRegGraph);
}
// [docs:graph-impl:end]

namespace torch_openreg {

// torch.openreg.graph_pool_handle(): a pool id for graphs to share (CUDA's
// {0, uid}; a graph's own pool is {uid, 0}).
c10::MempoolId_t graphPoolHandle() { return {0, g_pool_uid.fetch_add(1)}; }

bool currentStreamIsCapturing(c10::DeviceIndex device) {
  orStreamCaptureStatus status = orStreamCaptureStatusNone;
  OPENREG_CHECK(orStreamIsCapturing(currentNativeStream(device), &status));
  return status != orStreamCaptureStatusNone;
}

}  // namespace torch_openreg
