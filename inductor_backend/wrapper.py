"""Wrapper code generation for openreg: the host code that allocates buffers and
launches kernels (Inductor's "wrapper"), in Python and in C++ (cpp_wrapper).

Inductor 2.13's wrappers know cpu/cuda/xpu/mps/mtia by name: ``create()``
returns the base class, kernel calls for other devices raise "device ... nyi",
and the fast allocators exist only for those devices. These subclasses fill in
openreg:

* buffers come from ``torch_openreg._C._empty_strided(size, stride, dtype, N)``:
  the caching allocator called directly (as ``_empty_strided_cuda`` for CUDA
  graphs), on the buffer's own device (Inductor enters no device guard for
  non-GPU device types, so the index is spelled out);
* a kernel call is a call of the kernel object that runtime.compile_kernel
  made: it launches on the current stream of the tensors' device.
"""

from __future__ import annotations

import contextlib
import os
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
    for name in ("stack", "aot_stack"):
        stack = getattr(_scope, name, None)
        if stack is not None:
            setattr(_scope, name, None)
            stack.close()
# [docs:config-scope:end]


def enter_aot_compile_config() -> None:
    """After an AOTInductor model's code is generated, AotCodeCompiler
    precompiles the header ``torch/csrc/inductor/aoti_include/<device>.h``,
    which exists only for in-tree devices: openreg's model is compiled without
    precompiled headers. Inductor has no hook that runs after that compile,
    so the setting stays on this thread until the next openreg graph
    (enter_scheduling_config) or exit_scheduling_config; it changes no
    result, only how long a later AOT compile takes (docs/pytorch-gaps.md)."""
    stack = contextlib.ExitStack()
    stack.enter_context(inductor_config.patch({"aot_inductor.precompile_headers": False}))
    _scope.aot_stack = stack


# [docs:python-wrapper]
class _OpenRegPythonMixin:
    def write_header(self) -> None:
        super().write_header()
        # The kernel factory used by every kernel definition (scheduling.py).
        self.imports.writeline(
            "from torch_openreg.inductor.runtime import compile_kernel as openreg_compile"
        )
        # Buffers: the allocator called directly, as _empty_strided_cuda for
        # CUDA graphs (openreg_python/csrc/Module.cpp, [docs:fast-empty-strided]).
        self.imports.writeline("from torch_openreg._C import _empty_strided as empty_strided_openreg")

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
        out = f"{name} = empty_strided_openreg({alloc_size}, {strides}, {dtype}, {index})"
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


def _native_paths() -> tuple[str, str]:
    """(include folder, library folder) of the installed backend: the headers
    the C++ wrapper includes and the libraries it links (CMakeLists.txt)."""
    import torch_openreg

    here = os.path.dirname(os.path.abspath(__file__))
    return (os.path.join(here, "include"),
            os.path.join(os.path.dirname(os.path.abspath(torch_openreg.__file__)), "lib"))


# [docs:cpp-wrapper]
class OpenRegCppWrapperCodegen(CppWrapperCpu):
    """``cpp_wrapper=True`` on openreg: Inductor's C++ (CPU) wrapper with the
    three things it knows only for in-tree devices filled in:

    * devices: ``at::kPrivateUse1`` (cpp_utils.DEVICE_TO_ATEN has no entry
      for openreg), so buffers come from ``aoti_torch_empty_strided`` on
      ``aoti_torch_device_type_privateuse1()``: openreg's caching allocator;
    * operators without a lowering: ``aoti_torch_openreg_<op>`` from
      openreg's C shim (tools/gen_c_shim.py; torch ships shims only for
      cpu/cuda/xpu/mps, calling their kernels directly);
    * kernel calls: each launch goes through openreg_cpp_wrapper.h
      (kernel-view addresses, orInductorLaunch on the current stream)
      instead of a direct call of the kernel function.
    """

    def __init__(self):
        self.device = "openreg"  # read by CppWrapperCpu.__init__
        super().__init__()
        # Kernels are Inductor's CPU C++ kernels (scheduling.py): they need
        # the CPU's vector ISA flags; CppWrapperCpu sets this for "cpu" only.
        self.needs_vec_isa = True
        include_dir, lib_dir = _native_paths()
        # Linked into the wrapper library (Inductor passes these to the
        # linker), found again at load time through the rpath.
        for flag in (f"-I{include_dir}",
                     os.path.join(lib_dir, "libopenreg_inductor.so"),
                     os.path.join(lib_dir, "libopenreg_aoti_shim.so"),
                     f"-Wl,-rpath,{lib_dir}"):
            self.external_kernel_libs.add(flag)

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        from torch._inductor.virtualized import V

        if not is_subgraph:
            enter_scheduling_config()
        # Subgraphs get a wrapper of their own, as in CppWrapperCpu.create.
        wrapper = OpenRegCppWrapperCodegen()
        wrapper._openreg_owns_config = not is_subgraph
        return wrapper

    def generate(self, is_inference):
        from torch._inductor.virtualized import V

        try:
            return super().generate(is_inference)
        finally:
            if getattr(self, "_openreg_owns_config", True):
                exit_scheduling_config()
                if V.graph.aot_mode:
                    enter_aot_compile_config()

    def _aot_include(self, header: str) -> str:
        # AOTInductor compiles the model with torch's include paths only
        # (cpp_builder.get_cpp_torch_device_options has no PrivateUse1 hook),
        # so openreg's headers are included by absolute path; they are needed
        # to compile the package, not to load it.
        return f'#include "{os.path.join(_native_paths()[0], header)}"'

    def add_device_include(self, device: str) -> None:
        if device != "openreg":
            return super().add_device_include(device)
        if device in self.included_devices:
            return
        # The CPU wrapper's header (the common runtime, precompiled by
        # Inductor), then openreg's launch helpers and C shim.
        super().add_device_include("cpu")
        self.included_devices.add(device)
        from torch._inductor.virtualized import V

        if V.graph.aot_mode:
            self.header.splice(self._aot_include("openreg_cpp_wrapper.h"))
            self.header.splice(self._aot_include("openreg_aoti_model.h"))
        else:
            self.header.splice("#include <openreg_cpp_wrapper.h>")

    def codegen_device(self, device):
        if device.type != "openreg":
            return super().codegen_device(device)
        self.used_cached_devices.add("privateuse1")  # aoti_torch_device_type_privateuse1()
        return f"cached_torch_device_type_privateuse1, {self._device_index(device)}"

    @staticmethod
    def _device_index(device) -> str:
        """The device index in generated code: the compile-time index for
        torch.compile, the model's device (chosen when the package is loaded,
        aoti_load_package(..., device_index=N)) for AOTInductor, as Inductor
        does for CUDA (CppWrapperCpu.codegen_device_idx)."""
        from torch._inductor.virtualized import V

        index = device.index if device.index is not None else 0
        if V.graph.aot_mode:
            primary = next(iter(V.graph.device_idxs), None)
            if primary is None or index == primary:
                return "this->device_idx_"
        return str(index)

    # [docs:aoti-constructor]
    def codegen_model_constructor(self):
        """AOTInductor's model constructor, with the two fixes of
        openreg_aoti_model.h: the base class is given "cpu" (it accepts only
        in-tree device names) and the model then moved to openreg, and the
        embedded weights are loaded into openreg memory by openreg_aoti's
        loader instead of the base class's host-memory one."""
        super().codegen_model_constructor()
        lines = self.prefix._lines
        init = next(i for i, line in enumerate(lines)
                    if isinstance(line, str) and "AOTInductorModelBase(" in line)
        for i in range(init, len(lines)):
            if isinstance(lines[i], str) and lines[i].strip() == "device_str,":
                lines[i] = lines[i].replace("device_str,", '"cpu",')
                break
        else:
            raise RuntimeError("openreg: AOTInductor model constructor not recognised")
        assert lines[-1].strip() == "}", lines[-1]
        closing = lines.pop()
        with self.prefix.indent():
            self.prefix.splice("""
                openreg_aoti::set_device(device_str, device_type_, device_idx_);
                if (include_weights) {
                    openreg_aoti::load_constants(*this, device_idx_, *constants_map_, constant_blob_,
                                                 aux_cpu_constant_blob_, _get_constants_start());
                    update_constants_array_from_map();
                    include_weights = false;  // loaded: the base class's loader must not run
                }
            """)
        lines.append(closing)
    # [docs:aoti-constructor:end]

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None,
                                     triton=True, arg_types=None, **kwargs):
        if device is None or device.type != "openreg" or triton:
            return super()._generate_kernel_call_helper(
                kernel_name, call_args, device=device, triton=triton,
                arg_types=arg_types, **kwargs)
        index = self._device_index(device)
        self.writeline("{")
        self.writeline(f"    const intptr_t view = orInductorKernelViewOffset({index});")
        # The arguments are evaluated here and the body holds them by value:
        # a launch on a capturing stream is replayed after this scope ends.
        names = []
        for i, (arg, arg_type) in enumerate(zip(call_args, arg_types)):
            if isinstance(arg_type, str) and "*" in arg_type:
                value = f"({arg_type})(openreg_inductor::kernel_ptr({arg}, view))"
            else:
                value = str(arg)
            self.writeline(f"    const auto a{i} = {value};")
            names.append(f"a{i}")
        self.writeline(f'    static const char* const name = orInductorInternName("{kernel_name}");')
        self.writeline(f"    const auto body = [=] {{ {kernel_name}({', '.join(names)}); }};")
        self.writeline(f"    openreg_inductor::launch({index}, name, body);")
        self.writeline("}")

    def _generate_end_jit(self, result):
        # The wrapper library is host code, built like the CPU's: Inductor has
        # compile options and a precompiled header (cpp_wrapper/<device>.h)
        # only for in-tree device names, and the kernels it contains are CPU
        # C++ kernels (-O3, vector ISA). openreg's own flags are in
        # external_kernel_libs (above).
        self.device = "cpu"
        try:
            return super()._generate_end_jit(result)
        finally:
            self.device = "openreg"
# [docs:cpp-wrapper:end]
