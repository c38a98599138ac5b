// libopenreg_aoti.so: AOTInductor's model runner for openreg, the piece that
// AOTIModelPackageLoader (torch._inductor.aoti_load_package in Python,
// torch::inductor::AOTIModelPackageLoader in C++) looks up by the package's
// AOTI_DEVICE_KEY, "openreg". torch registers runners for cpu, cuda, xpu and
// mps; RegisterAOTIModelRunner is the public hook for any other device.
//
// Loading this library registers the runner and brings in what a package's
// model library calls without linking it (AOTInductor links a model against
// torch only): libopenreg_inductor.so (kernel launches) and
// libopenreg_aoti_shim.so (openreg's C shim). A C++ program links it; Python
// loads it when torch_openreg is imported (torch_openreg/__init__.py), with
// RTLD_GLOBAL so that model libraries loaded later resolve against it.
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <memory>
#include <regex>
#include <string>

#include "openreg_inductor.h"
#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegStream.h"

namespace torch_openreg {
namespace {

// [docs:aoti-runner]
AOTIRuntimeError refuse_copying_update(AOTInductorModelContainerHandle, AOTInductorConstantMapHandle,
                                       bool, bool) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false,
      "openreg AOTInductor: copying weights into the model (load_constants with "
      "user_managed=False, or from CPU tensors) is not supported: PyTorch 2.13's "
      "AOTInductor runtime copies them with host memcpy for devices other than "
      "CUDA, XPU and MPS. Pass openreg tensors with user_managed=True (used in place).");
}

class AOTIModelContainerRunnerOpenReg : public torch::inductor::AOTIModelContainerRunner {
 public:
  AOTIModelContainerRunnerOpenReg(const std::string& model_so_path, size_t num_models,
                                  const std::string& device_str, const std::string& bin_dir,
                                  bool run_single_threaded, c10::DeviceIndex device)
      : AOTIModelContainerRunner(model_so_path, num_models, device_str, bin_dir,
                                 run_single_threaded),
        device_(device) {
    // Copying weight updates (load_constants(..., user_managed=False), the
    // default, and the from-CPU variant) are compiled into the model library
    // as host memcpy into malloc'd memory for every device but CUDA, XPU and
    // MPS (model_container.h): on openreg that would write device data into
    // host memory. They are refused; user-managed updates (the caller's
    // openreg tensors used in place) work.
    update_constant_buffer_func_ = &refuse_copying_update;
    update_constant_buffer_from_cpu_func_ = &refuse_copying_update;
  }

 protected:
  // stream_handle: an orStream_t of the model's device, or null for the
  // current stream (as the CUDA runner takes a cudaStream_t). The model's
  // kernels and allocations follow the current stream, so a given stream is
  // made current for the run.
  std::vector<at::Tensor> run_impl(std::vector<AtenTensorHandle>& input_handles,
                                   void* stream_handle) override {
    // The model's kernels take device addresses: an input elsewhere would be
    // read as one (CPU memory) or from the wrong device. Refused, as eager
    // openreg operators refuse mixed devices.
    const c10::Device expected(c10::DeviceType::PrivateUse1, device_);
    for (size_t i = 0; i < input_handles.size(); ++i) {
      const at::Tensor* t =
          torch::aot_inductor::tensor_handle_to_tensor_pointer(input_handles[i]);
      TORCH_CHECK_VALUE(t == nullptr || !t->defined() || t->device() == expected,
                        "AOTInductor: this package runs on ", expected, ", but input ", i,
                        " is on ", t->device(),
                        " (load it with device_index=N to run on openreg:N)");
    }
    if (stream_handle == nullptr) {
      return AOTIModelContainerRunner::run_impl(input_handles, nullptr);
    }
    const c10::Stream stream =
        streamFromNative(device_, static_cast<orStream_t>(stream_handle));
    const c10::Stream previous = exchangeCurrentStream(stream);
    try {
      auto out = AOTIModelContainerRunner::run_impl(input_handles, stream_handle);
      exchangeCurrentStream(previous);
      return out;
    } catch (...) {
      exchangeCurrentStream(previous);
      throw;
    }
  }

 private:
  c10::DeviceIndex device_;
};

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> create_runner(
    const std::string& model_so_path, size_t num_models, const std::string& device_str,
    const std::string& bin_dir, const bool run_single_threaded) {
  static const std::regex re("openreg(:([0-9]{1,4}))?");
  std::smatch m;
  TORCH_CHECK(std::regex_match(device_str, m, re), "openreg AOTInductor runner: invalid device '",
              device_str, "'");
  // Parsed as an int first: up to 4 digits, checked before narrowing.
  const int index = m[2].matched ? std::stoi(m[2].str()) : current_device();
  TORCH_CHECK(index < device_count(),
              "openreg AOTInductor runner: cannot load the package on ", device_str, ": ",
              static_cast<int>(device_count()), " openreg device(s) (OPENREG_DEVICE_COUNT)");
  return std::make_unique<AOTIModelContainerRunnerOpenReg>(
      model_so_path, num_models, device_str, bin_dir, run_single_threaded,
      static_cast<c10::DeviceIndex>(index));
}

const torch::inductor::RegisterAOTIModelRunner register_openreg("openreg", &create_runner);
// [docs:aoti-runner:end]

// A package compiled for the CPU, given openreg tensors, would run its CPU
// kernels on device addresses (a segfault with strict memory, wrong results
// without) unless an extern operator happens to come first and refuse them.
// This runner is torch's CPU runner (the same base class and arguments as
// AOTIModelContainerRunnerCpu) with that check in front, registered in its
// place while openreg is loaded.
class AOTIModelContainerRunnerCpuChecked : public torch::inductor::AOTIModelContainerRunner {
 public:
  AOTIModelContainerRunnerCpuChecked(const std::string& model_so_path, size_t num_models,
                                     bool run_single_threaded)
      : AOTIModelContainerRunner(model_so_path, num_models, "cpu", "", run_single_threaded) {}

 protected:
  std::vector<at::Tensor> run_impl(std::vector<AtenTensorHandle>& input_handles,
                                   void* stream_handle) override {
    for (size_t i = 0; i < input_handles.size(); ++i) {
      const at::Tensor* t =
          torch::aot_inductor::tensor_handle_to_tensor_pointer(input_handles[i]);
      TORCH_CHECK_VALUE(t == nullptr || !t->defined() || t->device().is_cpu(),
                        "AOTInductor: this package was compiled for the CPU, but input ", i,
                        " is on ", t->device(),
                        "; export and compile the model with inputs on that device");
    }
    return AOTIModelContainerRunner::run_impl(input_handles, stream_handle);
  }
};

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> create_cpu_runner(
    const std::string& model_so_path, size_t num_models, const std::string& device_str,
    const std::string& bin_dir, const bool run_single_threaded) {
  return std::make_unique<AOTIModelContainerRunnerCpuChecked>(model_so_path, num_models,
                                                              run_single_threaded);
}

const torch::inductor::RegisterAOTIModelRunner register_cpu("cpu", &create_cpu_runner);

}  // namespace
}  // namespace torch_openreg
