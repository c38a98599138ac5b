#include "AttentionDropoutCache.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/empty.h>

namespace torch_openreg {

at::Tensor keep_mask(const at::Tensor& like, double dropout_p, uint64_t seed) {
  auto engine = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto keep = at::empty(like.sizes(), like.options().dtype(at::kBool));
  keep.bernoulli_(1.0 - dropout_p, engine);
  return keep;
}

KeepMaskCache& keep_mask_cache() {
  static auto* c = new KeepMaskCache();
  return *c;
}

}  // namespace torch_openreg
