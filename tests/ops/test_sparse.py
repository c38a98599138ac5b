"""Sparse tensors on the device (docs/sparse.md): COO through SparsePrivateUse1,
CSR/CSC/BSR/BSC through SparseCsrPrivateUse1, against the CPU as the oracle.

OpInfo's sparse samples (every op with a supports_sparse* flag) run in the
OpInfo sweep's ``sparse`` group (test_opinfo.py); this file covers what the
sweep does not: construction and conversions, copies between devices,
elementwise arithmetic with type promotion, reductions, products, sparse
gradients and the optimizers that take them, a GNN step and an embedding model
trained with SparseAdam, serialization, pinned memory, memory accounting and
stream order, and bad input."""

import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import target
from tests.target import DEVICE, HW, device

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")

LAYOUTS = [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr,
           torch.sparse_bsc]


def coo(dtype=torch.float32, dev="cpu", coalesced=False, shape=(4, 5), nnz=6, seed=0):
    """A COO tensor with repeated indices (uncoalesced) unless ``coalesced``."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randint(0, shape[0], (nnz,), generator=g),
                       torch.randint(0, shape[1], (nnz,), generator=g)])
    val = (torch.randn(nnz, generator=g) * 4).to(dtype)
    s = torch.sparse_coo_tensor(idx, val, shape)
    return (s.coalesce() if coalesced else s).to(dev)


def dense(t):
    return t.to_dense() if t.layout != torch.strided else t


def same(dev, cpu, exact=True):
    """dev is on the device with cpu's layout, dtype and (dense) values."""
    assert dev.device.type == DEVICE, dev.device
    assert dev.layout == cpu.layout and dev.dtype == cpu.dtype and dev.shape == cpu.shape
    if cpu.layout == torch.sparse_coo:
        assert dev.is_coalesced() == cpu.is_coalesced()
        assert dev._nnz() == cpu._nnz()
    kw = dict(rtol=0, atol=0) if exact else {}
    torch.testing.assert_close(dense(dev).cpu(), dense(cpu), equal_nan=True, **kw)


def to_layout(x, layout):
    if layout == torch.sparse_coo:
        return x.to_sparse()
    if layout in (torch.sparse_bsr, torch.sparse_bsc):
        return x.to_sparse(layout=layout, blocksize=(2, 2))
    return x.to_sparse(layout=layout)


@pytest.mark.ops
@pytest.mark.smoke
class TestSparseBasics:
    hw_classification = HW.ACCELERATOR

    def test_coo_construction_and_members(self):
        i = torch.tensor([[0, 1, 1], [2, 0, 2]])
        v = torch.tensor([3.0, 4.0, 5.0])
        for s in (torch.sparse_coo_tensor(i, v, (2, 3), device=device()),
                  torch.sparse_coo_tensor(i.to(DEVICE), v.to(DEVICE), (2, 3)),
                  torch.sparse_coo_tensor(i, v, (2, 3)).to(DEVICE)):
            assert s.layout == torch.sparse_coo and s.device == torch.device(DEVICE, 0)
            assert s._indices().device == s.device and s._values().device == s.device
            assert s._nnz() == 3 and s.sparse_dim() == 2 and s.dense_dim() == 0
            assert torch.equal(s._indices().cpu(), i) and torch.equal(s._values().cpu(), v)
            assert torch.equal(s.to_dense().cpu(), torch.sparse_coo_tensor(i, v, (2, 3)).to_dense())

    def test_to_sparse_and_back(self):
        x = torch.randn(4, 5)
        x[x < 0.3] = 0
        for layout in LAYOUTS:
            xx = torch.randn(4, 4)
            xx[xx < 0] = 0
            s = to_layout(xx.to(DEVICE), layout)
            same(s, to_layout(xx, layout))
            assert torch.equal(s.to_dense().cpu(), xx)
        s = x.to(DEVICE).to_sparse(sparse_dim=1)
        same(s, x.to_sparse(sparse_dim=1))

    def test_coalesce_matches_cpu(self):
        s = coo(dev=DEVICE)
        assert not s.is_coalesced()
        same(s.coalesce(), coo().coalesce())
        assert s.coalesce()._indices().device == s.device

    def test_empty_and_zeros(self):
        z = torch.zeros(3, 4, layout=torch.sparse_coo, device=DEVICE)
        assert z._nnz() == 0 and z.device.type == DEVICE
        e = torch.empty(3, 4, layout=torch.sparse_coo, device=DEVICE)
        assert e._nnz() == 0
        c = torch.empty(3, 4, layout=torch.sparse_csr, device=DEVICE)
        assert c.layout == torch.sparse_csr and c.crow_indices().shape == (4,)

    def test_compressed_members(self):
        x = torch.eye(4)
        for layout, (a, b) in {torch.sparse_csr: ("crow_indices", "col_indices"),
                               torch.sparse_csc: ("ccol_indices", "row_indices"),
                               torch.sparse_bsr: ("crow_indices", "col_indices"),
                               torch.sparse_bsc: ("ccol_indices", "row_indices")}.items():
            s, c = to_layout(x.to(DEVICE), layout), to_layout(x, layout)
            for m in (a, b, "values"):
                got, want = getattr(s, m)(), getattr(c, m)()
                assert got.device == s.device and torch.equal(got.cpu(), want), (layout, m)
        ctor = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]),
                                       torch.tensor([1.0, 2.0]), (2, 2), device=DEVICE)
        assert torch.equal(ctor.to_dense().cpu(), torch.diag(torch.tensor([1.0, 2.0])))

    def test_copies_between_devices(self):
        s = coo()
        on0 = s.to(DEVICE)
        on1 = on0.to(device(1))
        assert on1.device == torch.device(DEVICE, 1) and on1._values().device == on1.device
        back = on1.cpu()
        assert back.device.type == "cpu" and back.layout == torch.sparse_coo
        same(on1, s)
        assert torch.equal(back.to_dense(), s.to_dense())
        # copy_ into an existing sparse tensor, both ways
        dst = torch.zeros(4, 5, layout=torch.sparse_coo, device=DEVICE)
        dst.copy_(s)
        same(dst, s)
        host = torch.zeros(4, 5, layout=torch.sparse_coo)
        host.copy_(on0)
        assert host.device.type == "cpu" and torch.equal(host.to_dense(), s.to_dense())
        c = torch.eye(3).to_sparse_csr()
        same(c.to(DEVICE).to(device(1)), c)

    def test_a_tensor_on_device_1_stays_there(self):
        s = coo(dev=device(1))
        out = [s + s, s.coalesce(), s * 2, torch.sparse.sum(s, 1),
               torch.sparse.mm(s, torch.ones(5, 2, device=device(1)))]
        assert all(o.device == torch.device(DEVICE, 1) for o in out)

    def test_repr_and_properties(self):
        s = coo(dev=DEVICE)
        assert f"device='{DEVICE}:0'" in repr(s) and "layout=torch.sparse_coo" in repr(s)
        assert s.is_sparse and not s.is_sparse_csr
        assert torch.eye(2, device=DEVICE).to_sparse_csr().is_sparse_csr


@st.composite
def sparse_pair(draw):
    """Two sparse operands, or a sparse and a dense one, with any dtypes."""
    dtypes = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.float16]
    a_dt, b_dt = draw(st.sampled_from(dtypes)), draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, 1000))
    b_kind = draw(st.sampled_from(["sparse", "dense", "scalar", "0-d"]))
    return a_dt, b_dt, seed, b_kind


def _outcome(fn):
    """("ok", result) or (exception type, its first line in the CPU's words:
    the device's name and its dispatch keys as the CPU's)."""
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 - compared with the CPU's
        msg = str(e).split("\n")[0].replace(f"{DEVICE}:0", "cpu")
        for key in ("SparseCsr", "Sparse"):
            msg = msg.replace(f"'{key}PrivateUse1' backend", f"'{key}CPU' backend")
        return type(e).__name__, msg


@pytest.mark.ops
class TestSparseArithmetic:
    hw_classification = HW.ACCELERATOR

    @settings(max_examples=60, deadline=None)
    @given(case=sparse_pair(), op=st.sampled_from(["add", "sub", "mul", "div", "radd"]))
    def test_elementwise_with_type_promotion(self, case, op):
        a_dt, b_dt, seed, b_kind = case
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")

            def run(dev):
                a = coo(a_dt, dev, seed=seed)
                b = {"sparse": lambda: coo(b_dt, dev, seed=seed + 1),
                     "dense": lambda: torch.ones(4, 5, dtype=b_dt, device=dev) * 3,
                     "scalar": lambda: 2.5 if b_dt.is_floating_point else 3,
                     "0-d": lambda: torch.tensor(2, dtype=b_dt, device=dev)}[b_kind]()
                if op == "radd":  # dense + sparse (sparse + dense is refused, as on the CPU)
                    return (b + a) if isinstance(b, torch.Tensor) and b.dim() else a + b
                return getattr(torch, op)(a, b)

            c_kind, c = _outcome(lambda: run("cpu"))
            d_kind, d = _outcome(lambda: run(DEVICE))
        assert d_kind == c_kind, (d, c)
        if c_kind == "ok":
            same(d, c, exact=not c.dtype.is_floating_point)
        else:
            assert d == c

    def test_in_place_on_sparse_and_dense(self):
        s, sd = coo(), coo(dev=DEVICE)
        a, ad = coo(seed=3), coo(seed=3, dev=DEVICE)
        a.add_(s)
        ad.add_(sd)
        same(ad, a)
        x, xd = torch.ones(4, 5), torch.ones(4, 5, device=DEVICE)
        x.add_(s, alpha=-0.5)
        xd.add_(sd, alpha=-0.5)
        same(xd, x)
        m, md = coo(), coo(dev=DEVICE)
        m.mul_(3)
        md.mul_(3)
        same(md, m)
        md.zero_()
        assert md._nnz() == 0 and md.device.type == DEVICE

    @pytest.mark.parametrize("fn", [
        lambda s: s.sum(),
        lambda s: torch.sparse.sum(s),
        lambda s: torch.sparse.sum(s, dim=0),
        lambda s: torch.sparse.sum(s, dim=(0, 1)),
        lambda s: torch.sparse.softmax(s, 1),
        lambda s: torch.sparse.log_softmax(s, 0),
        lambda s: s.index_select(1, torch.tensor([4, 0, 2], device=s.device)),
        lambda s: s.narrow_copy(1, 1, 3),
        lambda s: s.t(),
        lambda s: s.transpose(0, 1).coalesce(),
        lambda s: -s,
        lambda s: s.abs(),
        lambda s: s.pow(2),
        lambda s: torch.cat([s, s], 1),
        lambda s: s.clone(),
        lambda s: torch.ones(4, 5, device=s.device).sparse_mask(s.coalesce()),
        lambda s: s.to_sparse_csr(),
    ], ids=["sum", "sparse.sum", "sum dim0", "sum dims", "softmax", "log_softmax",
            "index_select", "narrow_copy", "t", "transpose", "neg", "abs", "pow", "cat",
            "clone", "sparse_mask", "to_csr"])
    def test_coo_operators(self, fn):
        same(fn(coo(dev=DEVICE)), fn(coo()), exact=False)

    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_products_with_dense(self, layout):
        x = torch.randn(4, 4)
        x[x < 0] = 0
        w, v, bias = torch.randn(4, 3), torch.randn(4), torch.randn(4, 3)
        s, sd = to_layout(x, layout), to_layout(x.to(DEVICE), layout)
        checks = [(lambda a, b, c, d: a @ b, True),
                  (lambda a, b, c, d: torch.addmm(c, a, b, beta=0.5, alpha=2), True),
                  (lambda a, b, c, d: torch.mm(a, b), True),
                  (lambda a, b, c, d: torch.mv(a, d), layout != torch.sparse_bsc),
                  (lambda a, b, c, d: torch.sparse.mm(a, b), layout == torch.sparse_coo),
                  (lambda a, b, c, d: torch.sparse.addmm(c, a, b), layout == torch.sparse_coo)]
        for fn, applies in checks:
            if not applies:
                continue
            c_kind, c = _outcome(lambda: fn(s, w, bias, v))
            d_kind, d = _outcome(lambda: fn(sd, w.to(DEVICE), bias.to(DEVICE), v.to(DEVICE)))
            assert d_kind == c_kind, (d, c)
            if c_kind == "ok":
                same(d, c, exact=False)
            else:
                assert d == c

    def test_sparse_times_sparse(self):
        a, b = coo(shape=(4, 5)), coo(shape=(5, 3), seed=7)
        same(torch.sparse.mm(a.to(DEVICE), b.to(DEVICE)), torch.sparse.mm(a, b), exact=False)


@pytest.mark.ops
class TestSparseGradients:
    hw_classification = HW.ACCELERATOR

    def _embedding_grads(self, dev, cls=torch.nn.Embedding, **kw):
        torch.manual_seed(0)
        emb = cls(20, 6, sparse=True, **kw)
        emb = emb.to(dev)
        idx = torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]], device=dev)
        out = emb(idx) if cls is torch.nn.Embedding else emb(idx.flatten(),
                                                              torch.tensor([0, 3], device=dev))
        (out * torch.arange(out.numel(), device=dev).view(out.shape)).sum().backward()
        return emb.weight.grad

    @pytest.mark.parametrize("cls, kw", [(torch.nn.Embedding, {}),
                                         (torch.nn.EmbeddingBag, {"mode": "sum"}),
                                         (torch.nn.EmbeddingBag, {"mode": "mean"})],
                             ids=["embedding", "bag-sum", "bag-mean"])
    def test_embedding_sparse_gradient(self, cls, kw):
        d, c = self._embedding_grads(DEVICE, cls, **kw), self._embedding_grads("cpu", cls, **kw)
        same(d, c)

    def test_gather_sparse_grad(self):
        def grad(dev):
            src = torch.arange(12.0, device=dev).view(3, 4).requires_grad_()
            idx = torch.tensor([[0, 1], [2, 3], [1, 1]], device=dev)
            torch.gather(src, 1, idx, sparse_grad=True).mul(2).sum().backward()
            return src.grad
        same(grad(DEVICE), grad("cpu"))

    def test_accumulation_sparse_into_sparse_and_dense(self):
        def grads(dev):
            w = torch.zeros(10, 3, device=dev, requires_grad=True)
            for ids in ([1, 2], [2, 7]):  # sparse into sparse
                F.embedding(torch.tensor(ids, device=dev), w, sparse=True).sum().backward()
            sparse_sum = w.grad.clone()
            (w * 2).sum().backward()  # a dense gradient into the sparse one
            return sparse_sum, w.grad
        (ds, dd), (cs, cd) = grads(DEVICE), grads("cpu")
        same(ds, cs)
        same(dd, cd)

    @pytest.mark.parametrize("opt", [
        lambda p: torch.optim.SparseAdam(p, lr=0.1),
        lambda p: torch.optim.SGD(p, lr=0.1),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda p: torch.optim.Adagrad(p, lr=0.1),
    ], ids=["SparseAdam", "SGD", "SGD-momentum", "Adagrad"])
    def test_optimizers_on_sparse_gradients(self, opt):
        def train(dev):
            torch.manual_seed(0)
            emb = torch.nn.Embedding(30, 4, sparse=True).to(dev)
            o = opt(emb.parameters())
            for step in range(3):
                idx = torch.tensor([step, 5, 7 + step, 5], device=dev)
                o.zero_grad()
                emb(idx).pow(2).sum().backward()
                o.step()
            return emb.weight.detach()
        torch.testing.assert_close(train(DEVICE).cpu(), train("cpu"), rtol=0, atol=0)


@pytest.mark.ops
class TestSparseModels:
    hw_classification = HW.ACCELERATOR

    def test_gnn_step(self):
        """Sparse adjacency times dense features, two layers, backward, SGD:
        the CPU's losses and gradients."""
        def run(dev):
            g = torch.Generator().manual_seed(0)
            n, f = 64, 16
            edges = torch.randint(0, n, (2, 300), generator=g)
            adj = torch.sparse_coo_tensor(edges, torch.ones(300), (n, n)).coalesce()
            deg = torch.sparse.sum(adj, 1).to_dense().clamp(min=1)
            adj = torch.sparse_coo_tensor(adj.indices(), adj.values() / deg[adj.indices()[0]],
                                          (n, n)).to(dev)
            x = torch.randn(n, f, generator=g).to(dev)
            y = torch.randint(0, 3, (n,), generator=g).to(dev)
            torch.manual_seed(0)
            l1, l2 = torch.nn.Linear(f, 32).to(dev), torch.nn.Linear(32, 3).to(dev)
            opt = torch.optim.SGD([*l1.parameters(), *l2.parameters()], lr=0.1)
            losses = []
            for _ in range(3):
                opt.zero_grad()
                h = torch.relu(torch.sparse.mm(adj, l1(x)))
                loss = F.cross_entropy(torch.sparse.mm(adj, l2(h)), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            return losses, l1.weight.grad.cpu(), l2.weight.detach().cpu()
        (dl, dg, dw), (cl, cg, cw) = run(DEVICE), run("cpu")
        assert dl == cl
        torch.testing.assert_close(dg, cg, rtol=0, atol=0)
        torch.testing.assert_close(dw, cw, rtol=0, atol=0)

    def test_embedding_model_with_sparse_adam(self):
        def run(dev):
            torch.manual_seed(0)
            emb = torch.nn.EmbeddingBag(100, 8, mode="mean", sparse=True).to(dev)
            head = torch.nn.Linear(8, 2).to(dev)
            sparse_opt = torch.optim.SparseAdam(list(emb.parameters()), lr=0.05)
            dense_opt = torch.optim.Adam(head.parameters(), lr=0.05)
            g = torch.Generator().manual_seed(1)
            losses = []
            for _ in range(4):
                ids = torch.randint(0, 100, (32,), generator=g).to(dev)
                offsets = torch.arange(0, 32, 4).to(dev)
                y = torch.randint(0, 2, (8,), generator=g).to(dev)
                sparse_opt.zero_grad()
                dense_opt.zero_grad()
                loss = F.cross_entropy(head(emb(ids, offsets)), y)
                loss.backward()
                assert emb.weight.grad.layout == torch.sparse_coo
                sparse_opt.step()
                dense_opt.step()
                losses.append(loss.item())
            return losses, emb.weight.detach().cpu()
        (dl, dw), (cl, cw) = run(DEVICE), run("cpu")
        assert dl == cl
        torch.testing.assert_close(dw, cw, rtol=0, atol=0)


@pytest.mark.ops
class TestSparseMemoryAndStreams:
    hw_classification = HW.ACCELERATOR

    def test_memory_allocated_counts_members(self):
        target.device_module.synchronize()
        before = target.device_module.memory_allocated()
        s = torch.sparse_coo_tensor(torch.randint(0, 1000, (2, 10000)), torch.randn(10000),
                                    (1000, 1000)).to(DEVICE)
        members = s._indices().untyped_storage().nbytes() + s._values().untyped_storage().nbytes()
        assert members == 2 * 10000 * 8 + 10000 * 4
        grown = target.device_module.memory_allocated() - before
        assert members <= grown < members + 4096  # the allocator's rounding
        c = s.coalesce()
        assert target.device_module.memory_allocated() - before >= grown + c._values().numel() * 4
        del s, c
        assert target.device_module.memory_allocated() == before

    def test_kernels_run_in_stream_order(self):
        """A sparse kernel on a side stream waits for that stream's earlier
        work, and the host sees its result after synchronising."""
        s = coo(dev=DEVICE)
        side = target.device_module.Stream()
        side.wait_stream(target.device_module.current_stream())  # s was made there
        with target.device_module.stream(side):
            target.busy(20000)
            x = torch.ones(4, 5, device=DEVICE)
            r = torch.sparse.mm(s.t(), x)
        side.synchronize()
        torch.testing.assert_close(r.cpu(), torch.sparse.mm(coo().t(), torch.ones(4, 5)))

    def test_pin_memory_and_non_blocking_copies(self):
        s = coo()
        p = s.pin_memory()
        assert p.is_pinned() and p._values().is_pinned() and p._indices().is_pinned()
        d = p.to(DEVICE, non_blocking=True)
        target.device_module.synchronize()
        same(d, s)
        c = torch.eye(3).to_sparse_csr().pin_memory()
        assert c.is_pinned()
        same(c.to(DEVICE, non_blocking=True), torch.eye(3).to_sparse_csr())

    def test_serialization(self, tmp_path):
        for t in (coo(dev=DEVICE), coo(dev=DEVICE, coalesced=True),
                  torch.eye(4).to_sparse_bsr((2, 2)).to(DEVICE)):
            buf = io.BytesIO()
            torch.save(t, buf)
            buf.seek(0)
            back = torch.load(buf)
            assert back.device == t.device
            same(back, t.cpu())
            buf.seek(0)
            host = torch.load(buf, map_location="cpu")
            assert host.device.type == "cpu" and torch.equal(dense(host), dense(t).cpu())


@pytest.mark.ops
class TestSparseBadInput:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("make", [
        lambda d: torch.sparse_coo_tensor(torch.tensor([[0, 5]], device=d),
                                          torch.tensor([1.0, 2.0], device=d), (3,),
                                          check_invariants=True),
        lambda d: torch.sparse_coo_tensor(torch.tensor([[0, -1]], device=d),
                                          torch.tensor([1.0, 2.0], device=d), (3,),
                                          check_invariants=True),
        lambda d: torch.sparse_coo_tensor(torch.tensor([[0, 1]], device=d),
                                          torch.tensor([1.0, 2.0, 3.0], device=d), (3,)),
        lambda d: torch.sparse_csr_tensor(torch.tensor([0, 2, 1], device=d),
                                          torch.tensor([0, 1], device=d),
                                          torch.tensor([1.0, 2.0], device=d), (2, 2),
                                          check_invariants=True),
        lambda d: torch.sparse_csr_tensor(torch.tensor([0, 1, 2], device=d),
                                          torch.tensor([0, 7], device=d),
                                          torch.tensor([1.0, 2.0], device=d), (2, 2),
                                          check_invariants=True),
        lambda d: torch.eye(5, device=d).to_sparse_bsr((2, 2)),
        lambda d: coo(dev=d) + torch.ones(4, 5, device=d),
        lambda d: coo(dev=d) + coo(dev=d, shape=(4, 6)),
        lambda d: torch.sparse.mm(coo(dev=d), torch.ones(4, 2, device=d)),
        lambda d: torch.gather(torch.ones(2, 2, device=d), 1,
                               torch.tensor([[0, 5]], device=d), sparse_grad=True),
        lambda d: coo(dev=d).view(20),
        lambda d: torch.eye(3, device=d).to_sparse_csr().view(9),
    ], ids=["index out of range", "negative index", "nnz mismatch", "csr crow", "csr col",
            "bsr blocksize", "sparse + dense", "shapes", "mm shapes", "gather index",
            "view (no sparse kernel)", "csr view"])
    def test_errors_as_on_cpu(self, make):
        c_kind, c = _outcome(lambda: make("cpu"))
        d_kind, d = _outcome(lambda: make(DEVICE))
        assert c_kind != "ok"
        assert (d_kind, d) == (c_kind, c)

    @pytest.mark.openreg_only  # the device's dispatch key in the message
    def test_no_sparse_kernel_names_the_devices_key(self):
        with pytest.raises(NotImplementedError, match="Could not run 'aten::view' with arguments "
                                                      "from the 'SparsePrivateUse1' backend"):
            coo(dev=DEVICE).view(20)

    def test_mixed_devices_raise_the_same_device_error(self):
        i, v = torch.tensor([[0, 1]]), torch.tensor([1.0, 2.0])
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.sparse_coo_tensor(i, v.to(DEVICE), (3,))
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            coo(dev=DEVICE) + coo()
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.sparse.mm(coo(dev=DEVICE), torch.ones(5, 2))
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            coo(dev=DEVICE) * coo(dev=device(1))

    def test_a_failed_call_leaks_nothing(self):
        s = coo(dev=DEVICE)
        target.device_module.synchronize()
        before = target.device_module.memory_allocated()
        for _ in range(3):
            with pytest.raises(RuntimeError):
                torch.sparse.mm(s, torch.ones(3, 2, device=DEVICE))
        assert target.device_module.memory_allocated() == before
        same(s, coo())  # untouched
