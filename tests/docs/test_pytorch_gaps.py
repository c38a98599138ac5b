"""PyTorch's PrivateUse1 gaps, kept as tests (docs/pytorch-gaps.md).

Each test reproduces one place where PyTorch (2.13) hard-codes its in-tree
devices or otherwise fails a PrivateUse1 backend: it does what a CUDA user or
a CUDA backend does, on openreg, and checks that PyTorch fails with the gap's
own signature (exception type and message, a wrong answer, or a crash). Only
then does it raise ``PyTorchGap``, which the strict ``xfail`` expects:

* the gap is still there: the test XFAILs;
* PyTorch fixed it: the test passes, strict mode turns that into a failure of
  the suite, and the entry of docs/pytorch-gaps.md (and openreg's workaround,
  if there is one) must go;
* anything else (another error, another message): the test fails.

Where openreg works around a gap, the reproducer runs PyTorch without the
workaround: in a child process (``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` and manual
steps, openreg's import hook taken off ``sys.meta_path``, or a small C++
library that puts a backend's usual omission back), never by patching torch.

Every child is started at once by one fixture (they run in parallel) and each
reports ``RESULT <name> GAP|WORKS|ERROR ...`` lines; distributed children use
single-process worlds on a ``HashStore``, and every wait is bounded.
"""

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

from tests._subprocess import REPO, child_env
from tests.target import HW, gates

# Each class carries its area's marker (device, profiler, distributed,
# compile): one classification per class. The reproducers run openreg.
pytestmark = pytest.mark.openreg_only

TIMEOUT = 180  # seconds, per child (they share 2 cores with each other)


class PyTorchGap(Exception):
    """PyTorch failed in exactly the way a docs/pytorch-gaps.md entry says."""


def gap(number, reason):
    """The test of gap ``number`` of docs/pytorch-gaps.md. On a release that has
    the gap (torch_gates.GAPS): a strict expected failure, only ``PyTorchGap``
    counts and a pass fails the suite. On a release that fixed it: an ordinary
    test, which fails if the gap is back."""
    if gates().has_gap(number):
        return pytest.mark.xfail(raises=PyTorchGap, strict=True,
                                 reason=f"gap {number} (torch {torch.__version__}): {reason}")
    return pytest.mark.gap_fixed(number)


# --------------------------------------------------------------- children ----

# Run first in every child. `check` calls fn(): if it raises `Gap` (a wrong
# answer) or `exc_type` with a message matching `pattern` (the gap's error),
# the result is GAP; if it returns, WORKS; anything else is an ERROR.
PRELUDE = r'''
import re, sys, traceback

class Gap(Exception):
    pass

def check(name, fn, exc_type=Gap, pattern=""):
    try:
        fn()
    except Gap as e:
        print(f"RESULT {name} GAP {e}", flush=True)
        return
    except BaseException as e:
        msg = f"{type(e).__name__}: {e}"
        if isinstance(e, exc_type) and re.search(pattern, msg):
            print(f"RESULT {name} GAP {msg.splitlines()[0]}", flush=True)
        else:
            print(f"RESULT {name} ERROR {msg.splitlines()[0] if msg else ''}", flush=True)
            traceback.print_exc()
        return
    print(f"RESULT {name} WORKS", flush=True)
'''

C10D_PRELUDE = r'''
import datetime
import torch
import torch.distributed as dist
T = datetime.timedelta(seconds=30)   # every c10d wait is bounded
OPENREG0 = torch.device("openreg", 0)
NO_BACKEND = r"^RuntimeError: No backend type associated with device type openreg$"
'''

CHILDREN = {}


def child(name, code, env=None, needs_lib=False):
    CHILDREN[name] = (PRELUDE + textwrap.dedent(code), env or {}, needs_lib)


# A gloo group on a process bound to an openreg device (device_id).
child("gloo_bound", C10D_PRELUDE + r'''
def gloo_bound():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=OPENREG0, timeout=T)
    dist.destroy_process_group()
check("gloo_bound", gloo_bound, RuntimeError, NO_BACKEND)
''')

# Issue 24 (a): the CPU-side gloo group that checkpointing code makes.
child("new_group_gloo", C10D_PRELUDE + r'''
dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1,
                        device_id=OPENREG0, timeout=T)
assert dist.get_backend() == "occl"

def new_group_gloo():
    g = dist.new_group(backend="gloo", timeout=T)
    t = torch.ones(2)
    dist.all_reduce(t, group=g)
    assert t.tolist() == [1.0, 1.0]
check("new_group_gloo", new_group_gloo, RuntimeError, NO_BACKEND)

# The workaround docs/pytorch-gaps.md gives users: name a backend for the
# bound device too (CPU tensors still go to gloo, openreg ones to occl).
def new_group_mixed():
    g = dist.new_group(backend="cpu:gloo,openreg:occl", timeout=T)
    t = torch.ones(2)
    dist.all_reduce(t, group=g)
    assert t.tolist() == [1.0, 1.0]
    u = torch.ones(2, device="openreg")
    dist.all_reduce(u, group=g)
    assert u.cpu().tolist() == [1.0, 1.0]
check("new_group_mixed", new_group_mixed)
dist.destroy_process_group()
''')

# Issue 24 (c): c10d's fake backend (DTensor's LocalTensor mode, fake worlds).
child("fake_backend", C10D_PRELUDE + r'''
from torch.testing._internal.distributed.fake_pg import FakeStore

def fake_backend():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4, timeout=T)
    t = torch.ones(2, device="openreg")
    dist.all_reduce(t)
    dist.destroy_process_group()
check("fake_backend", fake_backend, RuntimeError, NO_BACKEND)
''')

# A custom backend mixed with gloo ("cpu:gloo,openreg:occl", as examples/ddp_train.py
# and every job that also has CPU tensors initialise): the group's default backend
# is left unset, and destroy_process_group warns. With nccl in the map, it is set.
child("mixed_default_backend", C10D_PRELUDE + r'''
import os, tempfile

def mixed_default_backend():
    dist.init_process_group("cpu:gloo,openreg:occl", store=dist.HashStore(), rank=0,
                            world_size=1, timeout=T)
    t = torch.ones(2, device=OPENREG0)
    dist.all_reduce(t)
    # The warning is C++'s (TORCH_WARN to stderr): catch file descriptor 2.
    saved, log = os.dup(2), tempfile.TemporaryFile()
    os.dup2(log.fileno(), 2)
    try:
        dist.destroy_process_group()
    finally:
        os.dup2(saved, 2)
    log.seek(0)
    text = log.read().decode(errors="replace")
    m = re.search(r"No backend of type 0 found for Process Group with name undefined\. "
                  r"Assuming no hooks are registered\.", text)
    if m:
        raise Gap(m.group(0))
check("mixed_default_backend", mixed_default_backend)
''')

# register_backend(devices="openreg"): documented as "str or list of str".
# Without openreg's autoload (which registers occl with a list), as a
# backend's own package would register it; rename_privateuse1_backend is
# what makes torch.device("openreg") parse.
child("register_backend_str", r'''
import torch
import torch.distributed as dist
torch.utils.rename_privateuse1_backend("openreg")
dist.Backend.register_backend("occl", lambda opts, backend_opts: None,
                              extended_api=True, devices="openreg")

def register_backend_str():
    assert dist.Backend.backend_capability["occl"] == ["openreg"]
    got = dist.get_default_backend_for_device("openreg")
    assert got == "occl", got
check("register_backend_str", register_backend_str, ValueError,
      r"^ValueError: Default backend not registered for device : openreg$")
''', env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})

# Issue 24 (d): DTensorTestBase.init_pg with the device's default backend,
# as it runs on CUDA (nccl). A world of one, so the device type is openreg
# whatever OPENREG_DEVICE_COUNT says.
child("dtensor_init_pg", r'''
import os, tempfile
import torch
import torch.distributed as dist
from torch.testing._internal.distributed._tensor.common_dtensor import DTensorTestBase

class T(DTensorTestBase):
    @property
    def world_size(self):
        return 1
    def test_nothing(self):
        pass

def init_pg():
    t = T("test_nothing")
    t.rank = 0
    fd, t.file_name = tempfile.mkstemp()
    os.close(fd)
    assert t.device_type == "openreg" and t.backend == "occl", (t.device_type, t.backend)
    try:
        t.init_pg(eager_init=False)
        dist.destroy_process_group()
    finally:
        os.unlink(t.file_name)
check("dtensor_init_pg", init_pg, RuntimeError, r"^RuntimeError: Backend occl not supported!$")
''')

# DTensor: LocalTensor mode's RNG tracker, and the first-shard size for
# [Shard(0), Shard(0)] (tests/distributed/test_dtensor_random.py meets both).
child("dtensor_random", r'''
import torch
from types import SimpleNamespace
from torch.distributed._local_tensor import _LocalOffsetBasedRNGTracker
from torch.distributed.tensor import Shard
from torch.distributed.tensor._random import _calc_first_shard_size

def local_tracker_device():
    dev = _LocalOffsetBasedRNGTracker("openreg")._device
    assert dev == torch.device("openreg", torch.openreg.current_device()), dev
check("local_tensor_rng_device", local_tracker_device, AssertionError,
      r"^AssertionError: Torch not compiled with CUDA enabled$")

def first_shard_size():
    # An (8, 8) tensor, [Shard(0), Shard(0)] on a 2x2 mesh: rank 0 holds (2, 8).
    spec = SimpleNamespace(shape=torch.Size([8, 8]), placements=[Shard(0), Shard(0)],
                           mesh=SimpleNamespace(size=lambda dim: 2))
    got = _calc_first_shard_size(spec)
    if got == [4, 8]:
        raise Gap(f"_calc_first_shard_size gives {got} for the (2, 8) shards")
    assert got == [2, 8], got
check("shard0_shard0_size", first_shard_size)
''')

# PyTorch's hardware classification of test classes (torch.testing, 2.14 on):
# what does a PrivateUse1 backend's own device-specific test class declare?
child("hw_classification", r'''
import torch
from torch.testing._internal import common_utils

def hw_classification():
    hw = getattr(common_utils, "HardwareClassification", None)
    if hw is None:
        raise Gap("torch.testing has no HardwareClassification at all")
    name = torch._C._get_privateuse1_backend_name()
    if not {"PRIVATEUSE1", name.upper()} & set(hw.__members__):
        raise Gap(f"HardwareClassification has {sorted(hw.__members__)}: nothing for a "
                  f"PrivateUse1 backend ({name})")
check("hw_classification", hw_classification)
''')

# instantiate_device_type_tests, with the backend registered after
# common_device_type was first imported (no autoload: the backend's own
# import, as PyTorch's test files run).
child("late_registration", r'''
import unittest
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
import torch_openreg  # registers openreg now

class TestGap(unittest.TestCase):
    def test_x(self, device):
        pass

def late():
    scope = {"TestGap": TestGap}
    instantiate_device_type_tests(TestGap, scope)
    if "TestGapPRIVATEUSE1" not in scope:
        raise Gap(f"no PrivateUse1 test class: {sorted(scope)}")
check("late_registration", late)
''', env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})

# largeTensorTest on the PrivateUse1 device: 1 MiB.
child("large_tensor_test", r'''
import unittest
import torch
from torch.testing._internal.common_device_type import largeTensorTest

class T(unittest.TestCase):
    device_type = "openreg"
    def runTest(self):
        pass

@largeTensorTest(1 << 20, device="openreg")
def needs_a_mebibyte(self):
    return "ran"

def large():
    try:
        assert needs_a_mebibyte(T()) == "ran"
    except unittest.SkipTest as e:
        raise Gap(f"a 1 MiB test skipped on a device with "
                  f"{torch.openreg.mem_get_info()[0] >> 20} MiB free: {e}")
check("large_tensor_test", large)
''')

# The names of two device-generic classes of one file.
child("class_names", r'''
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase

class TestA(TestCase):
    @dtypes(torch.float32)
    def test_x(self, device, dtype):
        pass

class TestB(TestCase):
    def test_y(self, device):
        pass

def names():
    scope = {"TestA": TestA, "TestB": TestB}
    instantiate_device_type_tests(TestA, scope, only_for="privateuse1")
    instantiate_device_type_tests(TestB, scope, only_for="privateuse1")
    got = sorted(k for k in scope if k.startswith("Test"))
    suffixes = {k[len("TestA"):] for k in got}
    if len(suffixes) != 1:
        raise Gap(f"one file's classes are named {got}")
check("class_names", names)
''')

# flex_attention on openreg tensors.
child("flex_attention", r'''
import torch
from torch.nn.attention.flex_attention import flex_attention

def flex():
    q = torch.randn(1, 2, 16, 16)
    out = flex_attention(q.to("openreg"), q.to("openreg"), q.to("openreg"))
    torch.testing.assert_close(out.cpu(), flex_attention(q, q, q))
check("flex_attention", flex, ValueError,
      r"FlexAttention is only supported on .* devices\. Found input tensors on openreg device")
''')

# PYTORCH_TESTING_DEVICE_FOR_CUSTOM with the backend's name.
child("device_for_custom", r'''
import unittest
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests

class TestGap(unittest.TestCase):
    def test_x(self, device):
        pass

def for_custom():
    scope = {"TestGap": TestGap}
    instantiate_device_type_tests(TestGap, scope, only_for="cuda")
    if not any(n.endswith(("PRIVATEUSE1", "OPENREG")) for n in scope):
        raise Gap(f"PYTORCH_TESTING_DEVICE_FOR_CUSTOM=openreg added no class: {sorted(scope)}")
check("device_for_custom", for_custom)
''', env={"PYTORCH_TESTING_DEVICE_FOR_CUSTOM": "openreg"})

# Issue 24 (b): backend metadata on an input, seen by a torch.compile backend.
child("backend_meta", r'''
import torch
import torch._utils

def backend_meta():
    x = torch.randn(4, device="openreg")
    torch._utils.set_tensor_metadata(x, {"openreg_format:nc8hw": True})
    seen = []
    def backend(gm, example_inputs):
        seen.extend(torch._utils.get_tensor_metadata(n.meta["example_value"])
                    for n in gm.graph.nodes if n.op == "placeholder")
        return gm.forward
    torch.compile(lambda t: t + 1, backend=backend, fullgraph=True)(x)
    assert len(seen) == 1, seen
    if seen == [{}]:
        raise Gap("the FakeTensor in node.meta['example_value'] has metadata {}")
    assert seen == [{"openreg_format:nc8hw": True}], seen
check("backend_meta", backend_meta)
''')

# torch.compile(mode="reduce-overhead") with openreg as it is (graphs work,
# docs/graphs.md): Inductor's graph trees are CUDA's alone.
child("reduce_overhead", r'''
import torch
from torch._dynamo.utils import counters

def reduce_overhead():
    f = torch.compile(lambda a: (a * 2).sin() + 1, mode="reduce-overhead")
    a = torch.randn(8, device="openreg")
    for _ in range(3):
        out = f(a)
    torch.testing.assert_close(out.cpu(), (a.cpu() * 2).sin() + 1)
    skips = counters["inductor"]["cudagraph_skips"]
    if skips:
        raise Gap(f"reduce-overhead ran without graphs on openreg (cudagraph_skips={skips})")
check("reduce_overhead", reduce_overhead)
''')

# Dynamo and Inductor (docs/compile.md's workarounds), without openreg's:
# its import hook for torch._dynamo is taken off sys.meta_path before Dynamo
# is imported, and torch.openreg answers Inductor's look-ups with plain
# attributes (openreg's lazy __getattr__ would register the backend itself,
# with its config, first).
child("compile", r'''
import torch
from torch_openreg.inductor import _RunAfterImport
sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _RunAfterImport)]
import torch._dynamo
from torch._dynamo import trace_rules
from torch._dynamo.device_interface import get_interface_for_device

def device_interface():
    get_interface_for_device("openreg")
check("dynamo_device_interface", device_interface, NotImplementedError,
      r"^NotImplementedError: No interface for device openreg$")

def stream_functions_in_graph():
    cuda = {trace_rules.lookup(f).__name__ for f in (torch.cuda.stream, torch.cuda.current_stream)}
    assert cuda == {"TorchInGraphFunctionVariable"}, cuda
    ours = {trace_rules.lookup(f).__name__
            for f in (torch.openreg.stream, torch.openreg.current_stream)}
    if ours == {"UserFunctionVariable"}:
        raise Gap("torch.openreg.stream/current_stream are traced as user functions")
    assert ours == cuda, ours
check("dynamo_stream_functions", stream_functions_in_graph)

from torch._inductor.codegen import common
from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen
from torch_openreg.inductor.scheduling import OpenRegScheduling
from torch_openreg.inductor.wrapper import OpenRegCppWrapperCodegen, OpenRegPythonWrapperCodegen
from torch_openreg.inductor import config as openreg_config
m = torch.openreg
m.Scheduling, m.PythonWrapperCodegen = OpenRegScheduling, OpenRegPythonWrapperCodegen
m.CppWrapperCodegen, m.WrapperFxCodegen = OpenRegCppWrapperCodegen, WrapperFxCodegen

# What a backend does on a release that has the official hook (2.15): the
# device module's _inductor_backend_init registers the backend with its config.
# Releases without the hook never call it (their hook reads the classes above).
def _inductor_backend_init():
    common.register_backend_for_device(
        "openreg", OpenRegScheduling, OpenRegPythonWrapperCodegen, OpenRegCppWrapperCodegen,
        device_custom_config=openreg_config)
m._inductor_backend_init = _inductor_backend_init

def custom_config():
    common.init_backend_registration()
    assert common.get_scheduling_for_device("openreg") is OpenRegScheduling
    if common.get_custom_backend_config_for_device("openreg") is None:
        raise Gap("registered through the PrivateUse1 hook without a device_custom_config")
check("inductor_custom_config", custom_config)

def current_backend():
    from torch._inductor.utils import get_current_backend
    got = get_current_backend("openreg")
    if got == "triton":
        raise Gap(f"get_current_backend('openreg') is config.cuda_backend: {got!r}")
check("inductor_current_backend", current_backend)

def device_to_aten():
    from torch._inductor.codegen import cpp_utils
    from torch_openreg import torch_gates
    if not torch_gates.INDUCTOR_ATEN_DEVICE_TYPE:
        if "openreg" not in cpp_utils.DEVICE_TO_ATEN:
            raise Gap(f"cpp_utils.DEVICE_TO_ATEN has no openreg: {sorted(cpp_utils.DEVICE_TO_ATEN)}")
        return
    # 2.15: the mapping asks the device's DeviceOpOverrides.aten_device_type().
    from torch_openreg.inductor.device_op_overrides import OpenRegDeviceOpOverrides
    common.register_device_op_overrides("openreg", OpenRegDeviceOpOverrides())
    got = cpp_utils.device_to_aten("openreg")
    assert got == "at::kPrivateUse1", got
check("cpp_device_to_aten", device_to_aten)

def python_wrapper_kernel_call():
    # The base wrapper calls a C++ (non-Triton) kernel on cpu and mps only.
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V
    with V.set_graph_handler(GraphLowering(torch.fx.symbolic_trace(lambda x: x + 1))):
        wrapper = PythonWrapperCodegen()
        wrapper._generate_kernel_call_helper("kernel", [], device=torch.device("cpu"),
                                             triton=False)
        wrapper._generate_kernel_call_helper("kernel", [], device=torch.device("openreg", 0),
                                             triton=False)
check("python_wrapper_kernel_call", python_wrapper_kernel_call, RuntimeError,
      r"^RuntimeError: device openreg nyi$")
''')

# torch.accelerator.memory_* on a backend whose allocator is a plain
# c10::Allocator (what a first backend registers with REGISTER_ALLOCATOR):
# the helper library puts one, forwarding to openreg's, in openreg's place.
child("plain_allocator", r'''
import ctypes, os
import torch
lib = ctypes.CDLL(os.environ["GAPS_LIB"])
lib.install_plain_allocator()
x = torch.ones(4, device="openreg")  # the plain allocator allocates

def memory_allocated():
    torch.accelerator.memory_allocated()
check("accelerator_memory", memory_allocated, RuntimeError,
      r"INTERNAL ASSERT FAILED.*Allocator for openreg is not a DeviceAllocator\.")
''', needs_lib=True)

# torch.accelerator.empty_host_cache() on a backend without a host allocator
# (the helper library clears openreg's registration). A clean error, or a
# no-op, is the fix; the gap is a crash (the parent checks for SIGSEGV).
child("no_host_allocator", r'''
import ctypes, os
import torch
lib = ctypes.CDLL(os.environ["GAPS_LIB"])
torch.ones(1, device="openreg")
lib.remove_host_allocator()
print("HOST ALLOCATOR REMOVED", flush=True)

def empty_host_cache():
    try:
        torch.accelerator.empty_host_cache()
    except RuntimeError:
        pass  # an error that says so is what the gap asks for
check("empty_host_cache", empty_host_cache)
''', needs_lib=True)

# Module conversion of a tied pair, with PyTorch's own answer to
# _has_compatible_shallow_copy_type (its CompositeImplicitAutograd kernel)
# registered over openreg's kernel: a backend that registers none.
child("shallow_copy_type", r"""
import torch
op = torch.ops.aten._has_compatible_shallow_copy_type.default
lib = torch.library.Library("aten", "IMPL")
lib.impl("_has_compatible_shallow_copy_type", lambda a, b: op.decompose(a, b), "PrivateUse1")

def tied_weights():
    emb, head = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    m = torch.nn.ModuleList([emb, head]).to("openreg")
    if m[0].weight is not m[1].weight:
        raise Gap(f"the tied weight is {len(list(m.parameters()))} Parameters after .to()")
check("tied_weights", tied_weights)
""")

# The helper library: what a backend without openreg's two workarounds has.
GAPS_LIB_SOURCE = r'''
#include <c10/core/Allocator.h>
#include <cstdint>
namespace at {
struct HostAllocator;
void setHostAllocator(c10::DeviceType, HostAllocator*, uint8_t priority);
}  // namespace at

namespace {
// A plain c10::Allocator, not a c10::DeviceAllocator, forwarding to openreg's.
struct Plain final : c10::Allocator {
  explicit Plain(c10::Allocator* inner) : inner(inner) {}
  c10::DataPtr allocate(size_t n) override { return inner->allocate(n); }
  c10::DeleterFnPtr raw_deleter() const override { return inner->raw_deleter(); }
  void copy_data(void* dst, const void* src, std::size_t n) const override {
    inner->copy_data(dst, src, n);
  }
  c10::Allocator* inner;
};
}  // namespace

extern "C" void install_plain_allocator() {
  static Plain plain(c10::GetAllocator(c10::DeviceType::PrivateUse1));
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &plain, /*priority=*/255);
}

// As if no REGISTER_HOST_ALLOCATOR(kPrivateUse1, ...) had run.
extern "C" void remove_host_allocator() {
  at::setHostAllocator(c10::DeviceType::PrivateUse1, nullptr, /*priority=*/255);
}
'''

TORCH_DIR = os.path.dirname(torch.__file__)
CACHE = os.path.join(tempfile.gettempdir(), f"openreg-test-cache-{os.getuid()}", "gaps")


def build_gaps_lib():
    """The helper library (cached by source and torch version); None without a compiler."""
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    if cxx is None:
        return None, "no C++ compiler"
    key = hashlib.sha256((GAPS_LIB_SOURCE + torch.__version__).encode()).hexdigest()[:16]
    lib = os.path.join(CACHE, f"gaps-{key}.so")
    if os.path.exists(lib):
        return lib, ""
    os.makedirs(CACHE, exist_ok=True)
    src = os.path.join(CACHE, f"gaps-{key}.cpp")
    with open(src, "w") as f:
        f.write(GAPS_LIB_SOURCE)
    tmp = f"{lib}.{os.getpid()}"
    torch_lib = os.path.join(TORCH_DIR, "lib")
    cmd = [cxx, "-std=c++20", "-O0", "-w", "-shared", "-fPIC",
           f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}",
           "-I", os.path.join(TORCH_DIR, "include"), src, "-o", tmp,
           f"-L{torch_lib}", f"-Wl,-rpath,{torch_lib}", "-lc10", "-ltorch_cpu"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError(f"building the gaps helper library failed:\n{p.stderr}")
    os.replace(tmp, lib)
    return lib, ""


class Children:
    """Starts every child at once; ``result(name)`` waits (bounded) for one."""

    def __init__(self):
        self.procs, self.done = {}, {}
        self.lib, self.no_lib = None, ""

    def start(self):
        later = []
        for name, (code, env, needs_lib) in CHILDREN.items():
            if needs_lib:
                later.append(name)
            else:
                self._spawn(name, code, env)
        self.lib, self.no_lib = build_gaps_lib()
        for name in later:
            if self.lib:
                code, env, _ = CHILDREN[name]
                self._spawn(name, code, dict(env, GAPS_LIB=self.lib))

    def _spawn(self, name, code, env):
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-c", code], env=child_env(env), cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)

    def result(self, name):
        if name not in self.done:
            if name not in self.procs:
                pytest.skip(f"needs the helper library: {self.no_lib}")
            p = self.procs[name]
            try:
                out, err = p.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, err = p.communicate()
                pytest.fail(f"child {name} timed out after {TIMEOUT} s\n{out}\n{err[-3000:]}")
            self.done[name] = (p.returncode, out, err)
        return self.done[name]

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture(scope="module")
def children():
    c = Children()
    try:
        c.start()
        yield c
    finally:
        c.close()


def outcome(children, child_name, name=None):
    """Raise PyTorchGap for a GAP result, return for WORKS, fail otherwise."""
    name = name or child_name
    rc, out, err = children.result(child_name)
    m = re.search(rf"^RESULT {re.escape(name)} (GAP|WORKS|ERROR) ?(.*)$", out, re.M)
    if m and m.group(1) == "GAP":
        raise PyTorchGap(m.group(2))
    if m and m.group(1) == "WORKS":
        return
    pytest.fail(f"{name}: unexpected result (exit {rc})\n{out}\n{err[-4000:]}")


# ------------------------------------------------------------------ tests ----


@pytest.mark.distributed
class TestDistributedGaps:
    hw_classification = HW.ACCELERATOR

    @gap(1, "c10d: after init_process_group(device_id=openreg), new_group(backend='gloo') "
         "asks gloo, which declares only cpu/cuda, for the bound device's backend")
    def test_new_group_gloo_on_a_bound_process(self, children):
        outcome(children, "new_group_gloo")

    def test_new_group_workaround_names_the_bound_device(self, children):
        # Not a gap: the user-side workaround docs/pytorch-gaps.md gives.
        outcome(children, "new_group_gloo", "new_group_mixed")

    @gap(2, "c10d: init_process_group('gloo', device_id=openreg) asks gloo (cpu/cuda only) "
         "for the bound device's backend")
    def test_gloo_with_a_bound_openreg_device(self, children):
        outcome(children, "gloo_bound")

    @gap(3, "c10d: the fake backend is registered for cpu/cuda/hpu/xpu only")
    def test_fake_backend_with_openreg_tensors(self, children):
        outcome(children, "fake_backend")

    @gap(4, "c10d: register_backend(devices='openreg') iterates the string letter by letter")
    def test_register_backend_devices_as_a_string(self, children):
        outcome(children, "register_backend_str")

    @gap(23, "c10d: a plugin backend mixed with gloo leaves the group's default backend unset "
         "(Backend._plugins keys are upper case, device_backend_map values lower case)")
    def test_mixed_plugin_backend_sets_the_default_backend(self, children):
        outcome(children, "mixed_default_backend")

    @gap(5, "DTensorTestBase.init_pg accepts only an allow-list of backend strings")
    def test_dtensor_test_base_init_pg_default_backend(self, children):
        outcome(children, "dtensor_init_pg")

    @gap(6, "DTensor LocalTensor mode: _LocalOffsetBasedRNGTracker._device calls "
         "torch.cuda.current_device()")
    def test_local_tensor_rng_tracker_device(self, children):
        outcome(children, "dtensor_random", "local_tensor_rng_device")

    @gap(30, "DTensor LocalTensor mode: _distribute_region takes the Philox state from the "
         "accelerator RNG states for cuda and xpu only, the CPU generator's otherwise")
    def test_local_tensor_rng_state_of_the_device(self):
        # End to end, in the LocalTensor worker of tests/distributed (uniform_
        # on a Shard(0) DTensor, 4 simulated ranks). Where gap 6 is still
        # there, the worker stubs torch.cuda.current_device to get past it.
        from tests.distributed._launch import check_ok, run_ranks
        from tests.distributed.test_dtensor_random import GAP30, parse

        results = run_ranks("dtensor_random.py", 1, timeout=TIMEOUT, args=("local",))
        check_ok(results)
        res = {name: lines[0] for name, lines in parse(results, "RESULT").items()}
        got = res.get("local_uniform_shard0_cuda_index_stubbed", res["local_uniform_shard0"])
        if re.fullmatch(GAP30, got):
            raise PyTorchGap(got)
        assert got == "ok", (got, results[0][1], results[0][2][-3000:])

    @gap(7, "DTensor: _calc_first_shard_size divides a dim once per mesh dim sharding it "
         "([Shard(0), Shard(0)]); not PrivateUse1-specific")
    def test_first_shard_size_of_shard0_shard0(self, children):
        outcome(children, "dtensor_random", "shard0_shard0_size")


@pytest.mark.device
class TestDeviceGaps:
    hw_classification = HW.ACCELERATOR

    @gap(8, "torch.testing: device_type_test_bases is computed when common_device_type is "
         "first imported")
    def test_instantiate_device_type_tests_after_late_registration(self, children):
        outcome(children, "late_registration")

    @gap(9, "torch.testing: PYTORCH_TESTING_DEVICE_FOR_CUSTOM matches 'privateuse1', not the "
         "backend's name")
    def test_testing_device_for_custom_takes_the_backend_name(self, children):
        outcome(children, "device_for_custom")

    @gap(29, "torch.testing: HardwareClassification has CPU, CUDA, MPS and XPU, no member "
         "for a PrivateUse1 backend's own tests")
    def test_hw_classification_for_a_privateuse1_backend(self, children):
        outcome(children, "hw_classification")

    @gap(34, "torch.testing: largeTensorTest skips every device type but cuda, xpu, mtia, "
         "cpu and mps ('Unknown device type')")
    def test_large_tensor_test_on_a_privateuse1_device(self, children):
        outcome(children, "large_tensor_test")

    @gap(35, "torch.testing: a file's first PrivateUse1 class is ...PRIVATEUSE1, the later "
         "ones ...<BACKEND>")
    def test_privateuse1_test_class_names(self, children):
        outcome(children, "class_names")

    @gap(10, "torch.accelerator.memory_* need a c10::DeviceAllocator (an internal assert "
         "otherwise)")
    def test_accelerator_memory_with_a_plain_allocator(self, children):
        outcome(children, "plain_allocator", "accelerator_memory")

    @gap(11, "torch.accelerator.empty_host_cache() dereferences a missing host allocator")
    def test_empty_host_cache_without_a_host_allocator(self, children):
        rc, out, err = children.result("no_host_allocator")
        if ("HOST ALLOCATOR REMOVED" in out and "RESULT" not in out
                and rc == -signal.SIGSEGV):
            raise PyTorchGap("empty_host_cache() crashed with SIGSEGV")
        outcome(children, "no_host_allocator", "empty_host_cache")


@pytest.mark.device
class TestModuleGaps:
    hw_classification = HW.ACCELERATOR

    @gap(31, "nn.Module._apply keeps Parameter objects (tied weights) only where "
         "TensorImpl::has_compatible_shallow_copy_type lists the backend; PrivateUse1 is not")
    def test_module_conversion_keeps_tied_weights(self, children):
        outcome(children, "shallow_copy_type", "tied_weights")

    @gap(33, "nn.attention: flex_attention's _validate_device accepts cuda, cpu, xpu, hpu "
         "and mps only")
    def test_flex_attention_on_a_privateuse1_device(self, children):
        outcome(children, "flex_attention")


@pytest.mark.profiler
class TestProfilerGaps:
    hw_classification = HW.ACCELERATOR

    @gap(12, "Kineto: privateuse1_profiler.h needs -DUSE_KINETO and torch/include/kineto, "
         "which torch.utils.cpp_extension does not give")
    def test_register_profiler_with_cpp_extension_flags(self, tmp_path):
        from torch.utils.cpp_extension import include_paths

        cxx = shutil.which(os.environ.get("CXX", "c++"))
        if cxx is None:
            pytest.skip("no C++ compiler")
        src = tmp_path / "plugin.cpp"
        src.write_text(textwrap.dedent("""\
            #include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
            using Registry = torch::profiler::impl::PrivateUse1ProfilerRegistry;
            bool registered() { return Registry::instance().hasFactory(); }
        """))
        cmd = [cxx, "-std=c++20", "-fsyntax-only", "-w",
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}"]
        cmd += [f"-I{p}" for p in include_paths()] + [str(src)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        if p.returncode == 0:
            return
        # Without -DUSE_KINETO the header declares nothing; with it alone,
        # it includes <IActivityProfiler.h>, which is not on the include path.
        if re.search(r"plugin\.cpp:2:\d+: error: .*(does not name a type|has not been declared)",
                     p.stderr):
            raise PyTorchGap("without -DUSE_KINETO privateuse1_profiler.h declares nothing")
        if "IActivityProfiler.h: No such file or directory" in p.stderr:
            raise PyTorchGap("privateuse1_profiler.h includes <IActivityProfiler.h>, not on "
                             "torch.utils.cpp_extension.include_paths()")
        pytest.fail(f"unexpected compiler error:\n{p.stderr[-4000:]}")


@pytest.mark.compile
class TestCompileGaps:
    hw_classification = HW.ACCELERATOR

    @gap(13, "compile: backend metadata (c10::BackendMeta) is not copied to the FakeTensor of "
         "an input")
    def test_backend_meta_reaches_the_fake_tensor(self, children):
        outcome(children, "backend_meta")

    @gap(14, "Dynamo: init_device_reg registers in-tree device interfaces by name")
    def test_dynamo_device_interface(self, children):
        outcome(children, "compile", "dynamo_device_interface")

    @gap(15, "Dynamo: device stream functions are in-graph only by name (trace_rules)")
    def test_dynamo_stream_functions_in_graph(self, children):
        outcome(children, "compile", "dynamo_stream_functions")

    @gap(16, "Inductor: the PrivateUse1 hook registers the backend without its "
         "device_custom_config")
    def test_inductor_hook_keeps_the_device_config(self, children):
        outcome(children, "compile", "inductor_custom_config")

    @gap(18, "Inductor: get_current_backend answers config.cuda_backend for unknown devices")
    def test_inductor_current_backend(self, children):
        outcome(children, "compile", "inductor_current_backend")

    @gap(20, "Inductor: the Python wrapper calls C++ kernels on cpu and mps only "
         "('device openreg nyi')")
    def test_python_wrapper_kernel_call(self, children):
        outcome(children, "compile", "python_wrapper_kernel_call")

    @gap(21, "Inductor: cpp_utils.DEVICE_TO_ATEN maps in-tree device types only")
    def test_cpp_wrapper_device_to_aten(self, children):
        outcome(children, "compile", "cpp_device_to_aten")

    @gap(28, "Inductor: mode='reduce-overhead' (cudagraph trees) uses graphs on CUDA only")
    def test_reduce_overhead_uses_the_device_graphs(self, children):
        outcome(children, "reduce_overhead")

    @gap(32, "convolution: _determine_backend_memory_format answers contiguous for every "
         "*_overrideable device but XPU, so a PrivateUse1 conv cannot promise channels_last")
    def test_convolution_can_promise_channels_last(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        def promised(device):
            cl = torch.channels_last
            x = torch.randn(2, 8, 6, 6, device=device).contiguous(memory_format=cl)
            w = torch.randn(8, 8, 3, 3, device=device).contiguous(memory_format=cl)
            mode = FakeTensorMode()
            fx, fw = mode.from_tensor(x), mode.from_tensor(w)
            with mode:
                return torch.nn.functional.conv2d(fx, fw).is_contiguous(memory_format=cl)

        assert promised("cpu"), "the CPU's convolution promises channels_last here"
        if not promised("openreg"):
            raise PyTorchGap("FakeTensor promises a contiguous openreg convolution result for "
                             "a channels_last input and weight (the CPU's: channels_last)")
