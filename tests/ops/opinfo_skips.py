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
* ``NOT THE BACKEND:`` PyTorch itself behaves differently per device type, so
  a difference from the CPU is not a defect of openreg (or of the backend
  under test).
* ``DIFFERENT ROUNDING:`` the same computation with a different accumulation
  order, beyond the op's low-precision tolerance.

``RANDOM`` (after VALUES_UNCHECKED) lists the operators whose values come
from the generator: compared with the CPU in everything but the values, and
checked for reproducibility from the same seed instead; RANDOM_SAMPLES does
the same for the samples of an operator that a predicate selects.

``SAMPLE_SKIPS`` (at the end) skips individual samples by predicate. There is
no BUG entry today: the sweep's first run found four (empty results on
openreg:1 on the wrong device, composite kernels preferred to the CPU's,
mode(out=), addr_ on a 0-d self) and they were fixed.

The reasons name the device under test through ``tests.target.DEVICE``; the
table itself is openreg's (another backend's sweep may need other entries).
"""

from tests.target import DEVICE, MEMCHECK

# Groups that are not run at all.
SKIPS: dict = {}




# -- NOT THE BACKEND: PyTorch code that chooses by device type. --------------
SKIPS.update({
    ("nn.functional.linear_cross_entropy", "chunked", "bfloat16"):
        "NOT THE BACKEND: LinearCrossEntropyOptions(acc_policy='auto') resolves per device type "
        f"(_AUTO_DEFAULTS has 'cpu' and 'cuda' only): {DEVICE} gets the 'compact' bf16 accumulation, "
        "the CPU 'accurate' fp32 accumulation",
    ("nn.functional.linear_cross_entropy", "chunked_none", "bfloat16"):
        "NOT THE BACKEND: LinearCrossEntropyOptions(acc_policy='auto') resolves per device type "
        f"(_AUTO_DEFAULTS has 'cpu' and 'cuda' only): {DEVICE} gets the 'compact' bf16 accumulation, "
        "the CPU 'accurate' fp32 accumulation",
})


# -- DIFFERENT ROUNDING in memcheck mode (docs/memcheck.md): an allocation
#    ends at a guard page, so its start is aligned to its size's largest
#    power of two instead of 512 bytes, and LAPACK's svd takes another
#    vector path: its gradients differ from the CPU's in the last bits
#    (1.3e-5 against a tolerance of 1e-5). Not a memory error. ---------------
if MEMCHECK:
    for _op in ("svd", "linalg.svd"):
        for _group in ("backward", "device1"):
            SKIPS[(_op, "", _group)] = (
                "DIFFERENT ROUNDING: memcheck's placement changes the alignment LAPACK sees "
                "(docs/memcheck.md)")


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




# Operators whose values come from the generator. openreg's is CUDA's Philox
# (counter-based, a (seed, offset) state), the CPU's a Mersenne Twister, so
# equal seeds give different numbers by design. The sweep compares everything
# else with the CPU and checks that a second call from the same seed gives
# the same values; tests/ops/test_rng.py checks the distributions.
_PHILOX = f"RANDOM: draws from the {DEVICE} generator, not the CPU's Mersenne Twister"
RANDOM = {
    (name, variant): f"{_PHILOX} ({reason})"
    for name, variant, reason in [
        ("bernoulli", "", "a bernoulli draw per element"),
        ("cauchy", "", "Tensor.cauchy_"),
        ("exponential", "", "Tensor.exponential_"),
        ("geometric", "", "Tensor.geometric_"),
        ("log_normal", "", "Tensor.log_normal_"),
        ("multinomial", "", "exponential keys (no replacement) or uniform draws"),
        ("normal", "", "torch.normal with tensor mean/std"),
        ("normal", "in_place", "Tensor.normal_"),
        ("normal", "number_mean", "torch.normal with a number mean"),
        ("uniform", "", "Tensor.uniform_"),
        ("rand_like", "", "uniform draws"),
        ("randn_like", "", "normal draws"),
        ("randint_like", "", "random_ with a range"),
        ("randint", "", "random_ with a range"),
        ("randn", "", "normal draws"),
        ("nn.functional.rrelu", "", "a uniform slope per element (CPU kernel, engine seeded from the stream)"),
        ("nn.functional.dropout", "", "a bernoulli mask"),
        ("nn.functional.dropout2d", "", "a bernoulli mask per channel"),
        ("nn.functional.dropout3d", "", "a bernoulli mask per channel"),
        ("nn.functional.alpha_dropout", "", "a bernoulli mask"),
        ("nn.functional.feature_alpha_dropout", "with_train", "a bernoulli mask per channel"),
        ("nn.functional.fractional_max_pool2d", "", "its pooling regions come from torch.rand"),
        ("nn.functional.fractional_max_pool3d", "", "its pooling regions come from torch.rand"),
    ]
}

# The same for the samples a predicate selects, where only some samples of
# an operator draw random numbers: (op name, variant[, group]) ->
# (predicate(sample) -> bool, reason).
RANDOM_SAMPLES = {
    ("nn.functional.multi_head_attention_forward", ""): (
        lambda sample: bool(sample.kwargs.get("training")) and sample.args[9] > 0,
        f"{_PHILOX} (attention dropout while training)",
    ),
    ("svd_lowrank", ""): (
        lambda sample: sample.kwargs.get("M") is not None,
        f"{_PHILOX} (the random projection: with M the input is not of rank q, "
        "so the result depends on the random matrix)",
    ),
}


# Individual samples, by predicate: (op name, variant[, group]) ->
# (predicate(sample) -> bool, reason). Used where most samples of a group are
# comparable and a few are not.
SAMPLE_SKIPS = {
    # openreg's fused SDPA kernel draws its dropout mask from its Philox
    # generator at the call's (philox_seed, philox_offset) (and the backward
    # regenerates it from them), as fused kernels on CUDA do.
    ("nn.functional.scaled_dot_product_attention", ""): (
        lambda sample: bool(sample.kwargs.get("dropout_p", 0.0)),
        f"BY DESIGN: with dropout_p > 0 the {DEVICE} kernel draws its dropout "
        f"mask from the {DEVICE} generator; the CPU "
        "math path draws from the CPU's Mersenne Twister, so equal seeds cannot give equal "
        "masks. Reproducibility, the dropped fraction and gradients are tested in "
        "tests/ops/test_sdpa.py",
    ),
}


# -- Output strides and shapes against the meta function ---------------------
# The sweep compares every forward result's sizes and strides with what the
# op's meta function promises (FakeTensor: what torch.compile plans with).
# Where the device's kernel answers otherwise, the op is listed here, and the
# sweep records the difference instead of failing the sample; the summary
# prints each entry's example, and an entry whose op no longer differs fails
# the summary (delete it). The ops whose CPU kernels differed are laid out as
# promised by the openreg kernels (openreg_python/csrc/aten/layout/MetaLayout.cpp's
# kPromisedLayout); an op the sweep flags belongs there, or here with a reason
# while it is open work:
#   STRIDE_DIFFERENCES = {"op name": "BUG: why its result differs"}
STRIDE_DIFFERENCES: dict = {}

# Variants of the sweep ("channels_last", "transposed") that an op's CPU kernel
# does not take: the CPU result is not an oracle there.
_LAST_DIM = ("NOT THE BACKEND: the CPU's flash kernel reads q, k and v as if their last "
             "dimension were contiguous (scaled_dot_product_attention picks it only then); "
             "on these copies the CPU itself gives varying, wrong values")
LAYOUT_SKIPS = {
    ("torch.ops.aten._scaled_dot_product_flash_attention_for_cpu", "channels_last"): _LAST_DIM,
    ("torch.ops.aten._scaled_dot_product_flash_attention_for_cpu", "transposed"): _LAST_DIM,
}
