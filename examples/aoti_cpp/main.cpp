// Runs an AOTInductor package compiled for openreg, without Python:
//
//   run_package <model.pt2> [device_index] [rows] [cols]
//
// The input is linspace(-1, 1, rows * cols) as a rows x cols float tensor on
// openreg:<device_index>; each output is printed as "output <i> <shape>" and
// its values, one per line (tests/compile/test_aoti.py compares them with
// Python).
#include <ATen/ATen.h>
#include <c10/core/DeviceType.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <model.pt2> [device_index] [rows] [cols]\n", argv[0]);
    return 2;
  }
  const c10::DeviceIndex device = argc > 2 ? static_cast<c10::DeviceIndex>(std::atoi(argv[2])) : 0;
  const int64_t rows = argc > 3 ? std::atoll(argv[3]) : 4;
  const int64_t cols = argc > 4 ? std::atoll(argv[4]) : 32;
  try {
    // [docs:aoti-cpp-main]
    // What torch_openreg's import does in Python: PrivateUse1 is "openreg".
    c10::register_privateuse1_backend("openreg");
    const c10::Device openreg(c10::DeviceType::PrivateUse1, device);

    // The package's AOTI_DEVICE_KEY ("openreg") selects openreg's runner;
    // device_index picks the device it runs on.
    torch::inductor::AOTIModelPackageLoader loader(argv[1], "model", false, 1, device);
    at::Tensor x = at::linspace(-1.0, 1.0, rows * cols).reshape({rows, cols}).to(openreg);
    std::vector<at::Tensor> outputs = loader.run({x});
    // [docs:aoti-cpp-main:end]
    for (size_t i = 0; i < outputs.size(); ++i) {
      at::Tensor out = outputs[i].to(at::kCPU).to(at::kDouble).contiguous();
      std::printf("output %zu %s %s\n", i, outputs[i].device().str().c_str(),
                  c10::str(out.sizes()).c_str());
      const double* p = out.data_ptr<double>();
      for (int64_t j = 0; j < out.numel(); ++j) std::printf("%.9g\n", p[j]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "run_package: %s\n", e.what());
    return 1;
  }
  return 0;
}
