// The glue's half of the stream sanitizer: see Sanitizer.h.
#include "Sanitizer.h"

#include "KernelView.h"

#include <c10/util/Exception.h>

#include <sstream>

namespace torch_openreg {

namespace {
bool runtime_enabled() {
  int on = 0;
  if (orSanitizerGetEnabled(&on) != orSuccess) orGetLastError();
  return on != 0;
}

// The live AliasSets of this thread, innermost first (while sanitizing).
thread_local AliasSet* t_alias_sets = nullptr;

std::atomic<StreamRaceThrower> g_thrower{nullptr};
}  // namespace

// Mirrors the runtime's switch (OPENREG_STREAM_SANITIZER is read by the
// runtime when it loads, before this library).
std::atomic<bool> g_sanitizer_on{runtime_enabled()};

void set_sanitizer(bool on) {
  OPENREG_CHECK(orSanitizerSetEnabled(on ? 1 : 0));
  g_sanitizer_on.store(on, std::memory_order_relaxed);
}

std::string sanitizer_label(const at::Tensor& t) {
  std::ostringstream os;
  os << c10::getDtypeNames(t.scalar_type()).first << t.sizes();
  return os.str();
}

bool tensor_footprint(const at::Tensor& t, const void** begin, size_t* bytes) {
  if (!t.defined() || t.numel() == 0 || !t.has_storage()) return false;
  const void* p = t.const_data_ptr();
  if (!p) return false;
  // Strides are non-negative for every tensor PyTorch can make.
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  *begin = p;
  *bytes = size_t(span) * t.element_size();
  return true;
}

void AliasSet::enter_sanitizer() {
  sanitizing_ = true;
  outer_ = t_alias_sets;
  t_alias_sets = this;
}

void AliasSet::leave_sanitizer() {
  // Sets die in reverse order of creation (they are stack objects).
  if (t_alias_sets == this) t_alias_sets = outer_;
}

// [docs:sanitize-launch]
void sanitize_launch() {
  for (AliasSet* s = t_alias_sets; s; s = s->outer_) {
    for (const SanitizerAccess& a : s->accesses_) {
      OPENREG_CHECK(orSanitizerDeclareAccess(a.ptr, a.bytes, a.write, a.label.c_str()));
    }
  }
}
// [docs:sanitize-launch:end]

void sanitize_host_operand(const at::Tensor& host, bool write) {
  if (!sanitizer_on() || !is_pinned_pointer(host.storage().data_ptr().get())) return;
  const void* p = nullptr;
  size_t n = 0;
  if (tensor_footprint(host, &p, &n))
    OPENREG_CHECK(orSanitizerDeclareAccess(p, n, write, sanitizer_label(host).c_str()));
}

void sanitize_host_waits(c10::DeviceIndex device) {
  if (sanitizer_on()) OPENREG_CHECK(orStreamSynchronize(currentNativeStream(device)));
}

void sanitize_fresh_allocation(const void* ptr, size_t bytes) {
  // A graph node's kernel during a replay: the replay declared the graph's
  // accesses when it was launched (Graph.cpp).
  if (graph_inline_depth != 0) return;
  OPENREG_CHECK(orSanitizerDeclareAccess(ptr, bytes, /*is_write=*/1, "(new allocation)"));
}

void set_stream_race_thrower(StreamRaceThrower fn) { g_thrower.store(fn); }

void throw_stream_race(const std::string& report) {
  if (auto fn = g_thrower.load()) fn(report);  // does not return
  TORCH_CHECK(false, report);
}

}  // namespace torch_openreg
