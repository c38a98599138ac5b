"""Creating, moving, viewing and mutating openreg tensors, with the CPU as oracle."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import target
from tests.target import DEVICE, HW, device


def same(dev_result, cpu_result, **kw):
    assert dev_result.device.type == DEVICE
    torch.testing.assert_close(dev_result.cpu(), cpu_result, **kw)
    assert dev_result.dtype == cpu_result.dtype
    assert dev_result.shape == cpu_result.shape
    assert dev_result.stride() == cpu_result.stride()


@pytest.mark.ops
class TestFactories:
    hw_classification = HW.ACCELERATOR

    def test_factories(self):
        for make in [
            lambda d: torch.zeros(3, 4, device=d),
            lambda d: torch.ones(2, 5, dtype=torch.int32, device=d),
            lambda d: torch.full((3,), 2.5, device=d),
            lambda d: torch.arange(10, device=d),
            lambda d: torch.linspace(0, 1, 7, device=d),
            lambda d: torch.eye(4, device=d),
            lambda d: torch.empty(3, 4, device=d).fill_(1.5),
            lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
        ]:
            same(make(DEVICE), make("cpu"))

    def test_empty_strided_and_memory_format(self):
        t = torch.empty_strided((2, 3), (1, 2), device=DEVICE)
        assert t.stride() == (1, 2)
        c = torch.empty(2, 3, 4, 5, device=DEVICE, memory_format=torch.channels_last)
        assert c.is_contiguous(memory_format=torch.channels_last)

    def test_sparse_layout_factory(self):
        t = torch.empty(2, 2, layout=torch.sparse_coo, device=DEVICE)
        assert t.layout == torch.sparse_coo and t.device.type == DEVICE and t._nnz() == 0


@pytest.mark.ops
@pytest.mark.smoke
class TestViewsAndAliasing:
    hw_classification = HW.ACCELERATOR

    def test_views_alias_their_base(self):
        base = torch.arange(12.0, device=DEVICE)
        v = base.view(3, 4)
        t = v.t()
        s = v[1]
        d = v.diagonal()
        u = base.unfold(0, 4, 2)
        for view in (v, t, s, d, u):
            assert view._base is base or view._base is None
            assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
        s.mul_(-1)
        expect = torch.arange(12.0)
        expect[4:8] *= -1
        assert torch.equal(base.cpu(), expect)
        assert torch.equal(u.cpu(), expect.unfold(0, 4, 2))

    def test_inplace_on_view_through_fallback(self):
        x = torch.zeros(4, 4, device=DEVICE)
        x[:, 1].add_(torch.arange(4.0, device=DEVICE))
        x.t()[2].fill_(7)
        ref = torch.zeros(4, 4)
        ref[:, 1].add_(torch.arange(4.0))
        ref.t()[2].fill_(7)
        assert torch.equal(x.cpu(), ref)

    def test_inplace_returns_self(self):
        x = torch.ones(3, device=DEVICE)
        assert x.add_(1) is x
        assert torch.mul(x, 2, out=x) is x
        assert x.cpu().tolist() == [4.0, 4.0, 4.0]

    def test_out_argument_is_resized(self):
        a, b = torch.randn(3, 4), torch.randn(3, 4)
        out = torch.empty(0, device=DEVICE)
        r = torch.add(a.to(DEVICE), b.to(DEVICE), out=out)
        assert r is out and out.shape == (3, 4)
        torch.testing.assert_close(out.cpu(), a + b)

    def test_view_ops_returning_lists(self):
        x = torch.arange(10.0, device=DEVICE)
        parts = x.split(3)
        assert [p.shape[0] for p in parts] == [3, 3, 3, 1]
        parts[1].zero_()
        assert x.cpu().tolist()[3:6] == [0.0, 0.0, 0.0]
        rows = torch.arange(6.0, device=DEVICE).view(2, 3).unbind(0)
        assert rows[1].cpu().tolist() == [3.0, 4.0, 5.0]

    def test_resize_and_set(self):
        x = torch.arange(4.0, device=DEVICE)
        x.resize_(2, 3)
        assert x.shape == (2, 3)
        assert x.flatten()[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
        y = torch.empty(0, device=DEVICE)
        y.set_(x)
        assert y.data_ptr() == x.data_ptr() and y.shape == x.shape
        z = torch.empty(0, device=DEVICE).set_(x.untyped_storage(), 1, (2,), (2,))
        assert z.cpu().tolist() == [1.0, 3.0]
        x.untyped_storage().resize_(64)
        assert x.untyped_storage().nbytes() == 64

    def test_item_and_tolist(self):
        x = torch.tensor([1.5, -2.0], device=DEVICE)
        assert x[0].item() == 1.5
        assert x.tolist() == [1.5, -2.0]
        assert bool(x[1] < 0)
        assert torch.tensor(3, device=DEVICE).item() == 3

    def test_conj_and_neg_bits(self):
        z = torch.randn(4, dtype=torch.complex64)
        zd = z.to(DEVICE)
        assert torch.equal(zd.conj().cpu(), z.conj())
        assert torch.equal(zd.conj().imag.cpu(), z.conj().imag)
        assert torch.equal((zd.conj() * 2).cpu(), z.conj() * 2)


@pytest.mark.ops
@pytest.mark.smoke
class TestCopies:
    hw_classification = HW.ACCELERATOR

    def test_to_and_from(self):
        x = torch.randn(5, 7)
        d = x.to(DEVICE)
        assert d.device == torch.device(device(0))
        assert torch.equal(d.cpu(), x)
        assert torch.equal(d.to(torch.float64).cpu(), x.double())
        assert torch.equal(x.to(DEVICE, torch.int32).cpu(), x.to(torch.int32))

    def test_clone_and_contiguous(self):
        x = torch.randn(4, 5, device=DEVICE).t()
        assert not x.is_contiguous()
        c = x.contiguous()
        assert c.is_contiguous() and c.data_ptr() != x.data_ptr()
        assert torch.equal(c.cpu(), x.cpu())
        y = x.clone()
        y.add_(1)
        assert not torch.equal(y.cpu(), x.cpu())

    def test_broadcasting_copy(self):
        d = torch.empty(3, 4, device=DEVICE)
        d.copy_(torch.arange(4.0))
        assert torch.equal(d.cpu(), torch.arange(4.0).expand(3, 4))

    def test_cross_device(self):
        x = torch.randn(100, device=device(1))
        y = x.to(device(0))
        assert torch.equal(y.cpu(), x.cpu())
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            x + y


@pytest.mark.ops
class TestElementwiseAgainstCpu:
    hw_classification = HW.ACCELERATOR

    @settings(max_examples=40, deadline=None)
    @given(
        shape=st.lists(st.integers(0, 6), min_size=0, max_size=3),
        dtype=st.sampled_from([torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16]),
        op=st.sampled_from(["add", "mul", "sub", "maximum", "minimum", "eq", "lt", "where"]),
        seed=st.integers(0, 2**16),
    )
    def test_binary(self, shape, dtype, op, seed):
        g = torch.Generator().manual_seed(seed)
        a = (torch.randn(shape, generator=g) * 10).to(dtype)
        b = (torch.randn(shape, generator=g) * 10).to(dtype)
        if op == "where":
            f = lambda x, y: torch.where(x > y, x, y)  # noqa: E731
        else:
            f = getattr(torch, op)
        same(f(a.to(DEVICE), b.to(DEVICE)), f(a, b))

    @settings(max_examples=30, deadline=None)
    @given(
        shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
        op=st.sampled_from(["sum", "mean", "amax", "prod", "std", "logsumexp", "cumsum", "softmax"]),
        seed=st.integers(0, 2**16),
    )
    def test_reductions(self, shape, op, seed):
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(shape, generator=g)
        dim = len(shape) - 1
        f = {
            "sum": lambda x: x.sum(dim), "mean": lambda x: x.mean(), "amax": lambda x: x.amax(dim),
            "prod": lambda x: x.prod(dim), "std": lambda x: x.std(dim, correction=0),
            "logsumexp": lambda x: x.logsumexp(dim), "cumsum": lambda x: x.cumsum(dim),
            "softmax": lambda x: x.softmax(dim),
        }[op]
        same(f(a.to(DEVICE)), f(a))

    def test_data_dependent_shapes(self):
        a = torch.tensor([3, 0, 1, 0, 5])
        d = a.to(DEVICE)
        same(torch.nonzero(d), torch.nonzero(a))
        same(d[d > 0], a[a > 0])
        same(torch.unique(d), torch.unique(a))

    def test_indexing(self):
        a = torch.randn(5, 6)
        idx = torch.tensor([4, 0, 2])
        d = a.to(DEVICE)
        same(d[idx.to(DEVICE)], a[idx])
        same(d[:, idx.to(DEVICE)], a[:, idx])
        d2, a2 = d.clone(), a.clone()
        d2[idx.to(DEVICE)] = 0.0
        a2[idx] = 0.0
        same(d2, a2)
        same(torch.gather(d, 1, torch.zeros(5, 2, dtype=torch.long, device=DEVICE)),
             torch.gather(a, 1, torch.zeros(5, 2, dtype=torch.long)))

    def test_matmul_family(self):
        a, b = torch.randn(8, 5), torch.randn(5, 3)
        same(a.to(DEVICE) @ b.to(DEVICE), a @ b)
        x, y = torch.randn(2, 4, 5), torch.randn(2, 5, 6)
        same(torch.bmm(x.to(DEVICE), y.to(DEVICE)), torch.bmm(x, y))
        bias = torch.randn(3)
        same(torch.addmm(bias.to(DEVICE), a.to(DEVICE), b.to(DEVICE)), torch.addmm(bias, a, b))


@pytest.mark.ops
class TestRandom:
    hw_classification = HW.ACCELERATOR

    def test_manual_seed_reproduces(self):
        torch.manual_seed(123)
        a = torch.randn(100, device=DEVICE)
        torch.manual_seed(123)
        b = torch.randn(100, device=DEVICE)
        assert torch.equal(a.cpu(), b.cpu())

    def test_devices_have_independent_state(self):
        target.device_module.manual_seed_all(7)
        a0 = torch.rand(10, device=device(0))
        a1 = torch.rand(10, device=device(1))
        assert torch.equal(a0.cpu(), a1.cpu())  # same seed, independent streams
        target.device_module.manual_seed_all(7)
        torch.rand(10, device=device(1))  # advancing device 1 ...
        assert torch.equal(torch.rand(10, device=device(0)).cpu(), a0.cpu())  # ... leaves 0 alone

    def test_openreg_seed_does_not_touch_cpu_generator(self):
        torch.manual_seed(1)
        cpu_state = torch.get_rng_state()
        target.device_module.manual_seed(99)
        torch.randn(10, device=DEVICE)
        assert torch.equal(torch.get_rng_state(), cpu_state)

    def test_rng_state_round_trip(self):
        target.device_module.manual_seed(5)
        state = target.device_module.get_rng_state()
        a = torch.randn(50, device=DEVICE)
        target.device_module.set_rng_state(state)
        b = torch.randn(50, device=DEVICE)
        assert torch.equal(a.cpu(), b.cpu())
        assert target.device_module.initial_seed() == 5
        states = target.device_module.get_rng_state_all()
        assert len(states) == 2
        target.device_module.set_rng_state_all(states)

    def test_explicit_generator(self):
        g = torch.Generator(device=DEVICE)
        assert g.device.type == DEVICE
        g.manual_seed(42)
        a = torch.randn(20, device=DEVICE, generator=g)
        g.manual_seed(42)
        b = torch.empty(20, device=DEVICE).normal_(generator=g)
        assert torch.equal(a.cpu(), b.cpu())
        g.manual_seed(42)
        c = torch.randperm(20, device=DEVICE, generator=g)
        assert sorted(c.cpu().tolist()) == list(range(20))

    def test_seed_and_fork_rng(self):
        target.device_module.seed()
        target.device_module.seed_all()
        target.device_module.manual_seed(3)
        with torch.random.fork_rng(devices=[0], device_type=DEVICE):
            torch.randn(5, device=DEVICE)
        target.device_module.manual_seed(3)
        x = torch.randn(5, device=DEVICE)
        target.device_module.manual_seed(3)
        with torch.random.fork_rng(devices=[0], device_type=DEVICE):
            torch.randn(100, device=DEVICE)
        assert torch.equal(torch.randn(5, device=DEVICE).cpu(), x.cpu())

    def test_dropout_is_reproducible_and_uses_device_generator(self):
        x = torch.ones(1000, device=DEVICE)
        target.device_module.manual_seed(11)
        a = torch.nn.functional.dropout(x, 0.5, training=True)
        target.device_module.manual_seed(11)
        b = torch.nn.functional.dropout(x, 0.5, training=True)
        assert torch.equal(a.cpu(), b.cpu())
        assert set(a.cpu().unique().tolist()) <= {0.0, 2.0}
        target.device_module.manual_seed(12)
        c = torch.nn.functional.dropout(x, 0.5, training=True)
        assert not torch.equal(a.cpu(), c.cpu())
