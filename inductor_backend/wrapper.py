"""Wrapper code generation for openreg: the host code that allocates buffers and
launches kernels (Inductor's "wrapper"), in Python and in C++ (cpp_wrapper).

Inductor 2.13's wrappers know cpu/cuda/xpu/mps/mtia by name: ``create()``
returns the base class, kernel calls for other devices raise "device ... nyi",
and the fast allocators exist only for those devices. These subclasses fill in
openreg:

* buffers come from ``torch.empty_strided(..., device='openreg:N')``: the
  caching allocator, on the buffer's own device (Inductor enters no device
  guard for non-GPU device types, so the index is spelled out);
* a kernel call is a call of the kernel object that runtime.compile_kernel
  made: it launches on the current stream of the tensors' device.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from torch._inductor import config as inductor_config
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

from . import config as openreg_config

_scope = threading.local()


# [docs:config-scope]
def enter_scheduling_config() -> None:
    """Applies openreg's per-device config (config.py) to Inductor's global
    config, thread-locally, from the moment the wrapper for an openreg graph
    is created (GraphLowering.init_wrapper_code, just before the Scheduler is
    built and fuses nodes) until the wrapper code has been generated
    (``generate``): scheduling and kernel code generation see the values,
    graphs of other devices do not. A compile that fails in between leaves
    them applied on this thread until the next openreg graph is generated."""
    exit_scheduling_config()
    stack = contextlib.ExitStack()
    values = openreg_config.get_config_copy()
    values.pop("backend_source_hash")  # a cache-key entry, not an Inductor setting
    stack.enter_context(inductor_config.patch(values))
    _scope.stack = stack


def exit_scheduling_config() -> None:
    stack = getattr(_scope, "stack", None)
    if stack is not None:
        _scope.stack = None
        stack.close()
# [docs:config-scope:end]


# [docs:python-wrapper]
class _OpenRegPythonMixin:
    def write_header(self) -> None:
        super().write_header()
        # The kernel factory used by every kernel definition (scheduling.py).
        self.imports.writeline(
            "from torch_openreg.inductor.runtime import compile_kernel as openreg_compile"
        )

    def _generate_kernel_call_helper(self, kernel_name: str, call_args, *, device=None,
                                     triton=True, **kwargs: Any) -> None:
        if device is not None and device.type == "openreg" and not triton:
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device,
                                             triton=triton, **kwargs)

    def codegen_cuda_stream_enter(self, stream_idx: int):
        # Inductor declares the user's streams (stream1 = ...) when it enters a
        # device guard, which it does only for GPU device types by name
        # (utils.device_need_guard); openreg declares them before the first
        # stream switch instead.
        if not getattr(self, "_openreg_streams_declared", False):
            self._openreg_streams_declared = True
            self.declare_user_streams()
        return super().codegen_cuda_stream_enter(stream_idx)

    def declare_user_streams(self) -> None:
        from torch._inductor.stream_constants import DEFAULT_STREAM, STREAM_NAME_TEMPLATE
        from torch._inductor.virtualized import V

        import_line = ("from torch._dynamo.graph_bytecode_inputs import "
                       "get_external_object_by_index")
        if not self.imports.contains(import_line):
            self.imports.writeline(import_line)
        self.writeline(f"{DEFAULT_STREAM} = torch.openreg.current_stream()")
        for idx, obj in sorted(V.graph.scheduler.stream_idx_to_user_obj_idx.items()):
            if idx:
                self.writeline(f"{STREAM_NAME_TEMPLATE.format(stream_idx=idx)} = "
                               f"get_external_object_by_index({obj})")

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None,
                        is_pinned=False):
        if device.type != "openreg":
            return super().make_allocation(name, device, dtype, shape, stride,
                                           allocation_shape, is_pinned)
        if allocation_shape is None:
            allocation_shape = shape
        size = self.codegen_python_shape_tuple(shape)
        alloc_size = self.codegen_python_shape_tuple(allocation_shape)
        strides = self.codegen_python_shape_tuple(stride)
        index = device.index if device.index is not None else 0
        out = (f"{name} = empty_strided({alloc_size}, {strides}, "
               f"device='openreg:{index}', dtype={dtype})")
        if size != alloc_size:
            out += f".as_strided({size}, {strides})"
        return out
# [docs:python-wrapper:end]


class OpenRegPythonWrapperCodegen(_OpenRegPythonMixin, PythonWrapperCodegen):
    def generate(self, is_inference):
        try:
            return super().generate(is_inference)
        finally:
            exit_scheduling_config()

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            assert subgraph_name is not None and parent_wrapper is not None
            return OpenRegSubgraphWrapperCodegen(subgraph_name, parent_wrapper,
                                                 partition_signatures)
        enter_scheduling_config()
        return OpenRegPythonWrapperCodegen()


class OpenRegSubgraphWrapperCodegen(_OpenRegPythonMixin, SubgraphPythonWrapperCodegen):
    def write_header(self) -> None:
        pass  # a subgraph shares its parent's header


from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu  # noqa: E402


class UnsupportedConfigError(RuntimeError):
    """A torch.compile configuration the openreg backend does not support."""


# [docs:cpp-wrapper]
class OpenRegCppWrapperCodegen(CppWrapperCpu):
    """``cpp_wrapper=True`` on openreg: not supported yet. Inductor 2.13's C++
    wrapper maps device types to ATen through a fixed table (cpp_utils.
    DEVICE_TO_ATEN: cpu, cuda, xpu, mps, mtia) and allocates through AOTI shims
    per device type; openreg would need a CppWrapperCpu subclass that emits
    privateuse1 allocations and launches kernels through openreg_inductor.h."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        exit_scheduling_config()
        raise UnsupportedConfigError(
            "torch.compile on openreg: cpp_wrapper=True is not supported; "
            "use the default Python wrapper (cpp_wrapper=False)")
# [docs:cpp-wrapper:end]
