// Random operators on openreg: every distribution draws from the device's
// Philox generator, following the stream rule of Philox.h.
//
// The argument checks are ATen's own (native/DistributionTemplates.h, the
// templates CUDA's kernels plug into), so errors match the CPU's and CUDA's;
// only the kernels are openreg's. Each kernel takes its (seed, base offset)
// from the generator on the host when it is enqueued, then computes element
// i from stream position base + i, in parallel, on the device's stream.
//
// Words per element (the j of Philox.h; each is one Philox block per four
// elements):
//   uniform_, bernoulli, random_ (range < 2^32)       1 word
//   uniform_ (double), random_ (full / 64-bit range)  2 words (one uint64)
//   exponential_, geometric_, cauchy_                 1 word, 2 for double
//   normal_, log_normal_ (Box-Muller, cosine branch:  2 words, 4 for double
//     u1 = 1 - uniform(first half), u2 = uniform(second half))
//   multinomial (with replacement)                    2 words per sample
//   randperm                                          2 words per key
// Every operator advances the offset by the number of elements (samples,
// keys) it fills, rounded up to 4.
//
// Vendor: these are your device's RNG kernels; keep the registration and
// the generator handling, and compute the same positions from Philox.
#include "aten/graph/CaptureHook.h"
#include "aten/core/DeviceCheck.h"
#include "aten/core/KernelView.h"
#include "aten/layout/MetaLayout.h"
#include "aten/core/Philox.h"

#include "runtime/OpenRegGenerator.h"

#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/Parallel.h>
#include <ATen/core/TransformationHelper.h>
#include <ATen/native/DistributionTemplates.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/native/UnaryOps.h>
#include <c10/util/MathConstants.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/multinomial_native.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace torch_openreg {
namespace {

// Elements per parallel task: Philox blocks are cheap but not free.
constexpr int64_t kGrain = 1 << 14;

// [docs:rng-fill]
// Runs body(alias, seed, base) as a kernel on `out`'s device, where alias is
// the CPU alias of the openreg tensor `out` that the kernel writes and
// (seed, base) are read from `rng` when the kernel runs.
template <typename Body>
void launch_random(const at::Tensor& out, const PhiloxState& rng, const char* name, Body body) {
  const c10::DeviceIndex device = out.device().index();
  AliasSet set(device);
  at::Tensor a = set.alias(out, /*write=*/true);
  launch_kernel(device, name, [&] {
    const auto [seed, base] = unpack(rng);
    TORCH_INTERNAL_ASSERT(base % 4 == 0, "Philox base offset ", base, " is not a multiple of 4");
    body(a, seed, base);
  });
}

// Fills `self` (an openreg tensor) with f(i, words), where words are the J
// Philox words of stream position base + i and i runs over self's elements
// in row-major order. A non-contiguous `self` is filled through a
// contiguous temporary so that positions follow the logical order.
template <typename scalar_t, int J, typename F>
void philox_fill(const at::Tensor& self, const PhiloxState& rng, const char* name, F f) {
  const int64_t n = self.numel();
  launch_random(self, rng, name, [&](at::Tensor& a, uint64_t seed, uint64_t base) {
    const bool direct = a.is_contiguous();
    at::Tensor out = direct ? a : at::empty(a.sizes(), a.options());
    scalar_t* data = out.data_ptr<scalar_t>();
    const int64_t groups = (n + 3) / 4;
    at::parallel_for(0, groups, kGrain / 4, [&](int64_t g0, int64_t g1) {
      philox::for_groups<J>(seed, base, n, g0, g1,
                            [&](int64_t i, const uint32_t (&w)[J]) { data[i] = f(i, w); });
    });
    if (!direct) a.copy_(out);
  });
}

// The generator inputs for filling `self`, taken on the host now.
PhiloxState take(const at::TensorBase& self, const std::optional<at::Generator>& gen) {
  return takePhiloxState(gen, self.device().index(), static_cast<uint64_t>(self.numel()));
}
// [docs:rng-fill:end]

at::Tensor as_tensor(const at::TensorBase& t) { return at::Tensor(t); }

// Uniform in [0, 1) with the dtype's accumulation precision.
template <typename scalar_t>
inline at::dist_acctype<scalar_t> unit(const uint32_t* w) {
  if constexpr (std::is_same_v<scalar_t, double>) {
    return philox::to_unit_double(philox::u64(w[0], w[1]));
  } else {
    return philox::to_unit_float(w[0]);
  }
}
template <typename scalar_t>
constexpr int unit_words() {
  return std::is_same_v<scalar_t, double> ? 2 : 1;
}

// ---------------------------------------------------------------- kernels
// Functors for ATen's distribution templates (RNG is unused: the generator
// type is always OpenRegGeneratorImpl).

template <typename RNG>
struct UniformKernel {
  void operator()(at::TensorIteratorBase& iter, double from, double to,
                  std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(iter.tensor_base(0));
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "uniform_openreg", [&] {
      const auto f = static_cast<scalar_t>(from), t = static_cast<scalar_t>(to);
      constexpr int J = unit_words<scalar_t>();
      philox_fill<scalar_t, J>(self, take(self, gen), "aten::uniform_",
                               [=](int64_t, const uint32_t (&w)[J]) {
        if constexpr (J == 2) {
          return static_cast<scalar_t>(at::transformation::uniform_real<scalar_t>(philox::u64(w[0], w[1]), f, t));
        } else {
          return static_cast<scalar_t>(at::transformation::uniform_real<scalar_t>(w[0], f, t));
        }
      });
    });
  }
};

// [docs:rng-normal]
// Standard normals for positions base .. base+n, computed inside a kernel:
// the Philox words become u1 in (0, 1] and u2 in [0, 1) per element (cheap,
// in parallel), then Box-Muller's cosine branch sqrt(-2 log u1) cos(2 pi u2)
// runs as ATen's vectorised CPU operators on whole buffers (a scalar log and
// cos per element made randn 6x slower than the CPU's).
template <typename acc>
at::Tensor std_normals(int64_t n, uint64_t seed, uint64_t base) {
  const auto dtype = std::is_same_v<acc, double> ? at::kDouble : at::kFloat;
  at::Tensor u1 = at::empty({n}, at::TensorOptions().dtype(dtype));
  at::Tensor u2 = at::empty({n}, at::TensorOptions().dtype(dtype));
  acc* p1 = u1.data_ptr<acc>();
  acc* p2 = u2.data_ptr<acc>();
  constexpr int W = std::is_same_v<acc, double> ? 2 : 1;
  at::parallel_for(0, (n + 3) / 4, kGrain / 4, [&](int64_t g0, int64_t g1) {
    philox::for_groups<2 * W>(seed, base, n, g0, g1, [&](int64_t i, const uint32_t (&w)[2 * W]) {
      p1[i] = acc(1) - unit<acc>(w);
      p2[i] = unit<acc>(w + W);
    });
  });
  return u1.log_().mul_(acc(-2)).sqrt_().mul_(u2.mul_(acc(2) * c10::pi<acc>).cos_());
}
// [docs:rng-normal:end]

// Fills `self` with transform(standard normals at self's positions).
template <typename Transform>
void normal_fill(const at::Tensor& self, const PhiloxState& rng, const char* name, Transform t) {
  const int64_t n = self.numel();
  launch_random(self, rng, name, [&](at::Tensor& a, uint64_t seed, uint64_t base) {
    at::Tensor z = a.scalar_type() == at::kDouble ? std_normals<double>(n, seed, base)
                                                  : std_normals<float>(n, seed, base);
    a.copy_(t(z).view(a.sizes()));
  });
}

void check_floating(const at::TensorBase& self, const char* name) {
  const auto t = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(
      t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16,
      "\"", name, "\" not implemented for '", c10::toString(t), "'");
}

template <typename RNG>
struct NormalKernel {
  void operator()(const at::TensorBase& base, double mean, double std,
                  std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(base);
    check_floating(self, "normal_kernel_openreg");
    normal_fill(self, take(self, gen), "aten::normal_",
                [=](at::Tensor& z) -> at::Tensor& { return z.mul_(std).add_(mean); });
  }
};

template <typename RNG>
struct LogNormalKernel {
  void operator()(at::TensorIteratorBase& iter, double mean, double std,
                  std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(iter.tensor_base(0));
    check_floating(self, "log_normal_openreg");
    normal_fill(self, take(self, gen), "aten::log_normal_",
                [=](at::Tensor& z) -> at::Tensor& { return z.mul_(std).add_(mean).exp_(); });
  }
};

template <typename RNG>
struct ExponentialKernel {
  void operator()(at::TensorIteratorBase& iter, double lambda, std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(iter.tensor_base(0));
    // The CPU kernel's check and message (CUDA's dispatch macro would raise
    // NotImplementedError instead; the CPU is the oracle here).
    TORCH_CHECK(at::isFloatingType(self.scalar_type()),
                "Exponential distribution is a continuous probability distribution. "
                "dtype must be a floating point but you specified ", self.scalar_type());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "exponential_openreg", [&] {
      using acc = at::dist_acctype<scalar_t>;
      const acc l = static_cast<acc>(lambda);
      constexpr int J = unit_words<scalar_t>();
      philox_fill<scalar_t, J>(self, take(self, gen), "aten::exponential_",
                               [=](int64_t, const uint32_t (&w)[J]) {
        return static_cast<scalar_t>(at::transformation::exponential<acc>(unit<scalar_t>(w), l));
      });
    });
  }
};

template <typename RNG>
struct GeometricKernel {
  void operator()(at::TensorIteratorBase& iter, double p, std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(iter.tensor_base(0));
    AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "geometric_openreg", [&] {
      using real = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
      const real pp = static_cast<real>(p);
      constexpr int J = unit_words<real>();
      philox_fill<scalar_t, J>(self, take(self, gen), "aten::geometric_",
                               [=](int64_t, const uint32_t (&w)[J]) {
        const real u = real(1) - unit<real>(w);  // (0, 1], as curand_uniform: log(u) is finite
        return static_cast<scalar_t>(at::transformation::geometric<real>(u, pp));
      });
    });
  }
};

template <typename RNG>
struct CauchyKernel {
  void operator()(at::TensorIteratorBase& iter, double median, double sigma,
                  std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(iter.tensor_base(0));
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "cauchy_openreg", [&] {
      using acc = at::dist_acctype<scalar_t>;
      const acc m = static_cast<acc>(median), s = static_cast<acc>(sigma);
      constexpr int J = unit_words<scalar_t>();
      philox_fill<scalar_t, J>(self, take(self, gen), "aten::cauchy_",
                               [=](int64_t, const uint32_t (&w)[J]) {
        return static_cast<scalar_t>(at::transformation::cauchy<acc>(unit<scalar_t>(w), m, s));
      });
    });
  }
};

// random_(): the dtype's whole non-negative range ([0, 2^digits] for floats).
template <typename RNG>
struct RandomKernel {
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(iter.tensor_base(0));
    AT_DISPATCH_V2(self.scalar_type(), "random_openreg", AT_WRAP([&] {
      philox_fill<scalar_t, 2>(self, take(self, gen), "aten::random_",
                               [](int64_t, const uint32_t (&w)[2]) {
        return at::transformation::uniform_int<scalar_t>(philox::u64(w[0], w[1]));
      });
    }), AT_EXPAND(AT_ALL_TYPES), at::kBool, at::kHalf, at::kBFloat16,
        AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  }
};

template <typename RNG>
struct RandomFromToKernel {
  // [base, base + range)
  void operator()(at::TensorIteratorBase& iter, uint64_t range, int64_t base,
                  std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(iter.tensor_base(0));
    AT_DISPATCH_V2(self.scalar_type(), "random_from_to_openreg", AT_WRAP([&] {
      if (range >= (uint64_t(1) << 32)) {
        philox_fill<scalar_t, 2>(self, take(self, gen), "aten::random_",
                                 [=](int64_t, const uint32_t (&w)[2]) {
          return at::transformation::uniform_int_from_to<scalar_t>(philox::u64(w[0], w[1]), range, base);
        });
      } else {
        philox_fill<scalar_t, 1>(self, take(self, gen), "aten::random_",
                                 [=](int64_t, const uint32_t (&w)[1]) {
          return at::transformation::uniform_int_from_to<scalar_t>(w[0], range, base);
        });
      }
    }), AT_EXPAND(AT_ALL_TYPES), at::kBool, at::kHalf, at::kBFloat16,
        AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  }
  // The full int64 range [-2^63, 2^63).
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(iter.tensor_base(0));
    const auto t = self.scalar_type();
    TORCH_CHECK(t == at::kLong || t == at::kDouble || t == at::kFloat || t == at::kBFloat16,
                "random_full_64_bits_range_kernel_openreg handles only int64, double, float and bfloat16");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kLong, at::kBFloat16, t, "random_full_range_openreg", [&] {
      philox_fill<scalar_t, 2>(self, take(self, gen), "aten::random_",
                               [](int64_t, const uint32_t (&w)[2]) {
        return at::transformation::uniform_int_full_range<scalar_t>(philox::u64(w[0], w[1]));
      });
    });
  }
};

// bernoulli: u < p with u = word / 2^32 (philox::to_unit32).
template <typename RNG>
struct BernoulliScalarKernel {
  void operator()(const at::TensorBase& base, double p, std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(base);
    AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, self.scalar_type(), "bernoulli_scalar_openreg", [&] {
      philox_fill<scalar_t, 1>(self, take(self, gen), "aten::bernoulli_",
                               [=](int64_t, const uint32_t (&w)[1]) {
        return static_cast<scalar_t>(philox::to_unit32(w[0]) < p);
      });
    });
  }
};

template <typename RNG>
struct BernoulliTensorKernel {
  void operator()(const at::TensorBase& base, const at::TensorBase& p_, std::optional<at::Generator> gen) {
    at::Tensor self = as_tensor(base);
    // p may be a CPU tensor, as on CUDA; it is read as double, in self's shape.
    at::Tensor p = as_tensor(p_).to(self.device(), at::kDouble).expand(self.sizes()).contiguous();
    const PhiloxState rng = take(self, gen);
    AliasSet set(self.device().index());
    at::Tensor pa = set.alias(p);
    // The address only: the kernel reads it.
    const double* pd = pa.const_data_ptr<double>();
    AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, self.scalar_type(), "bernoulli_tensor_openreg", [&] {
      philox_fill<scalar_t, 1>(self, rng, "aten::bernoulli_", [pd](int64_t i, const uint32_t (&w)[1]) {
        // The CPU kernel's check, word for word (its message is the
        // condition: tests/ops/test_kernel_messages.py compares them).
        const double p_in = pd[i];
        TORCH_CHECK(p_in >= 0 && p_in <= 1);
        return static_cast<scalar_t>(philox::to_unit32(w[0]) < p_in);
      });
    });
  }
};

// ---------------------------------------------------------------- operators

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  return at::native::templates::uniform_impl_<UniformKernel, OpenRegGeneratorImpl>(self, from, to, gen);
}
at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return at::native::templates::normal_impl_<NormalKernel, OpenRegGeneratorImpl>(self, mean, std, gen);
}
at::Tensor normal_tf(const at::Tensor& mean, double std, std::optional<at::Generator> gen) {
  return at::native::templates::normal_impl<NormalKernel, OpenRegGeneratorImpl>(mean, std, gen);
}
at::Tensor normal_ft(double mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return at::native::templates::normal_impl<NormalKernel, OpenRegGeneratorImpl>(mean, std, gen);
}
// The meta function lays the result out as `mean` where the CPU's iterator
// picks the operands' common layout (MetaLayout.cpp).
at::Tensor normal_tt(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::normal", "Tensor_Tensor");
  return in_promised_layout(
      op, {mean, std, c10::IValue()},
      at::native::templates::normal_impl<NormalKernel, OpenRegGeneratorImpl>(mean, std, gen));
}
// The out= forms check placement first, as bernoulli.out does: ATen's
// templates would run the device kernel on a CPU `out` (no device index).
at::Tensor& normal_tf_out(const at::Tensor& mean, double std, std::optional<at::Generator> gen, at::Tensor& out) {
  check_same_device("aten::normal.Tensor_float_out", {{"mean", mean}, {"out", out}});
  return at::native::templates::normal_out_impl<NormalKernel, OpenRegGeneratorImpl>(out, mean, std, gen);
}
at::Tensor& normal_ft_out(double mean, const at::Tensor& std, std::optional<at::Generator> gen, at::Tensor& out) {
  check_same_device("aten::normal.float_Tensor_out", {{"std", std}, {"out", out}});
  return at::native::templates::normal_out_impl<NormalKernel, OpenRegGeneratorImpl>(out, mean, std, gen);
}
at::Tensor& normal_tt_out(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen,
                          at::Tensor& out) {
  check_same_device("aten::normal.Tensor_Tensor_out", {{"mean", mean}, {"std", std}, {"out", out}});
  return at::native::templates::normal_out_impl<NormalKernel, OpenRegGeneratorImpl>(out, mean, std, gen);
}
at::Tensor& log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return at::native::templates::log_normal_impl_<LogNormalKernel, OpenRegGeneratorImpl>(self, mean, std, gen);
}
at::Tensor& exponential_(at::Tensor& self, double lambda, std::optional<at::Generator> gen) {
  return at::native::templates::exponential_impl_<ExponentialKernel, OpenRegGeneratorImpl>(self, lambda, gen);
}
at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return at::native::templates::geometric_impl_<GeometricKernel, OpenRegGeneratorImpl>(self, p, gen);
}
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
  return at::native::templates::cauchy_impl_<CauchyKernel, OpenRegGeneratorImpl>(self, median, sigma, gen);
}
at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> gen) {
  return at::native::templates::random_impl<RandomKernel, OpenRegGeneratorImpl>(self, gen);
}
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> gen) {
  return at::native::templates::random_from_to_impl<RandomFromToKernel, OpenRegGeneratorImpl>(self, from, to, gen);
}
at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_from(self, 0, to, gen);
}
at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  check_same_device("aten::bernoulli_", {{"self", self}, {"p", p}});
  return at::native::templates::bernoulli_impl_<BernoulliTensorKernel, OpenRegGeneratorImpl>(self, p, gen);
}
at::Tensor& bernoulli_scalar_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return at::native::templates::bernoulli_impl_<BernoulliScalarKernel, OpenRegGeneratorImpl>(self, p, gen);
}
at::Tensor& bernoulli_out(const at::Tensor& self, std::optional<at::Generator> gen, at::Tensor& out) {
  check_same_device("aten::bernoulli.out", {{"self", self}, {"out", out}});
  return at::native::templates::bernoulli_out_impl<BernoulliTensorKernel, OpenRegGeneratorImpl>(out, self, gen);
}

// multinomial: ATen's device-generic implementation (its no-replacement
// path is exponential_ + topk, which run on openreg), with openreg's kernel
// for sampling with replacement behind the stub below.
at::Tensor multinomial(const at::Tensor& self, int64_t n, bool replacement,
                       std::optional<at::Generator> gen) {
  return at::native::multinomial(self, n, replacement, gen);
}
at::Tensor& multinomial_out(const at::Tensor& self, int64_t n, bool replacement,
                            std::optional<at::Generator> gen, at::Tensor& out) {
  check_same_device("aten::multinomial.out", {{"self", self}, {"out", out}});
  return at::native::multinomial_out(self, n, replacement, gen, out);
}

// randperm: a 64-bit Philox key per position, then the positions sorted by
// key (ties by position), as CUDA's randperm sorts random keys.
at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& result) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  TORCH_CHECK(!gen.has_value() || !gen->defined() || result.device() == gen->device(),
              "Expected a '", result.device(), "' generator device but found '", gen->device(), "'");
  at::native::check_supported_max_int_with_precision(n, result);
  result.resize_({n});
  if (n == 0) return result;
  const PhiloxState rng = takePhiloxState(gen, result.device().index(), static_cast<uint64_t>(n));
  launch_random(result, rng, "aten::randperm", [&](at::Tensor& a, uint64_t seed, uint64_t base) {
    std::vector<std::pair<uint64_t, int64_t>> keys(static_cast<size_t>(n));
    at::parallel_for(0, (n + 3) / 4, kGrain / 4, [&](int64_t g0, int64_t g1) {
      philox::for_groups<2>(seed, base, n, g0, g1, [&](int64_t i, const uint32_t (&w)[2]) {
        keys[i] = {philox::u64(w[0], w[1]), i};
      });
    });
    std::sort(keys.begin(), keys.end());
    AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "randperm_openreg", [&] {
      scalar_t* d = a.data_ptr<scalar_t>();
      const int64_t st = a.stride(0);
      for (int64_t i = 0; i < n; ++i) d[i * st] = static_cast<scalar_t>(keys[i].second);
    });
  });
  return result;
}

// multinomial with replacement (the stub ATen's multinomial calls): sample
// j of row r is stream position base + r * n_sample + j, inverted through
// the row's cumulative distribution.
void multinomial_with_replacement(at::Tensor& result, const at::Tensor& self, int64_t n_sample,
                                  std::optional<at::Generator> gen) {
  const c10::DeviceIndex device = self.device().index();
  const int64_t rows = self.dim() == 1 ? 1 : self.size(0);
  const int64_t cats = self.size(-1);
  const PhiloxState rng =
      takePhiloxState(gen, device, static_cast<uint64_t>(rows) * static_cast<uint64_t>(n_sample));
  AliasSet set(device);
  at::Tensor probs = set.alias(self);
  at::Tensor out = set.alias(result, /*write=*/true);
  launch_kernel(device, "aten::multinomial", [&] {
    const auto [seed, base] = unpack(rng);
    at::Tensor p = probs.to(at::kDouble).reshape({rows, cats}).contiguous();
    at::Tensor o = out.is_contiguous() ? out.view({rows, n_sample})
                                       : at::empty({rows, n_sample}, out.options());
    auto pa = p.accessor<double, 2>();
    auto oa = o.accessor<int64_t, 2>();
    std::vector<double> cum(static_cast<size_t>(cats));
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < cats; ++c) {
        const double v = pa[r][c];
        TORCH_CHECK(v >= 0, "invalid multinomial distribution (encountering probability entry < 0)");
        TORCH_CHECK(std::isfinite(v),
                    "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
        sum += v;
        cum[c] = sum;
      }
      TORCH_CHECK(sum > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
      for (int64_t j = 0; j < n_sample; ++j) {
        const uint64_t pos = base + static_cast<uint64_t>(r * n_sample + j);
        const uint32_t lo = philox::word(seed, pos, 0), hi = philox::word(seed, pos, 1);
        // In (0, sum]: the first category whose cumulative sum reaches it
        // has a non-zero probability.
        const double u = (1.0 - philox::to_unit_double(philox::u64(lo, hi))) * sum;
        const int64_t k = std::lower_bound(cum.begin(), cum.end(), u) - cum.begin();
        oa[r][j] = std::min(k, cats - 1);
      }
    }
    if (!out.is_contiguous()) out.copy_(o.view(out.sizes()));
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_CAPTURABLE_IMPL(m, "uniform_", uniform_);
  OPENREG_CAPTURABLE_IMPL(m, "normal_", normal_);
  OPENREG_CAPTURABLE_IMPL(m, "normal.Tensor_float", normal_tf);
  OPENREG_CAPTURABLE_IMPL(m, "normal.float_Tensor", normal_ft);
  OPENREG_CAPTURABLE_IMPL(m, "normal.Tensor_Tensor", normal_tt);
  OPENREG_CAPTURABLE_IMPL(m, "normal.Tensor_float_out", normal_tf_out);
  OPENREG_CAPTURABLE_IMPL(m, "normal.float_Tensor_out", normal_ft_out);
  OPENREG_CAPTURABLE_IMPL(m, "normal.Tensor_Tensor_out", normal_tt_out);
  OPENREG_CAPTURABLE_IMPL(m, "log_normal_", log_normal_);
  OPENREG_CAPTURABLE_IMPL(m, "exponential_", exponential_);
  OPENREG_CAPTURABLE_IMPL(m, "geometric_", geometric_);
  OPENREG_CAPTURABLE_IMPL(m, "cauchy_", cauchy_);
  OPENREG_CAPTURABLE_IMPL(m, "random_", random_);
  OPENREG_CAPTURABLE_IMPL(m, "random_.from", random_from);
  OPENREG_CAPTURABLE_IMPL(m, "random_.to", random_to);
  OPENREG_CAPTURABLE_IMPL(m, "bernoulli_.Tensor", bernoulli_tensor_);
  OPENREG_CAPTURABLE_IMPL(m, "bernoulli_.float", bernoulli_scalar_);
  OPENREG_CAPTURABLE_IMPL(m, "bernoulli.out", bernoulli_out);
  OPENREG_CAPTURABLE_IMPL(m, "multinomial", multinomial);
  OPENREG_CAPTURABLE_IMPL(m, "multinomial.out", multinomial_out);
  OPENREG_CAPTURABLE_IMPL(m, "randperm.generator_out", randperm_out);
}

}  // namespace torch_openreg

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(multinomial_with_replacement_stub,
                              &torch_openreg::multinomial_with_replacement)
}  // namespace at::native
