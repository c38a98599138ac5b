"""Kernel code generation for openreg: Inductor's C++ (CPU) generator, reused.

The simulated device's memory is host memory, reachable by host code at the
kernel view, so the kernels Inductor writes for the CPU are correct openreg
kernels as long as they run (a) on kernel-view addresses and (b) as device
work on the current stream. Both are the launcher's job (runtime.py,
csrc/Launcher.cpp); this class changes only how a kernel is *defined* in the
Python wrapper: through ``openreg_compile`` (runtime.compile_kernel) instead
of ``async_compile.cpp_pybinding``, whose module reads tensors' device
addresses directly.

Vendor: this is where your kernel generator plugs in (Triton, or your own
C++/assembly scheduling); it decides what the generated kernels look like.
"""

from __future__ import annotations

from torch._inductor import config
from torch._inductor.codegen.common import IndentedBuffer
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.utils import Placeholder, get_fused_kernel_name
from torch._inductor.virtualized import V


# [docs:scheduling]
class OpenRegScheduling(CppScheduling):
    def define_kernel(self, src_code, nodes, kernel_args=None):
        if V.graph.cpp_wrapper:
            # The C++ wrapper compiles kernels into its own library and
            # launches them itself (wrapper.OpenRegCppWrapperCodegen).
            return super().define_kernel(src_code, nodes, kernel_args)
        wrapper = V.graph.wrapper_code
        if src_code in wrapper.src_to_kernel:
            return wrapper.src_to_kernel[src_code]
        fused_name = (
            get_fused_kernel_name(nodes, config.cpp.descriptive_names)
            if config.cpp.descriptive_names
            else ""
        )
        kernel_name = "_".join(["cpp", fused_name, wrapper.next_kernel_suffix()])
        wrapper.src_to_kernel[src_code] = kernel_name
        code = src_code.replace(str(Placeholder.KERNEL_NAME), "kernel")
        code = code.replace(str(Placeholder.DESCRIPTIVE_NAME), kernel_name)
        code = code.replace("#pragma CMT", "//")
        args = self.kernel_group.args if kernel_args is None else kernel_args
        _, _, arg_types = args.cpp_argdefs()
        body = IndentedBuffer()
        body.writeline(f"openreg_compile(async_compile, {kernel_name!r}, {arg_types!r}, r'''")
        body.splice(code, strip=True)
        body.writeline("''')")
        wrapper.define_kernel(kernel_name, body.getvalue(), gpu=False)
        return kernel_name
# [docs:scheduling:end]
