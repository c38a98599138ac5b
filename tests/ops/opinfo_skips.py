"""What the OpInfo sweep (test_opinfo.py) does not check, and why.

Keys: ``(op name, variant)`` for every group of an OpInfo entry, or
``(op name, variant, group)`` for one group, where ``variant`` is the OpInfo's
``variant_test_name`` ("" for the default one) and ``group`` is the dtype of a
forward group ("float32", "int64"/"int32", "bfloat16"/"float16") or
"backward" (float32 gradients).

Reasons start with:

* ``BUG:`` a genuine openreg defect (result differs from the CPU, wrong
  device, crash...). Fix the C++, then delete the entry: the sweep must pass.
* ``BUG (crash):`` the same, but the process dies.
* ``BY DESIGN:`` a documented openreg limitation (e.g. only strided tensors).
* ``NOT OPENREG:`` PyTorch itself behaves differently per device type, so a
  difference from the CPU is not an openreg defect.
"""

# Groups that are not run at all.
SKIPS = {
    # -- BY DESIGN: openreg supports strided tensors only (Fallback.cpp raises
    #    NotImplementedError for sparse/quantized openreg tensors). ----------
    ("to_sparse", ""): "BY DESIGN: returns a sparse COO tensor; openreg supports only strided tensors",
    ("sparse.sampled_addmm", ""): "BY DESIGN: takes a sparse CSR input; openreg supports only strided tensors",
    ("sparse.mm", "reduce"): "BY DESIGN: takes a sparse CSR input; openreg supports only strided tensors",
}

# -- BUG: operators that have both a CPU kernel and a CompositeExplicitAutograd
#    kernel (aten::addr, addr.out, native_layer_norm, native_group_norm, ...).
#    The dispatcher prefers a CompositeExplicitAutograd kernel to a backend
#    *fallback*, so on openreg they run the math decomposition instead of the
#    CPU kernel (register_structured_kernels() only reroutes
#    CompositeExplicitAutogradNonFunctional ones). Results then differ beyond
#    bfloat16 tolerance, dtypes differ, and addr_ accepts inputs the CPU rejects.
SKIPS.update({
    ("addr", "", "float32"): "BUG: addr_ on a 0-d self resizes it instead of raising '2D tensor expected' "
                             "(addr.out runs math_addr_out, not the CPU kernel)",
    ("addr", "", "bfloat16"): "BUG: addr runs the CompositeExplicitAutograd math kernel, not the CPU kernel: "
                              "bfloat16 results differ from the CPU by up to 0.06",
    ("native_layer_norm", "", "bfloat16"): "BUG: native_layer_norm runs the CompositeExplicitAutograd math kernel, "
                                           "not the CPU kernel: bfloat16 output differs, and for an empty input "
                                           "mean/rstd are float32 instead of bfloat16",
    ("nn.functional.layer_norm", "", "bfloat16"): "BUG: native_layer_norm runs the CompositeExplicitAutograd math "
                                                  "kernel, not the CPU kernel: bfloat16 output differs",
    ("native_group_norm", "", "float32"): "BUG: native_group_norm runs the CompositeExplicitAutograd math kernel, "
                                          "not the CPU kernel: a non-contiguous input is accepted where the CPU "
                                          "raises 'Expected X.is_contiguous(memory_format)'",
    ("native_group_norm", "", "bfloat16"): "BUG: native_group_norm runs the CompositeExplicitAutograd math kernel, "
                                           "not the CPU kernel: bfloat16 output differs by up to 0.09",
    ("nn.functional.group_norm", "", "bfloat16"): "BUG: native_group_norm runs the CompositeExplicitAutograd math "
                                                  "kernel, not the CPU kernel: bfloat16 output differs by up to 0.09",
})

# -- BUG: out= overloads that have only a CompositeExplicitAutograd kernel which
#    checks the device type itself (no CPU kernel, so the fallback never
#    sees them and the composite runs on openreg tensors).
SKIPS.update({
    ("mode", "", "float32"): "BUG: torch.mode(x, dim, out=(values, indices)) raises 'mode only supports CPU, "
                             "CUDA and XPU device type, got: openreg' (aten::mode.values is composite-only)",
})

# -- BUG: scaled_dot_product_attention picks its backend by device type; for
#    PrivateUse1 (no _fused_sdp_choice kernel of its own, no
#    _scaled_dot_product_fused_attention_overrideable) it takes the math path,
#    which upcasts and uses bmm + softmax, instead of the CPU's
#    _scaled_dot_product_flash_attention_for_cpu.
SKIPS.update({
    ("nn.functional.scaled_dot_product_attention", "", "bfloat16"):
        "BUG: SDPA takes the math path on openreg instead of the CPU flash kernel: bfloat16 results differ",
})

# -- NOT OPENREG: PyTorch code that chooses by device type. ------------------
SKIPS.update({
    ("nn.functional.linear_cross_entropy", "chunked", "bfloat16"):
        "NOT OPENREG: LinearCrossEntropyOptions(acc_policy='auto') resolves per device type "
        "(_AUTO_DEFAULTS has 'cpu' and 'cuda' only): openreg gets the 'compact' bf16 accumulation, "
        "the CPU 'accurate' fp32 accumulation",
    ("nn.functional.linear_cross_entropy", "chunked_none", "bfloat16"):
        "NOT OPENREG: LinearCrossEntropyOptions(acc_policy='auto') resolves per device type "
        "(_AUTO_DEFAULTS has 'cpu' and 'cuda' only): openreg gets the 'compact' bf16 accumulation, "
        "the CPU 'accurate' fp32 accumulation",
})

# Groups whose output *values* are not compared (device, dtype, shape,
# strides, aliasing and the arguments afterwards still are): the values are
# not defined.
VALUES_UNCHECKED = {
    ("empty", ""): "uninitialised memory: torch.empty's values are arbitrary",
    ("empty_like", ""): "uninitialised memory: torch.empty_like's values are arbitrary",
    ("empty_permuted", ""): "uninitialised memory: torch.empty_permuted's values are arbitrary",
    ("empty_strided", ""): "uninitialised memory: torch.empty_strided's values are arbitrary",
    ("new_empty", ""): "uninitialised memory: Tensor.new_empty's values are arbitrary",
    ("new_empty_strided", ""): "uninitialised memory: Tensor.new_empty_strided's values are arbitrary",
}
