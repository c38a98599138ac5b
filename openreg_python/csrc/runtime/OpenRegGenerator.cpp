#include "OpenRegGenerator.h"

#include "OpenRegFunctions.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <vector>

namespace torch_openreg {

OpenRegGeneratorImpl::OpenRegGeneratorImpl(c10::DeviceIndex device_index)
    : c10::GeneratorImpl{c10::Device(c10::DeviceType::PrivateUse1, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)},
      cpu_(at::make_generator<at::CPUGeneratorImpl>(c10::default_rng_seed_val)) {}

void OpenRegGeneratorImpl::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> g(cpu_.mutex());
  cpu_.set_current_seed(seed);
}

void OpenRegGeneratorImpl::set_offset(uint64_t /*offset*/) {
  TORCH_CHECK(false, "openreg generators do not support set_offset (their "
              "engine is a Mersenne Twister, like the CPU's); use set_state");
}

uint64_t OpenRegGeneratorImpl::get_offset() const {
  TORCH_CHECK(false, "openreg generators do not support get_offset (their "
              "engine is a Mersenne Twister, like the CPU's); use get_state");
}

uint64_t OpenRegGeneratorImpl::current_seed() const { return cpu_.current_seed(); }

uint64_t OpenRegGeneratorImpl::seed() {
  std::lock_guard<std::mutex> g(cpu_.mutex());
  return cpu_.seed();
}

void OpenRegGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  std::lock_guard<std::mutex> g(cpu_.mutex());
  cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> OpenRegGeneratorImpl::get_state() const {
  std::lock_guard<std::mutex> g(cpu_.mutex());
  return cpu_.unsafeGetGeneratorImpl()->get_state();
}

OpenRegGeneratorImpl* OpenRegGeneratorImpl::clone_impl() const {
  auto* gen = new OpenRegGeneratorImpl(device().index());
  gen->cpu_ = cpu_.clone();
  return gen;
}

const at::Generator& getDefaultOpenRegGenerator(c10::DeviceIndex device_index) {
  static std::once_flag once;
  static std::vector<at::Generator>* gens = nullptr;
  std::call_once(once, [] {
    gens = new std::vector<at::Generator>();
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      gens->push_back(at::make_generator<OpenRegGeneratorImpl>(i));
    }
  });
  if (device_index < 0) device_index = current_device();
  check_device_index(device_index);
  return (*gens)[device_index];
}

at::Generator createOpenRegGenerator(c10::DeviceIndex device_index) {
  if (device_index < 0) device_index = current_device();
  check_device_index(device_index);
  return at::make_generator<OpenRegGeneratorImpl>(device_index);
}

at::Generator cpuGeneratorFor(const at::Generator& gen) {
  if (gen.defined() && gen.device().type() == c10::DeviceType::PrivateUse1) {
    return static_cast<OpenRegGeneratorImpl*>(gen.unsafeGetGeneratorImpl())->cpu_generator();
  }
  return gen;
}

}  // namespace torch_openreg
