// Errors, configuration and device management.
#include "internal.h"

#include <pthread.h>
#include <unistd.h>
#include <time.h>

#include <strings.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace openreg {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// ------------------------------------------------------------ errors
namespace {
thread_local orError_t t_last_error = orSuccess;
thread_local std::string t_last_message;
}  // namespace

std::string vformat(const char* fmt, va_list ap) {
  char buf[512];
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  std::string out;
  if (n < int(sizeof(buf))) {
    out.assign(buf, n > 0 ? n : 0);
  } else {
    out.resize(n + 1);
    vsnprintf(&out[0], n + 1, fmt, ap2);
    out.resize(n);
  }
  va_end(ap2);
  return out;
}

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

orError_t fail(orError_t err, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  t_last_message = vformat(fmt, ap);
  va_end(ap);
  t_last_error = err;
  return err;
}

// ------------------------------------------------------------ config
namespace {

bool parse_int(const char* s, long* out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

// "4G", "512M", "1048576", "64KiB", "2gb" -> bytes (binary multiples).
bool parse_size(const char* s, size_t* out) {
  if (!s) return false;
  while (isspace(static_cast<unsigned char>(*s))) s++;
  if (!isdigit(static_cast<unsigned char>(*s))) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return false;
  std::string suffix;
  for (const char* p = end; *p; ++p) {
    if (!isspace(static_cast<unsigned char>(*p)))
      suffix += char(toupper(static_cast<unsigned char>(*p)));
  }
  unsigned long long mult = 1;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    mult = 1ull << 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    mult = 1ull << 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    mult = 1ull << 30;
  } else if (suffix == "T" || suffix == "TB" || suffix == "TIB") {
    mult = 1ull << 40;
  } else {
    return false;
  }
  if (v != 0 && mult > ~0ull / v) return false;
  *out = size_t(v * mult);
  return true;
}

// OPENREG_MEMCHECK and its options (docs/memcheck.md). An invalid value
// fails initialisation, as the other variables do.
void load_memcheck_config(Config& c) {
  auto invalid = [&c](const char* var, const char* value, const char* expected) {
    c.init_error = orErrorInitializationError;
    c.init_message = format("%s='%s' is invalid: expected %s", var, value, expected);
    c.device_count = 0;
  };
  if (const char* s = getenv("OPENREG_MEMCHECK")) {
    if (!*s || strcmp(s, "0") == 0 || strcasecmp(s, "off") == 0) {
      c.memcheck = 0;
    } else if (strcmp(s, "1") == 0 || strcasecmp(s, "memcheck") == 0) {
      c.memcheck = 1;
    } else if (strcasecmp(s, "init") == 0 || strcasecmp(s, "initcheck") == 0) {
      c.memcheck = 2;
    } else {
      invalid("OPENREG_MEMCHECK", s, "0, 1, memcheck or initcheck");
    }
  }
  if (const char* s = getenv("OPENREG_MEMCHECK_ON_ERROR")) {
    if (strcasecmp(s, "abort") == 0) c.memcheck_raise = false;
    else if (strcasecmp(s, "raise") == 0) c.memcheck_raise = true;
    else invalid("OPENREG_MEMCHECK_ON_ERROR", s, "abort or raise");
  }
  if (const char* s = getenv("OPENREG_MEMCHECK_GUARD")) {
    if (strcasecmp(s, "end") == 0) c.memcheck_guard_start = false;
    else if (strcasecmp(s, "start") == 0) c.memcheck_guard_start = true;
    else invalid("OPENREG_MEMCHECK_GUARD", s, "end or start");
  }
  if (const char* s = getenv("OPENREG_MEMCHECK_QUARANTINE")) {
    size_t v;
    if (!parse_size(s, &v)) invalid("OPENREG_MEMCHECK_QUARANTINE", s,
                                    "a size in bytes with an optional K/M/G/T suffix");
    else c.memcheck_quarantine = v;
  }
}

Config load_config() {
  Config c;
  if (const char* s = getenv("OPENREG_DEVICE_COUNT")) {
    long v;
    if (!parse_int(s, &v) || v < 0 || v > kMaxDevices) {
      c.init_error = orErrorInitializationError;
      c.init_message = format(
          "OPENREG_DEVICE_COUNT='%s' is invalid: expected an integer in "
          "[0, %d]", s, kMaxDevices);
      c.device_count = 0;
    } else {
      c.device_count = int(v);
    }
  }
  if (const char* s = getenv("OPENREG_DEVICE_MEMORY")) {
    size_t v;
    if (!parse_size(s, &v) || v < (size_t(1) << 20)) {
      c.init_error = orErrorInitializationError;
      c.init_message = format(
          "OPENREG_DEVICE_MEMORY='%s' is invalid: expected a size in bytes of "
          "at least 1M, with an optional K/M/G/T suffix (e.g. 512M, 4G)", s);
      c.device_count = 0;
    } else {
      // Keep the capacity a whole number of pages.
      c.capacity = round_up(v, kPageSize);
    }
  }
  if (const char* s = getenv("OPENREG_STRICT_MEMORY")) {
    c.strict = !(strcmp(s, "0") == 0 || strcasecmp(s, "false") == 0 ||
                 strcasecmp(s, "off") == 0 || strcasecmp(s, "no") == 0);
  }
  load_memcheck_config(c);
  if (const char* s = getenv("OPENREG_DEVICE_WORKERS")) {
    long v;
    if (!parse_int(s, &v) || v < 1 || v > 64) {
      c.init_error = orErrorInitializationError;
      c.init_message = format(
          "OPENREG_DEVICE_WORKERS='%s' is invalid: expected an integer in "
          "[1, 64]", s);
      c.device_count = 0;
    } else {
      c.workers = int(v);
    }
  }
  return c;
}

std::atomic<bool> g_initialised{false};
std::atomic<bool> g_forked{false};

void on_fork_child() {
  if (g_initialised.load()) g_forked.store(true);
}

}  // namespace

const Config& config() {
  static const Config* c = [] {
    pthread_atfork(nullptr, nullptr, on_fork_child);
    return new Config(load_config());
  }();
  return *c;
}

bool in_forked_child() { return g_forked.load(); }

// ------------------------------------------------------------ devices
namespace {
thread_local int t_current_device = 0;

struct DeviceSlot {
  std::once_flag once;
  Device* dev = nullptr;
  orError_t err = orSuccess;
  std::string message;
};
DeviceSlot* slots() {
  static DeviceSlot* s = new DeviceSlot[kMaxDevices];  // leaked on purpose:
  return s;  // worker threads may outlive static destructors at exit
}
}  // namespace

int current_device_index() { return t_current_device; }

Device* get_device(int index, const char* call) {
  const Config& c = config();
  if (c.init_error != orSuccess) {
    fail(c.init_error, "%s: openreg runtime initialisation failed: %s", call,
         c.init_message.c_str());
    return nullptr;
  }
  if (in_forked_child()) {
    fail(orErrorInitializationError,
         "%s: " OPENREG_FORK_MESSAGE, call);
    return nullptr;
  }
  if (index < 0 || index >= c.device_count) {
    fail(orErrorInvalidDevice,
         "%s: invalid device ordinal %d (OPENREG_DEVICE_COUNT=%d)", call, index,
         c.device_count);
    return nullptr;
  }
  DeviceSlot& slot = slots()[index];
  std::call_once(slot.once, [&] {
    auto* dev = new Device();
    dev->index = index;
    init_arena(*dev);
    if (!dev->arena) {
      slot.err = orErrorInitializationError;
      slot.message = format("could not map %zu bytes of device memory for "
                            "device %d (OPENREG_DEVICE_MEMORY)",
                            c.capacity, index);
      delete dev;
      return;
    }
    install_fault_handler();
    init_device_streams(*dev);
    slot.dev = dev;
    g_initialised.store(true);
  });
  if (!slot.dev) {
    fail(slot.err, "%s: %s", call, slot.message.c_str());
    return nullptr;
  }
  return slot.dev;
}

// Lock-free lookup of an already-initialised device (nullptr otherwise).
Device* peek_device(int index) {
  if (index < 0 || index >= kMaxDevices) return nullptr;
  return slots()[index].dev;
}

}  // namespace openreg

using namespace openreg;

namespace {

// A device's UUID: FNV-1a over "openreg:<host name>:<ordinal>", twice with
// different offsets for 128 bits, stamped as an RFC 9562 version-8 (custom)
// UUID. The host name makes devices of different machines differ; the same
// device gets the same UUID in every process on its host (as a GPU's does),
// which is what peers comparing devices across processes need.
// Vendor: report your hardware's UUID instead.
void device_uuid(int device, unsigned char out[16]) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
  char key[320];
  snprintf(key, sizeof(key), "openreg:%s:%d", host, device);
  uint64_t h[2] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
  for (uint64_t& v : h) {
    for (const char* p = key; *p; ++p) {
      v ^= static_cast<unsigned char>(*p);
      v *= 0x100000001b3ULL;
    }
  }
  for (int i = 0; i < 16; ++i) out[i] = static_cast<unsigned char>(h[i / 8] >> (8 * (i % 8)));
  out[6] = static_cast<unsigned char>((out[6] & 0x0f) | 0x80);  // version 8
  out[8] = static_cast<unsigned char>((out[8] & 0x3f) | 0x80);  // RFC variant
}

}  // namespace

extern "C" {

orError_t orGetLastError(void) {
  orError_t e = t_last_error;
  t_last_error = orSuccess;
  return e;
}

orError_t orPeekAtLastError(void) { return t_last_error; }

const char* orGetLastErrorMessage(void) { return t_last_message.c_str(); }

const char* orGetErrorName(orError_t error) {
  switch (error) {
    case orSuccess: return "orSuccess";
    case orErrorInvalidValue: return "orErrorInvalidValue";
    case orErrorMemoryAllocation: return "orErrorMemoryAllocation";
    case orErrorInitializationError: return "orErrorInitializationError";
    case orErrorInvalidDevice: return "orErrorInvalidDevice";
    case orErrorInvalidDevicePointer: return "orErrorInvalidDevicePointer";
    case orErrorInvalidMemcpyDirection: return "orErrorInvalidMemcpyDirection";
    case orErrorInvalidResourceHandle: return "orErrorInvalidResourceHandle";
    case orErrorNotReady: return "orErrorNotReady";
    case orErrorIllegalAddress: return "orErrorIllegalAddress";
    case orErrorLaunchFailure: return "orErrorLaunchFailure";
    case orErrorNotPermitted: return "orErrorNotPermitted";
    case orErrorNotSupported: return "orErrorNotSupported";
    case orErrorStreamRace: return "orErrorStreamRace";
    case orErrorStreamCaptureUnsupported: return "orErrorStreamCaptureUnsupported";
    case orErrorStreamCaptureInvalidated: return "orErrorStreamCaptureInvalidated";
    case orErrorStreamCaptureUnmatched: return "orErrorStreamCaptureUnmatched";
    case orErrorStreamCaptureUnjoined: return "orErrorStreamCaptureUnjoined";
    case orErrorStreamCaptureIsolation: return "orErrorStreamCaptureIsolation";
    case orErrorCapturedEvent: return "orErrorCapturedEvent";
    case orErrorStreamCaptureWrongThread: return "orErrorStreamCaptureWrongThread";
    case orErrorUnknown: return "orErrorUnknown";
  }
  return "unrecognized error code";
}

const char* orGetErrorString(orError_t error) {
  switch (error) {
    case orSuccess: return "no error";
    case orErrorInvalidValue: return "invalid argument";
    case orErrorMemoryAllocation: return "out of memory";
    case orErrorInitializationError: return "initialization error";
    case orErrorInvalidDevice: return "invalid device ordinal";
    case orErrorInvalidDevicePointer: return "invalid device pointer";
    case orErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case orErrorInvalidResourceHandle: return "invalid resource handle";
    case orErrorNotReady: return "device not ready";
    case orErrorIllegalAddress: return "an illegal memory access was encountered";
    case orErrorLaunchFailure: return "unspecified launch failure";
    case orErrorNotPermitted: return "operation not permitted";
    case orErrorNotSupported: return "operation not supported";
    case orErrorStreamRace: return "stream race detected by the sanitizer";
    case orErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case orErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case orErrorStreamCaptureUnmatched: return "capture was not ended in the stream that began it";
    case orErrorStreamCaptureUnjoined: return "a forked stream was not joined back before the capture ended";
    case orErrorStreamCaptureIsolation: return "operation would make the capture depend on work outside it";
    case orErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case orErrorStreamCaptureWrongThread: return "attempt to end a capture sequence from another thread";
    case orErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}

orError_t orGetDeviceCount(int* count) {
  if (!count) return fail(orErrorInvalidValue, "orGetDeviceCount: count is NULL");
  const Config& c = config();
  if (c.init_error != orSuccess) {
    *count = 0;
    return fail(c.init_error, "orGetDeviceCount: %s", c.init_message.c_str());
  }
  *count = c.device_count;
  return orSuccess;
}

orError_t orSetDevice(int device) {
  // Validate without initialising the device: like cudaSetDevice, setting the
  // current device is cheap; memory is mapped on first real use.
  const Config& c = config();
  if (c.init_error != orSuccess)
    return fail(c.init_error, "orSetDevice: %s", c.init_message.c_str());
  if (device < 0 || device >= c.device_count)
    return fail(orErrorInvalidDevice,
                "orSetDevice: invalid device ordinal %d (OPENREG_DEVICE_COUNT=%d)",
                device, c.device_count);
  t_current_device = device;
  return orSuccess;
}

orError_t orGetDevice(int* device) {
  if (!device) return fail(orErrorInvalidValue, "orGetDevice: device is NULL");
  *device = t_current_device;
  return orSuccess;
}

orError_t orGetDeviceProperties(orDeviceProp* prop, int device) {
  if (!prop) return fail(orErrorInvalidValue, "orGetDeviceProperties: prop is NULL");
  const Config& c = config();
  if (c.init_error != orSuccess)
    return fail(c.init_error, "orGetDeviceProperties: %s", c.init_message.c_str());
  if (device < 0 || device >= c.device_count)
    return fail(orErrorInvalidDevice,
                "orGetDeviceProperties: invalid device ordinal %d "
                "(OPENREG_DEVICE_COUNT=%d)", device, c.device_count);
  memset(prop, 0, sizeof(*prop));
  snprintf(prop->name, sizeof(prop->name), "OpenReg Simulated Device %d", device);
  prop->totalGlobalMem = c.capacity;
  prop->multiProcessorCount = c.workers;
  prop->major = 1;
  prop->minor = 0;
  prop->strictMemory = c.strict ? 1 : 0;
  orDeviceGetStreamPriorityRange(&prop->streamPriorityLeast,
                                 &prop->streamPriorityGreatest);
  prop->pageSize = kPageSize;
  device_uuid(device, prop->uuid.bytes);
  prop->integrated = 1;
  prop->isMultiGpuBoard = 0;
  return orSuccess;
}

orError_t orDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (!canAccessPeer)
    return fail(orErrorInvalidValue, "orDeviceCanAccessPeer: canAccessPeer is NULL");
  const Config& c = config();
  if (c.init_error != orSuccess)
    return fail(c.init_error, "orDeviceCanAccessPeer: %s", c.init_message.c_str());
  for (int d : {device, peerDevice}) {
    if (d < 0 || d >= c.device_count)
      return fail(orErrorInvalidDevice,
                  "orDeviceCanAccessPeer: invalid device ordinal %d "
                  "(OPENREG_DEVICE_COUNT=%d)", d, c.device_count);
  }
  // Every arena is mapped in this process, so a copy or kernel on one device
  // reaches any other's memory (orMemcpy* takes device-to-device across
  // devices). A device is not its own peer, as in CUDA.
  *canAccessPeer = device != peerDevice ? 1 : 0;
  return orSuccess;
}

orError_t orDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -3;
  return orSuccess;
}

}  // extern "C"
