// Converting between c10d's world and liboccl's (Conversions.hpp).
#include "Conversions.hpp"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace torch_openreg {

void throw_dist(const std::string& msg) { C10_THROW_ERROR(DistBackendError, msg); }

std::exception_ptr make_dist_error(const std::string& msg) {
  try {
    throw_dist(msg);
  } catch (...) {
    return std::current_exception();
  }
}

// The longest timeout liboccl is given: it adds a timeout to
// steady_clock::now(), whose int64 nanosecond count overflows after 292
// years. A longer one (timedelta.max is 2.7 million years) waits ten years.
constexpr std::chrono::milliseconds kMaxTimeout = std::chrono::hours(24 * 3653);

// A group's timeout, checked where c10d or Python hands it over: liboccl
// would take zero or a negative value for its 30-minute default, and a
// timedelta too long for int64 microseconds reaches us wrapped to a
// negative count (torch's and pybind11's conversions do not check).
std::chrono::milliseconds checked_timeout(std::chrono::milliseconds timeout,
                                          const char* what) {
  TORCH_CHECK_VALUE(timeout.count() > 0, what, ": timeout must be positive, got ",
                    timeout.count(), " ms", timeout.count() < -1000LL * 86400 * 365 * 1000
                        ? " (a timedelta too long to count in int64 microseconds wraps around)"
                        : "");
  return std::min(timeout, kMaxTimeout);
}

void or_check(orError_t e, const char* call) {
  if (e != orSuccess) {
    orGetLastError();
    TORCH_CHECK(false, "OCCL: ", call, " failed: ", orGetLastErrorMessage());
  }
}

// Vendor: map your library's types here (as ProcessGroupNCCL's ncclDataType).
occlDataType_t occl_type(at::ScalarType t) {
  switch (t) {
    case at::kChar: return occlInt8;
    case at::kByte: return occlUint8;
    case at::kShort: return occlInt16;
    case at::kUInt16: return occlUint16;
    case at::kInt: return occlInt32;
    case at::kUInt32: return occlUint32;
    case at::kLong: return occlInt64;
    case at::kUInt64: return occlUint64;
    case at::kHalf: return occlFloat16;
    case at::kBFloat16: return occlBFloat16;
    case at::kFloat: return occlFloat32;
    case at::kDouble: return occlFloat64;
    case at::kBool: return occlBool;
    case at::kComplexFloat: return occlComplex64;
    case at::kComplexDouble: return occlComplex128;
    case at::kFloat8_e4m3fn: case at::kFloat8_e5m2: return occlUint8;  // bytes, no reduction
    default:
      C10_THROW_ERROR(TypeError, c10::str("OCCL does not support dtype ", t));
  }
}

occlRedOp_t occl_op(const c10d::ReduceOp& op, at::ScalarType t) {
  using R = c10d::ReduceOp::RedOpType;
  switch (op.op_) {
    case R::SUM: return {occlSum, 0};
    case R::PRODUCT: return {occlProd, 0};
    case R::MIN: return {occlMin, 0};
    case R::MAX: return {occlMax, 0};
    case R::AVG: return {occlAvg, 0};
    case R::BAND: return {occlBand, 0};
    case R::BOR: return {occlBor, 0};
    case R::BXOR: return {occlBxor, 0};
    case R::PREMUL_SUM: {
      auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, "OCCL: PREMUL_SUM without a factor");
      double f = s->double_factor;
      if (s->tensor_factor.defined()) f = s->tensor_factor.to(at::kCPU).item<double>();
      return {occlPreMulSum, f};
    }
    default:
      C10_THROW_ERROR(ValueError, "OCCL: unsupported reduce op");
  }
}


void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "OCCL: ", what,
              " must be an openreg tensor, got one on ", t.device());
  TORCH_CHECK(!t.is_sparse(), "OCCL: sparse tensors are not supported");
}

at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

bool debug() {
  static const bool on = [] {
    const char* v = getenv("OCCL_DEBUG");  // 0 or 1: liboccl refuses anything else
    return v && strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace torch_openreg
