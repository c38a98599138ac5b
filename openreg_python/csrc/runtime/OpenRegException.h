// Turning runtime error codes into C++ exceptions that Python sees as
// RuntimeError (or torch.OutOfMemoryError) naming the device, the call and
// the reason. Light header: c10 only.
#pragma once

#include <openreg.h>

#include <c10/util/Exception.h>

namespace torch_openreg {

// Throws c10::Error (c10::OutOfMemoryError for orErrorMemoryAllocation) with
// "openreg error in <call>: <name> (<reason>): <runtime detail>". (c10::Error
// already records the C++ location; the message names the runtime call.)
[[noreturn]] void throw_runtime_error(orError_t err, const char* call);
// orErrorStreamRace: the sanitizer's report, as torch_openreg.StreamRaceError
// (aten/core/Sanitizer.cpp).
[[noreturn]] void throw_stream_race(const std::string& report);

}  // namespace torch_openreg

// Wrap every runtime call made by the torch glue.
#define OPENREG_CHECK(EXPR)                                              \
  do {                                                                   \
    const orError_t __or_err = (EXPR);                                   \
    if (C10_UNLIKELY(__or_err != orSuccess)) {                           \
      ::torch_openreg::throw_runtime_error(__or_err, #EXPR);             \
    }                                                                    \
  } while (0)
