// The openreg random number generator.
//
// Kernels run ATen's CPU code on device memory, so the device generator keeps
// a CPU (Philox-free mt19937) generator as its state and hands that to the
// CPU kernels it launches. Seeds and states therefore round-trip exactly, and
// each device has its own independent default generator, as on CUDA.
// Vendor: a real device keeps its own engine state (e.g. Philox seed and
// offset) here instead.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace torch_openreg {

struct OpenRegGeneratorImpl : public c10::GeneratorImpl {
  explicit OpenRegGeneratorImpl(c10::DeviceIndex device_index);
  ~OpenRegGeneratorImpl() override = default;

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator that CPU kernels launched for this device consume.
  const at::Generator& cpu_generator() const { return cpu_; }

 private:
  OpenRegGeneratorImpl* clone_impl() const override;
  mutable at::Generator cpu_;
};

const at::Generator& getDefaultOpenRegGenerator(c10::DeviceIndex device_index = -1);
at::Generator createOpenRegGenerator(c10::DeviceIndex device_index = -1);
// For an openreg generator, the CPU generator behind it; otherwise `gen`.
at::Generator cpuGeneratorFor(const at::Generator& gen);

}  // namespace torch_openreg
