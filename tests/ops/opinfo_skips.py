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
* ``DIFFERENT ROUNDING:`` the same computation with a different accumulation
  order, beyond the op's low-precision tolerance.

``SAMPLE_SKIPS`` (at the end) skips individual samples by predicate. There is
no BUG entry today: the sweep's first run found four (empty results on
openreg:1 on the wrong device, composite kernels preferred to the CPU's,
mode(out=), addr_ on a 0-d self) and they were fixed.
"""

# Groups that are not run at all.
SKIPS = {
    # -- BY DESIGN: openreg supports strided tensors only (Fallback.cpp raises
    #    NotImplementedError for sparse/quantized openreg tensors). ----------
    ("to_sparse", ""): "BY DESIGN: returns a sparse COO tensor; openreg supports only strided tensors",
    ("sparse.sampled_addmm", ""): "BY DESIGN: takes a sparse CSR input; openreg supports only strided tensors",
    ("sparse.mm", "reduce"): "BY DESIGN: takes a sparse CSR input; openreg supports only strided tensors",
}




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




# Individual samples, by predicate: (op name, variant[, group]) ->
# (predicate(sample) -> bool, reason). Used where most samples of a group are
# comparable and a few are not.
SAMPLE_SKIPS = {
    ("nn.functional.scaled_dot_product_attention", ""): (
        lambda sample: bool(sample.kwargs.get("dropout_p", 0.0)),
        "BY DESIGN: with dropout_p > 0 openreg's fused SDPA kernel draws its dropout "
        "mask from one seed per call taken from the openreg generator (and the backward "
        "regenerates it from that seed), as fused kernels on CUDA do; the CPU math path "
        "draws a bernoulli per element, so equal seeds cannot give equal masks. "
        "Reproducibility, the dropped fraction and gradients are tested in tests/ops/test_sdpa.py",
    ),
}
