"""openreg's Philox generator: CUDA's (seed, offset) state, the stream rule of
docs/rng.md (element i of a draw at offset b is stream position b + i), the
split property DTensor relies on, the distributions, reproducibility and the
errors. The CPU is no oracle for the values here (it uses a Mersenne
Twister): a pure-Python Philox4x32-10 is, and the distributions' moments."""

import math
import struct

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import target
from tests.target import DEVICE, HW

MASK32 = 0xFFFFFFFF


# ---------------------------------------------------------------- the oracle
def philox_block(counter, key):
    """Philox4x32-10 (Salmon et al., Random123), one 128-bit block."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK32, p1 & MASK32, \
            ((p0 >> 32) ^ c3 ^ k1) & MASK32, p0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def word(seed, pos, j):
    """Word j of stream position pos (docs/rng.md)."""
    g = pos // 4
    return philox_block((g & MASK32, g >> 32, j & MASK32, j >> 32),
                        (seed & MASK32, seed >> 32))[pos % 4]


def state_of(seed, offset):
    return torch.tensor(list(struct.pack("<Qq", seed, offset)), dtype=torch.uint8)


def set_offset(offset, device=DEVICE):
    seed = target.device_module.initial_seed() if device == DEVICE else torch.Generator(device).initial_seed()
    target.device_module.set_rng_state(state_of(seed, offset), device)


def offset_now(device=DEVICE):
    return struct.unpack("<Qq", bytes(target.device_module.get_rng_state(device).tolist()))[1]


@pytest.mark.ops
@pytest.mark.smoke
class TestState:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only  # openreg's generator state layout
    def test_layout_is_cudas_seed_then_offset(self):
        target.device_module.manual_seed(0x0123456789ABCDEF)
        s = target.device_module.get_rng_state()
        assert s.dtype == torch.uint8 and s.device.type == "cpu" and s.shape == (16,)
        assert bytes(s.tolist()) == struct.pack("<Qq", 0x0123456789ABCDEF, 0)
        assert target.device_module.initial_seed() == 0x0123456789ABCDEF

    @pytest.mark.parametrize("n, used", [(1, 4), (4, 4), (5, 8), (100, 100), (0, 0)])
    @pytest.mark.openreg_only  # openreg's Philox offsets
    def test_a_draw_of_n_elements_advances_the_offset_by_n_rounded_up_to_4(self, n, used):
        target.device_module.manual_seed(1)
        torch.rand(n, device=DEVICE)
        assert offset_now() == used
        torch.randn(n, device=DEVICE, dtype=torch.float64)  # every dtype and distribution alike
        assert offset_now() == 2 * used

    def test_round_trip(self):
        target.device_module.manual_seed(5)
        torch.rand(10, device=DEVICE)
        state = target.device_module.get_rng_state()
        a = torch.rand(50, device=DEVICE).cpu()
        target.device_module.set_rng_state(state)
        assert torch.equal(torch.rand(50, device=DEVICE).cpu(), a)
        states = target.device_module.get_rng_state_all()
        b = [torch.rand(3, device=f"{DEVICE}:{i}").cpu() for i in range(len(states))]
        target.device_module.set_rng_state_all(states)
        assert all(torch.equal(torch.rand(3, device=f"{DEVICE}:{i}").cpu(), x) for i, x in enumerate(b))

    @pytest.mark.openreg_only  # openreg's generator state layout
    def test_an_eight_byte_state_is_a_seed_at_offset_zero(self):
        target.device_module.set_rng_state(torch.tensor(list(struct.pack("<Q", 77)), dtype=torch.uint8))
        assert bytes(target.device_module.get_rng_state().tolist()) == struct.pack("<Qq", 77, 0)

    @pytest.mark.openreg_only  # openreg's state layout and its messages
    def test_bad_states_are_refused_by_type_and_message(self):
        before = target.device_module.get_rng_state()
        with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
            target.device_module.set_rng_state(torch.zeros(16, dtype=torch.int32))
        with pytest.raises(RuntimeError, match="RNG state is wrong size.*16 bytes"):
            target.device_module.set_rng_state(torch.zeros(5056, dtype=torch.uint8))
        with pytest.raises(RuntimeError, match="offset must be a multiple of 4"):
            target.device_module.set_rng_state(state_of(1, 6))
        with pytest.raises(RuntimeError, match="must not be negative"):
            target.device_module.set_rng_state(state_of(1, -4))
        assert torch.equal(target.device_module.get_rng_state(), before)  # nothing half-applied

    @pytest.mark.openreg_only  # openreg's Philox offsets
    def test_generator_api_as_on_cuda(self):
        g = torch.Generator(device=DEVICE)
        assert g.device == torch.device(DEVICE, 0)
        g.manual_seed(42)
        assert g.initial_seed() == 42 and g.get_offset() == 0
        a = torch.rand(6, device=DEVICE, generator=g).cpu()
        assert g.get_offset() == 8
        g.set_offset(0)
        assert torch.equal(torch.rand(6, device=DEVICE, generator=g).cpu(), a)
        with pytest.raises(RuntimeError, match="offset must be a multiple of 4"):
            g.set_offset(3)
        s = g.seed()
        assert g.initial_seed() == s and g.get_offset() == 0
        # A generator of its own does not touch the device's default one.
        before = target.device_module.get_rng_state()
        torch.randn(9, device=DEVICE, generator=g)
        assert torch.equal(target.device_module.get_rng_state(), before)

    @pytest.mark.openreg_only  # openreg's Philox offsets
    def test_graphsafe_state_is_shared_not_copied(self):
        g = torch.Generator(device=DEVICE).manual_seed(3)
        shared = g.graphsafe_get_state()
        torch.rand(10, device=DEVICE, generator=shared)
        assert g.get_offset() == 12  # the draw through `shared` moved g's state
        other = torch.Generator(device=DEVICE).manual_seed(9)
        g.graphsafe_set_state(other)
        assert g.initial_seed() == 9
        torch.rand(4, device=DEVICE, generator=g)
        assert other.get_offset() == 4
        # clone_state copies: the clone moves on its own.
        c = g.clone_state()
        torch.rand(4, device=DEVICE, generator=c)
        assert c.get_offset() == 8 and g.get_offset() == 4

    def test_a_cpu_generator_is_refused_for_openreg_tensors_as_on_cuda(self):
        x = torch.empty(4, device=DEVICE)
        with pytest.raises(RuntimeError, match=f"Expected a '{DEVICE}' device type for generator but found 'cpu'"):
            x.uniform_(generator=torch.Generator())
        with pytest.raises(RuntimeError, match=f"Expected a '{DEVICE}' device type for generator but found 'cpu'"):
            torch.poisson(torch.ones(3, device=DEVICE), generator=torch.Generator())

    @pytest.mark.openreg_only  # openreg's generator state layout
    def test_set_rng_state_under_fake_tensor_mode(self):
        # DTensor's LocalTensor mode restores states inside a FakeTensorMode:
        # the bytes are read without a tensor operation.
        from torch._subclasses.fake_tensor import FakeTensorMode

        state = state_of(123, 40)
        with FakeTensorMode():
            target.device_module.set_rng_state(state)
        assert bytes(target.device_module.get_rng_state().tolist()) == struct.pack("<Qq", 123, 40)


@pytest.mark.ops
class TestAcceleratorRandom:
    """torch.accelerator.random (2.14 on): the device's generator through the
    device-generic API, the same state as the device module's."""

    hw_classification = HW.ACCELERATOR

    def test_state_and_seed_agree_with_the_device_module(self):
        if not target.gates().ACCELERATOR_RANDOM:
            pytest.skip(f"torch {torch.__version__} has no torch.accelerator.random (2.14 on)")
        import torch.accelerator.random as acc_random

        target.device_module.manual_seed(1234)
        assert acc_random.initial_seed() == target.device_module.initial_seed() == 1234
        state = acc_random.get_rng_state()
        assert torch.equal(state, target.device_module.get_rng_state())
        a = torch.rand(100, device=DEVICE)
        target.device_module.set_rng_state(state)
        assert torch.equal(torch.rand(100, device=DEVICE).cpu(), a.cpu())
        states = acc_random.get_rng_state_all()
        assert len(states) == target.device_module.device_count()
        assert all(torch.equal(s, t) for s, t in
                   zip(states, target.device_module.get_rng_state_all()))


@pytest.mark.ops
@pytest.mark.smoke
@pytest.mark.openreg_only  # openreg's Philox stream rule (docs/rng.md)
class TestStreamRule:
    """The values are the documented Philox positions (the pure-Python oracle)."""
    hw_classification = HW.ACCELERATOR

    def test_uniform_float_is_word_0_of_each_position(self):
        seed, base = 2024, 12
        target.device_module.set_rng_state(state_of(seed, base))
        got = torch.rand(9, device=DEVICE).cpu()
        want = torch.tensor([(word(seed, base + i, 0) & 0xFFFFFF) / 2 ** 24 for i in range(9)])
        assert torch.equal(got, want)

    def test_uniform_double_and_full_range_integers_use_two_words(self):
        seed, base = 7, 400
        target.device_module.set_rng_state(state_of(seed, base))
        got = torch.rand(5, device=DEVICE, dtype=torch.float64).cpu()
        u64 = [word(seed, base + i, 0) | word(seed, base + i, 1) << 32 for i in range(5)]
        assert torch.equal(got, torch.tensor([(v & (2 ** 53 - 1)) / 2 ** 53 for v in u64],
                                             dtype=torch.float64))
        target.device_module.set_rng_state(state_of(seed, base))
        full = torch.empty(5, dtype=torch.int64, device=DEVICE).random_(-2 ** 63, None).cpu()
        assert full.tolist() == [v - 2 ** 64 if v >= 2 ** 63 else v for v in u64]

    def test_randint_is_word_0_modulo_the_range(self):
        seed, base = 99, 0
        target.device_module.set_rng_state(state_of(seed, base))
        got = torch.randint(-5, 1000, (7,), device=DEVICE).cpu()
        assert got.tolist() == [word(seed, base + i, 0) % 1005 - 5 for i in range(7)]

    def test_bernoulli_and_dropout_keep_where_word_0_is_below_p(self):
        seed, base, p = 5, 8, 0.3
        target.device_module.set_rng_state(state_of(seed, base))
        got = torch.empty(64, device=DEVICE).bernoulli_(p).cpu()
        want = torch.tensor([float(word(seed, base + i, 0) / 2 ** 32 < p) for i in range(64)])
        assert torch.equal(got, want)
        # dropout(p) keeps with probability 1 - p: the same rule, same positions.
        target.device_module.set_rng_state(state_of(seed, base))
        kept = F.dropout(torch.ones(64, device=DEVICE), 0.5).cpu() != 0
        assert kept.tolist() == [word(seed, base + i, 0) / 2 ** 32 < 0.5 for i in range(64)]

    def test_positions_follow_the_logical_order_of_a_strided_result(self):
        target.device_module.manual_seed(3)
        a = torch.empty(6, 4, device=DEVICE).t().normal_().cpu()  # shape (4, 6), strides (1, 4)
        target.device_module.manual_seed(3)
        b = torch.empty(4, 6, device=DEVICE).normal_().cpu()
        assert torch.equal(a, b)

    def test_the_same_positions_on_any_thread_count(self):
        target.device_module.manual_seed(8)
        a = torch.randn(100_000, device=DEVICE).cpu()
        prev = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            target.device_module.manual_seed(8)
            b = torch.randn(100_000, device=DEVICE).cpu()
        finally:
            torch.set_num_threads(prev)
        assert torch.equal(a, b)


DRAWS = {
    "uniform": lambda t: t.uniform_(-2, 3),
    "uniform64": lambda t: t.double().uniform_(),
    "normal": lambda t: t.normal_(1.0, 2.0),
    "normal64": lambda t: t.double().normal_(),
    "bernoulli": lambda t: t.bernoulli_(0.4),
    "dropout": lambda t: F.dropout(t.fill_(1), 0.25),
    "exponential": lambda t: t.exponential_(2.0),
    "geometric": lambda t: t.geometric_(0.3),
    "log_normal": lambda t: t.log_normal_(0.0, 0.5),
    "cauchy": lambda t: t.cauchy_(),
    "randint": lambda t: t.random_(3, 17),
    "random": lambda t: t.long().random_(),
}


@pytest.mark.ops
@pytest.mark.openreg_only  # openreg's Philox offsets
class TestSplitProperty:
    """Drawing n elements at offset b gives positions b..b+n: a tensor drawn
    in two parts, the second at b + n1, equals the tensor drawn at once
    (what DTensor's offset-based RNG tracker assumes of a CUDA generator)."""
    hw_classification = HW.ACCELERATOR

    @settings(max_examples=60, deadline=None)
    @given(dist=st.sampled_from(sorted(DRAWS)), n=st.integers(2, 300), cut=st.integers(1, 75),
           base=st.integers(0, 2 ** 20), seed=st.integers(0, 2 ** 64 - 1))
    def test_two_parts_equal_the_whole(self, dist, n, cut, base, seed):
        n1 = min(4 * cut, n - 1) // 4 * 4 or 4
        if n1 >= n:
            n = n1 + 1
        base *= 4
        draw = DRAWS[dist]
        target.device_module.set_rng_state(state_of(seed, base))
        whole = draw(torch.empty(n, device=DEVICE)).cpu()
        target.device_module.set_rng_state(state_of(seed, base))
        first = draw(torch.empty(n1, device=DEVICE)).cpu()
        assert offset_now() == base + n1
        second = draw(torch.empty(n - n1, device=DEVICE)).cpu()
        assert torch.equal(torch.cat([first, second]), whole)
        # ...and the generator ends where the whole draw leaves it, rounded
        # up to 4 per call.
        assert offset_now() == base + n1 + (n - n1 + 3) // 4 * 4

    def test_a_shard_drawn_at_its_offset_is_that_part_of_the_whole(self):
        # The offset-based tracker's recipe for Shard(0) of a (8, 6) tensor on
        # 4 ranks: rank r draws its (2, 6) shard at offset + r * 12.
        target.device_module.manual_seed(17)
        full = torch.empty(8, 6, device=DEVICE).uniform_().cpu()
        for r in range(4):
            target.device_module.set_rng_state(state_of(17, r * 12))
            shard = torch.empty(2, 6, device=DEVICE).uniform_().cpu()
            assert torch.equal(shard, full[2 * r: 2 * r + 2])


def _moments(x):
    x = x.double()
    return x.mean().item(), x.var().item()


@pytest.mark.ops
class TestDistributions:
    hw_classification = HW.ACCELERATOR

    N = 400_000

    def draw(self, fn, dtype=torch.float32, seed=0):
        target.device_module.manual_seed(seed)
        return fn(torch.empty(self.N, device=DEVICE, dtype=dtype)).cpu()

    # (draw, mean, variance): the moments of the distribution
    CASES = {
        "uniform(-2, 3)": (lambda t: t.uniform_(-2, 3), 0.5, 25 / 12),
        "normal(1, 2)": (lambda t: t.normal_(1, 2), 1.0, 4.0),
        "bernoulli(0.3)": (lambda t: t.bernoulli_(0.3), 0.3, 0.21),
        "exponential(2)": (lambda t: t.exponential_(2), 0.5, 0.25),
        "geometric(0.25)": (lambda t: t.geometric_(0.25), 4.0, 12.0),
        "log_normal(0, 0.5)": (lambda t: t.log_normal_(0, 0.5), math.exp(0.125),
                               (math.exp(0.25) - 1) * math.exp(0.25)),
        "randint(0, 10)": (lambda t: t.random_(0, 10), 4.5, 8.25),
    }

    @pytest.mark.parametrize("case", sorted(CASES))
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
    def test_moments(self, case, dtype):
        fn, mean, var = self.CASES[case]
        x = self.draw(fn, dtype)
        m, v = _moments(x)
        # 400k draws: the standard error of the mean is sqrt(var / N) < 0.006
        # here; bfloat16 rounding adds up to ~0.4 % of the value.
        tol = 6 * math.sqrt(var / self.N) + (0.01 * abs(mean) if dtype == torch.bfloat16 else 0)
        assert abs(m - mean) < tol + 1e-3, (m, mean)
        assert abs(v - var) / var < (0.05 if dtype == torch.bfloat16 else 0.03), (v, var)

    def test_uniform_histogram(self):
        x = self.draw(lambda t: t.uniform_())
        assert 0 <= x.min() and x.max() < 1
        counts = torch.histc(x, bins=20, min=0, max=1)
        expected = self.N / 20
        chi2 = ((counts - expected) ** 2 / expected).sum().item()
        assert chi2 < 50, chi2  # 19 degrees of freedom: p < 1e-4 beyond 45

    def test_cauchy_median_and_quartiles(self):
        x = self.draw(lambda t: t.cauchy_(2.0, 3.0))
        q = torch.quantile(x[:100_000].double(), torch.tensor([0.25, 0.5, 0.75], dtype=torch.double))
        torch.testing.assert_close(q, torch.tensor([-1.0, 2.0, 5.0], dtype=torch.double), atol=0.1, rtol=0)

    def test_neighbours_and_draws_are_uncorrelated(self):
        x = self.draw(lambda t: t.normal_())
        y = torch.randn(self.N, device=DEVICE).cpu()  # the next draw
        for a, b in [(x[:-1], x[1:]), (x[:-4], x[4:]), (x, y)]:
            r = torch.corrcoef(torch.stack([a, b]))[0, 1].item()
            assert abs(r) < 0.01, r

    def test_seeds_and_devices(self):
        a = self.draw(lambda t: t.normal_(), seed=1)
        b = self.draw(lambda t: t.normal_(), seed=1)
        c = self.draw(lambda t: t.normal_(), seed=2)
        assert torch.equal(a, b) and not torch.equal(a, c)
        # openreg:1 has a generator of its own and gives the same numbers
        # from the same seed.
        target.device_module.manual_seed_all(1)
        on1 = torch.empty(self.N, device=f"{DEVICE}:1").normal_().cpu()
        assert torch.equal(on1, a)
        target.device_module.manual_seed_all(4)
        with target.device_module.device(1):
            target.device_module.manual_seed(1)  # seeds openreg:1 only
        assert torch.equal(torch.randn(8, device=f"{DEVICE}:1").cpu(), a[:8])
        assert not torch.equal(torch.randn(8, device=DEVICE).cpu(), a[:8])

    @pytest.mark.openreg_only  # the range error is openreg's own message
    def test_bernoulli_with_a_tensor_of_probabilities(self):
        p = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]).repeat(20_000, 1)
        target.device_module.manual_seed(0)
        x = torch.bernoulli(p.to(DEVICE)).cpu()
        torch.testing.assert_close(x.mean(0), p[0], atol=0.01, rtol=0)
        assert x[:, 0].sum() == 0 and x[:, 4].sum() == 20_000
        # The CPU kernel's own check, word for word (test_kernel_messages.py).
        with pytest.raises(RuntimeError, match=r"Expected p_in >= 0 && p_in <= 1 to be true"):
            torch.empty(3, device=DEVICE).bernoulli_(torch.tensor([0.5, 1.5, 0.2], device=DEVICE))

    def test_multinomial(self):
        probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 1.0]], device=DEVICE)
        target.device_module.manual_seed(0)
        s = torch.multinomial(probs, 50_000, replacement=True).cpu()
        freq = torch.stack([torch.bincount(r, minlength=4) for r in s]).double() / 50_000
        torch.testing.assert_close(freq, probs.cpu().double(), atol=0.01, rtol=0)
        w = torch.multinomial(probs[0], 3).cpu()  # without replacement
        assert sorted(w.tolist()) != [] and len(set(w.tolist())) == 3 and 1 not in w.tolist()
        with pytest.raises(RuntimeError, match="invalid multinomial distribution"):
            torch.multinomial(torch.tensor([0.5, -0.1], device=DEVICE), 2, replacement=True)
        with pytest.raises(RuntimeError, match="invalid multinomial distribution"):
            torch.multinomial(torch.zeros(3, device=DEVICE), 2, replacement=True)

    @pytest.mark.openreg_only  # openreg's Philox offsets
    def test_randperm(self):
        target.device_module.manual_seed(0)
        p = torch.randperm(1000, device=DEVICE)
        assert p.device.type == DEVICE and p.dtype == torch.int64
        assert sorted(p.cpu().tolist()) == list(range(1000))
        assert p.cpu().tolist() != list(range(1000))
        assert offset_now() == 1000
        target.device_module.manual_seed(0)
        assert torch.equal(torch.randperm(1000, device=DEVICE).cpu(), p.cpu())
        with pytest.raises(RuntimeError, match="n must be non-negative"):
            torch.randperm(-1, out=torch.empty(0, dtype=torch.int64, device=DEVICE))


@pytest.mark.ops
@pytest.mark.openreg_only  # openreg's CPU-engine bridge and its offsets
class TestBridgedOperators:
    """Random operators with only a CPU kernel (gamma, poisson, binomial,
    dirichlet, rrelu) draw through a CPU engine seeded from the stream."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("op, mean", [
        (lambda r: torch.poisson(r), 3.0),
        (lambda r: torch._standard_gamma(r), 3.0),
        (lambda r: torch.binomial(r * 2, torch.full_like(r, 0.5)), 3.0),
    ])
    def test_reproducible_and_consume_the_stream(self, op, mean):
        rate = torch.full((50_001,), 3.0, device=DEVICE)
        target.device_module.manual_seed(10)
        a = op(rate).cpu()
        assert offset_now() == 50_004
        target.device_module.manual_seed(10)
        b = op(rate).cpu()
        c = op(rate).cpu()
        assert torch.equal(a, b) and not torch.equal(a, c)
        assert abs(a.double().mean().item() - mean) < 0.05
        cpu_state = torch.get_rng_state()
        op(rate)
        assert torch.equal(torch.get_rng_state(), cpu_state)  # never the CPU's generator


@pytest.mark.ops
@pytest.mark.openreg_only  # openreg's Philox positions of the SDPA mask
class TestAttentionDropoutPosition:
    hw_classification = HW.ACCELERATOR

    def test_the_mask_sits_at_philox_seed_and_offset(self):
        fwd = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
        q = torch.randn(2, 3, 5, 8, device=DEVICE)
        k = torch.randn(2, 3, 7, 8, device=DEVICE)
        v = torch.randn(2, 3, 7, 8, device=DEVICE)
        target.device_module.manual_seed(21)
        torch.rand(6, device=DEVICE)  # offset 8
        res = fwd(q, k, v, None, 0.4, False, True)
        seed, offset, weights = res[6].item(), res[7].item(), res[-1]
        assert (seed, offset) == (21, 8)
        assert offset_now() == 8 + 2 * 3 * 5 * 7 + 2  # B*H*L*S rounded up to 4
        # The kept entries are a bernoulli(1 - p) draw at those positions.
        target.device_module.set_rng_state(state_of(seed, offset))
        keep = torch.empty(2, 3, 5, 7, device=DEVICE).bernoulli_(0.6).bool().cpu()
        assert torch.equal(weights.cpu() != 0, keep)


@pytest.mark.ops
@pytest.mark.openreg_only  # torch_openreg._C
class TestGraphHooks:
    """CUDA's graph-safe RNG hooks, as a graph implementation calls them."""
    hw_classification = HW.ACCELERATOR

    def test_capture_reads_slots_and_replay_advances_past_the_graph(self):
        from torch_openreg import _C

        g = torch.Generator(device=DEVICE).manual_seed(5)
        g.set_offset(16)
        _C._generator_capture_prologue(g)
        try:
            # Kernels enqueued now read the capture's slots (seed 5, offset 16)
            # plus their offset inside the graph; the generator does not move.
            a = torch.rand(6, device=DEVICE, generator=g).cpu()   # graph offsets 0..8
            b = torch.randn(4, device=DEVICE, generator=g).cpu()  # graph offsets 8..12
            with pytest.raises(RuntimeError, match="while a graph is capturing"):
                g.manual_seed(1)
            with pytest.raises(RuntimeError, match="while a graph is capturing"):
                g.get_offset()
            with pytest.raises(RuntimeError, match="cannot be captured in a graph"):
                torch.poisson(torch.ones(3, device=DEVICE), generator=g)
            with pytest.raises(RuntimeError, match="already being captured"):
                _C._generator_capture_prologue(g)
        finally:
            assert _C._generator_capture_epilogue(g) == 12  # the whole graph's increment
        assert g.get_offset() == 16
        eager = torch.Generator(device=DEVICE).manual_seed(5)
        eager.set_offset(16)
        assert torch.equal(a, torch.rand(6, device=DEVICE, generator=eager).cpu())
        assert torch.equal(b, torch.randn(4, device=DEVICE, generator=eager).cpu())
        # Each replay refills the slots from the generator and moves it past
        # everything the graph draws.
        _C._generator_replay_prologue(g, 12)
        assert g.get_offset() == 28
        _C._generator_replay_prologue(g, 12)
        assert g.get_offset() == 40

    def test_hooks_refuse_other_generators(self):
        from torch_openreg import _C

        with pytest.raises(RuntimeError, match="expected an openreg generator"):
            _C._generator_capture_prologue(torch.Generator())
        with pytest.raises(TypeError, match="expected a torch.Generator"):
            _C._generator_capture_prologue(3)
        with pytest.raises(RuntimeError, match="capture_epilogue without a capture"):
            _C._generator_capture_epilogue(torch.Generator(device=DEVICE))
        with pytest.raises(RuntimeError, match="replay_prologue before any capture"):
            _C._generator_replay_prologue(torch.Generator(device=DEVICE), 4)
