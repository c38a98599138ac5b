// Private to the c10d glue: converting between c10d's world and liboccl's
// (dtypes, reduce ops, tensors, timeouts, errors), for ProcessGroupOCCL.cpp,
// Collectives.cpp and WorkOCCL.cpp.
#pragma once

#include "ProcessGroupOCCL.hpp"

#include <chrono>
#include <exception>
#include <string>

namespace torch_openreg {

// Raises, or makes, c10d's DistBackendError with `msg`.
[[noreturn]] void throw_dist(const std::string& msg);
std::exception_ptr make_dist_error(const std::string& msg);

// A group's timeout, checked where c10d or Python hands it over (`what`
// names the caller in the error): positive, and capped at ten years.
std::chrono::milliseconds checked_timeout(std::chrono::milliseconds timeout,
                                          const char* what = "ProcessGroupOCCL");

// A runtime call that must succeed (`call` names it in the error).
void or_check(orError_t e, const char* call);

// c10d's dtypes and reduce ops as liboccl's (TypeError, ValueError otherwise).
occlDataType_t occl_type(at::ScalarType t);
occlRedOp_t occl_op(const c10d::ReduceOp& op, at::ScalarType t);

// Checks that `t` (named `what` in the error) is a dense openreg tensor.
void check_tensor(const at::Tensor& t, const char* what);
// `t`, or a contiguous copy of it.
at::Tensor dense(const at::Tensor& t);

bool debug();  // OCCL_DEBUG=1

}  // namespace torch_openreg
