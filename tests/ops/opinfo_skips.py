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

# -- BUG: zero-element results on openreg:1 land on openreg:0. ---------------
#    A CPU kernel's 0-byte allocation is a null kernel-view DataPtr, and
#    rehomeKernelViewDataPtr() (OpenRegAllocator.cpp) gives a null block
#    c10::Device(PrivateUse1, current_device()) instead of the kernel's device,
#    so with openreg:0 current every empty result of an op on openreg:1 (and
#    every empty intermediate: batch_norm's save_mean in eval mode, an empty
#    grad in backward...) is an openreg:0 tensor. Later ops then raise
#    "Expected all tensors to be on the same device". One entry per op, with
#    the first failing sample.
_ZERO_NUMEL = "BUG: an empty result of a fallback kernel on openreg:1 is put on the current device openreg:0:"
SKIPS.update({
    ('acos', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('acosh', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('add', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('clamp_max', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('clamp_min', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('mul', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('sub', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('atan2', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('combinations', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1,):float32, r=2, with_replacement=False',
    ('cdist', '', "device1"): _ZERO_NUMEL + " out on openreg:0; sample T(0, 5):float32, T(4, 5):float32, 0.0, 'use_mm_for_euclid...",
    ('cholesky', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, upper=True',
    ('cholesky_inverse', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32',
    ('cholesky_solve', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, T(0, 0):float32',
    ('conj', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(1, 0, 3):float32',
    ('complex', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('copysign', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('cos', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('cosh', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('cumprod', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0,):float32, 0',
    ('diff', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(3, 3, 3):float32, 6, 1',
    ('div', 'no_rounding_mode', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('div', 'trunc_rounding', "device1"): _ZERO_NUMEL + " out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32, rounding_mode='t...",
    ('div', 'floor_rounding', "device1"): _ZERO_NUMEL + " out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32, rounding_mode='f...",
    ('true_divide', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('exp', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('eq', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('fmax', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('fmin', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('fmod', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('remainder', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('flip', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 10):float32, dims=(0, 1, 2)',
    ('fliplr', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 10):float32',
    ('flipud', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 10):float32',
    ('floor_divide', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('frexp', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(1, 0, 3):float32',
    ('ge', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('geqrf', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(5, 0):float32',
    ('gt', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('le', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('log', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('log10', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('log2', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('ldexp', '', "device1"): _ZERO_NUMEL + ' forward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('logaddexp', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('lt', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('lu_unpack', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 3, 5):float32, T(0, 3):int32',
    ('lu_solve', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(3, 0):float32, T(3, 3):float32 stride=(1, 3), T(3,):int32',
    ('matmul', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, T(5, 0, 0):float32',
    ('max', 'binary', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('maximum', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('min', 'binary', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('minimum', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('heaviside', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('isclose', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('softmax', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1',
    ('softmax', 'with_dtype', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1, dtype=torch.float64',
    ('nn.functional.softmin', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1',
    ('nn.functional.softmin', 'with_dtype', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1, dtype=torch.float64',
    ('aminmax', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(5, 0, 5):float32, dim=0',
    ('native_group_norm', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 2):float32, T(2,):float32, T(2,):float32, 0, 2, 1, 1...',
    ('native_layer_norm', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 1):float32, (1), T(1,):float32, T(1,):float32, 1e-05',
    ('native_batch_norm', '', "device1"): _ZERO_NUMEL + ' out[1] on openreg:0; sample T(3, 2, 4):float32, T(2,):float32, T(2,):float32, T(2,):f...',
    ('_native_batch_norm_legit', '', "device1"): _ZERO_NUMEL + ' out[1] on openreg:0; sample T(3, 2, 4):float32, T(2,):float32, T(2,):float32, T(2,):f...',
    ('_batch_norm_with_update', '', "device1"): _ZERO_NUMEL + ' out[3] on openreg:0; sample T(5, 5, 5):float32, T(5,):float32, T(5,):float32, T(5,):f...',
    ('nn.functional.adaptive_avg_pool1d', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 8, 8):float32, (5)',
    ('nn.functional.adaptive_avg_pool3d', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 8, 8, 8, 8):float32, (5, 7, 4)',
    ('nn.functional.avg_pool1d', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 3, 9):float32, (6), stride=(3), padding=(2), ceil_mo...',
    ('nn.functional.avg_pool3d', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 4, 5, 4):float32, (2, 3, 1), stride=(2, 1, 2), pa...',
    ('nn.functional.group_norm', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 2):float32, 1, weight=T(2,):float32, bias=T(2,):floa...',
    ('nn.functional.layer_norm', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 1):float32, (1), T(1,):float32, T(1,):float32',
    ('nn.functional.rms_norm', '', "device1"): _ZERO_NUMEL + ' forward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 1):float32, (1), T(1,):float32',
    ('nn.functional.local_response_norm', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 1, 2):float32, 1, alpha=3e-05, beta=0.5, k=1.25',
    ('constant_pad_nd', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(5, 3):float32, (-1, -2, 1, 1), 1.0',
    ('nn.functional.pad', 'constant', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(5, 3):float32, (-1, -2, 1, 1), \'constant\', 1.0',
    ('nn.functional.pad', 'reflect', "device1"): _ZERO_NUMEL + " out on openreg:0; sample T(0, 3, 3):float32, (1, 2), 'reflect'",
    ('nn.functional.pad', 'replicate', "device1"): _ZERO_NUMEL + " out on openreg:0; sample T(0, 3, 3):float32, (1, 2), 'replicate'",
    ('nn.functional.pad', 'circular', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 3, 3):float32, (1, 2), \'circular\'',
    ('nn.functional.unfold', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 5, 5):float32, 2, 1, 0, 1',
    ('nn.functional.fractional_max_pool3d', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 4, 5, 4):float32, (2, 2, 1), output_size=2, retur...',
    ('nn.functional.linear', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 3):float32, T(4, 3):float32, T(4,):float32',
    ('nn.functional.bilinear', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 3):float32, T(0, 4):float32, T(5, 3, 4):float32, T(5...',
    ('nn.functional.glu', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 2):float32, 1',
    ('nn.functional.elu', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.prelu', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32, weight=T():float32',
    ('nn.functional.celu', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.rrelu', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32, lower=0.0, upper=1.0, training=True',
    ('nn.functional.selu', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.silu', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.hardsigmoid', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.logsigmoid', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.mish', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.softsign', '', "device1"): _ZERO_NUMEL + ' forward raises "found at least two devices, openreg:0 and openreg:1"; sample T(1, 0, 3):float32',
    ('nn.functional.tanhshrink', '', "device1"): _ZERO_NUMEL + ' forward raises "found at least two devices, openreg:0 and openreg:1"; sample T(1, 0, 3):float32',
    ('nextafter', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('nn.functional.batch_norm', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(3, 2, 4):float32, T(2,):float32, T(2,):float32, T(2,):f...',
    ('igamma', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('igammac', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('nn.functional.softshrink', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.hardshrink', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.hardtanh', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nn.functional.relu6', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('mm', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 5):float32, T(5, 10):float32',
    ('ne', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('narrow', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(5, 5, 5):float32, 1, 0, 0',
    ('narrow_copy', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 5, 5):float32, 1, 0, 0',
    ('ormqr', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0):float32, T(0,):float32, T(5, 0):float32, left=Tru...',
    ('pow', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('float_power', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('qr', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(5, 0):float32',
    ('real', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(1, 0, 3):float32',
    ('roll', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0, 0):float32, 0, 0',
    ('round', 'decimals_0', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32, decimals=0',
    ('round', 'decimals_3', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32, decimals=3',
    ('round', 'decimals_neg_3', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32, decimals=-3',
    ('sinc', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('split_with_sizes', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(5, 5, 5):float32, torch.Size([1, 4, 0])',
    ('split_with_sizes_copy', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(5, 5, 5):float32, torch.Size([1, 4, 0])',
    ('__radd__', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('__rdiv__', '', "device1"): _ZERO_NUMEL + ' forward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('__rmul__', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('__rmatmul__', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, T(0, 0):float32',
    ('__rmod__', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('__rpow__', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('__rsub__', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('rsub', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('triangular_solve', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 5, 1):float32, T(0, 5, 5):float32',
    ('exp2', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('nan_to_num', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(1, 0, 3):float32',
    ('reciprocal', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('rsqrt', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('square', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('isfinite', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('svd', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, some=True',
    ('polar', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('unflatten', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(4, 0):float32, 0, (2, 2)',
    ('pinverse', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32',
    ('gather', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5,):float32, 0, T(0,):uint8',
    ('sort', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0,):float32',
    ('unique', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 5):float32, sorted=False, return_inverse=False, r...',
    ('unique_consecutive', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 5):float32, return_inverse=False, return_counts=F...',
    ('put', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0,):float32, T(0,):int64, T(0,):float32, True',
    ('take', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0,):float32, T(0,):int64',
    ('bernoulli', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 3):float32',
    ('stack', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample [T(0, 1, 0):float32, T(0, 1, 0):float32], -1',
    ('hypot', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('bucketize', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 5):float32, T(5,):float32, out_int32=False, right...',
    ('searchsorted', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0,):float32, T(0,):float32, out_int32=False, right=False',
    ('cat', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample [T(0,):float32, T(0,):float32], dim=0',
    ('unbind', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(5, 0, 5):float32, 0',
    ('unbind_copy', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(5, 0, 5):float32, 0',
    ('repeat', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T():float32, (0)',
    ('fill', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(1, 0, 3):float32, value=True',
    ('tile', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0,):float32, ()',
    ('xlogy', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('sigmoid', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('digamma', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('erfc', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('lgamma', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('logdet', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0, 0):float32',
    ('log_softmax', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1',
    ('log_softmax', 'with_dtype', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1, dtype=torch.float64',
    ('nonzero_static', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T():float32, size=0',
    ('nn.functional.embedding_bag', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(10, 5):float32, T(5,):int64, offsets=T(2,):int64, mode=...',
    ('nn.functional.softplus', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32, beta=3, threshold=0.2',
    ('argwhere', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0):float32',
    ('nn.functional.pdist', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 1):float32',
    ('argsort', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0,):float32',
    ('nn.functional.pixel_shuffle', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 1, 1):float32, upscale_factor=1',
    ('nn.functional.pixel_unshuffle', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 1, 1):float32, downscale_factor=1',
    ('linalg.det', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0, 0):float32',
    ('linalg.cholesky', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, upper=True',
    ('linalg.cholesky_ex', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 0):float32, upper=True',
    ('linalg.vecdot', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, T(0, 0):float32',
    ('linalg.eig', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 0):float32',
    ('linalg.eigvals', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32',
    ('linalg.eigh', '', "device1"): _ZERO_NUMEL + " out[0] on openreg:0; sample T(0, 0):float32, UPLO='U'",
    ('linalg.eigvalsh', '', "device1"): _ZERO_NUMEL + " out on openreg:0; sample T(0, 0):float32, UPLO='U'",
    ('linalg.householder_product', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, T(0,):float32',
    ('linalg.ldl_factor', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 0):float32, hermitian=False',
    ('linalg.ldl_factor_ex', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 0):float32, hermitian=False',
    ('linalg.ldl_solve', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, T(0,):int32, T(0, 5):float32, hermitian=...',
    ('linalg.lstsq', '', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(2, 3):float32, T(2, 3):float32, driver=\'gels\'',
    ('linalg.lstsq', 'grad_oriented', "device1"): _ZERO_NUMEL + ' backward raises "found at least two devices, openreg:0 and openreg:1"; sample T(2, 3):float32, T(2, 3):float32, driver=\'gels\'',
    ('linalg.matrix_power', '', "device1"): _ZERO_NUMEL + ' forward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 2, 2):float32, 3',
    ('linalg.multi_dot', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample [T(0, 2):float32, T(2, 2):float32]',
    ('linalg.norm', '', "device1"): _ZERO_NUMEL + " out on openreg:0; sample T(0, 0):float32, 'nuc', keepdim=False",
    ('linalg.norm', 'subgradients_at_zero', "device1"): _ZERO_NUMEL + " out on openreg:0; sample T(0, 0):float32, 'nuc', keepdim=False",
    ('linalg.qr', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(5, 0):float32',
    ('linalg.slogdet', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 0, 0):float32',
    ('linalg.lu_factor', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 3, 5):float32, pivot=True',
    ('linalg.lu_factor_ex', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 3, 5):float32, pivot=True',
    ('linalg.lu', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 3, 5):float32, pivot=True',
    ('linalg.lu_solve', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(3, 3):float32 stride=(1, 3), T(3,):int32, T(3, 0):float...',
    ('linalg.inv', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32',
    ('linalg.inv_ex', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 0):float32',
    ('linalg.solve', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 5, 5):float32, T(0, 5):float32',
    ('linalg.solve_ex', '', "device1"): _ZERO_NUMEL + ' out[0] on openreg:0; sample T(0, 5, 5):float32, T(0, 5):float32',
    ('linalg.solve_triangular', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(3, 3):float32, T(3, 0):float32, upper=True, left=True, ...',
    ('linalg.matrix_rank', '', "device1"): _ZERO_NUMEL + ' forward raises "found at least two devices, openreg:0 and openreg:1"; sample T(0, 5, 5):float32, atol=T(0,):float32, rtol=None',
    ('linalg.pinv', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, rtol=None',
    ('linalg.pinv', 'singular', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 3, 0):float32, T(0, 3, 0):float32',
    ('linalg.pinv', 'hermitian', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, hermitian=True',
    ('linalg.svd', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 0):float32, full_matrices=True',
    ('linalg.svdvals', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0):float32',
    ('special.ndtr', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.xlog1py', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.zeta', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.ndtri', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.log_ndtr', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.erfcx', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.airy_ai', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.bessel_j0', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.bessel_j1', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.bessel_y0', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.bessel_y1', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.chebyshev_polynomial_t', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.chebyshev_polynomial_u', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.chebyshev_polynomial_v', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.chebyshev_polynomial_w', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.hermite_polynomial_h', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.hermite_polynomial_he', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.laguerre_polynomial_l', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.legendre_polynomial_p', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.modified_bessel_i0', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.modified_bessel_i1', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.modified_bessel_k0', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.modified_bessel_k1', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.scaled_modified_bessel_k0', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.scaled_modified_bessel_k1', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('special.shifted_chebyshev_polynomial_t', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.shifted_chebyshev_polynomial_u', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.shifted_chebyshev_polynomial_v', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.shifted_chebyshev_polynomial_w', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(0, 1, 3):float32, T(0, 10, 3):float32',
    ('special.spherical_bessel_j0', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(1, 0, 3):float32',
    ('masked.cumsum', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1, mask=T(5, 0, 0):bool',
    ('masked.cumprod', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1, mask=T(5, 0, 0):bool',
    ('masked.softmax', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1, mask=None',
    ('masked.log_softmax', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1, mask=None',
    ('masked.softmin', '', "device1"): _ZERO_NUMEL + ' out on openreg:0; sample T(5, 0, 0):float32, -1, mask=None',
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
