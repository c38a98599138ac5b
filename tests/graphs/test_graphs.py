"""Graph capture and replay through torch.accelerator.Graph and the device
module's graph API (torch.cuda's: graph, make_graphed_callables,
graph_pool_handle, is_current_stream_capturing), with the CPU as the oracle
(docs/graphs.md). openreg's error messages, graph dump, activity names and
stream sanitizer are openreg-only."""

import gc
import threading

import pytest
import torch
from hypothesis import given, settings, strategies as st

from tests import target
from tests.target import DEVICE, HW


def fresh():
    gc.collect()
    target.device_module.synchronize()
    target.device_module.empty_cache()


def capture(fn, **graph_kwargs):
    """Capture fn() into a new graph on a side stream; (graph, fn's result)."""
    g = torch.accelerator.Graph()
    with target.device_module.graph(g, **graph_kwargs):
        out = fn()
    return g, out


def sync_from_another_thread():
    """The device module's synchronize() on another thread; the errors it raised, as text."""
    errors = []

    def other():
        try:
            target.device_module.synchronize()
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive()
    return errors


def warm_up(fn, n=3):
    """fn() n times on a side stream, as the CUDA graphs recipe warms up before capturing."""
    s = target.device_module.Stream()
    s.wait_stream(target.device_module.current_stream())
    with target.device_module.stream(s):
        for _ in range(n):
            fn()
    target.device_module.current_stream().wait_stream(s)


def assert_invalidated(g):
    """The capture failed and left nothing: no graph to replay (openreg's message)."""
    with pytest.raises(RuntimeError, match="not captured"):
        g.replay()


@pytest.mark.graphs
@pytest.mark.smoke
class TestCaptureReplay:
    hw_classification = HW.ACCELERATOR

    def test_accelerator_graph_as_in_its_docstring(self):
        x = torch.zeros(2000, device=DEVICE)
        s = torch.Stream(device=DEVICE)
        g = torch.accelerator.Graph()
        with s, g:
            x += 1
        assert torch.equal(x.cpu(), torch.zeros(2000))  # captured, not run
        g.replay()
        g.replay()
        assert torch.equal(x.cpu(), torch.full((2000,), 2.0))

    def test_pointwise_matmul_reduction_inplace_equal_eager(self):
        torch.manual_seed(0)
        a_cpu, b_cpu, c_cpu = torch.randn(6, 5), torch.randn(5, 4), torch.randn(6, 4)
        a, b, c = a_cpu.to(DEVICE), b_cpu.to(DEVICE), c_cpu.to(DEVICE)

        def work(a, b, c):
            m = a @ b
            p = (m * 2 + c).tanh()
            c.add_(p).mul_(0.5)
            return p.sum(dim=0), p.amax(), torch.softmax(m, dim=1), c

        g, outs = capture(lambda: work(a, b, c))
        for _ in range(3):
            a_new = torch.randn(6, 5)
            a.copy_(a_new)
            a_cpu.copy_(a_new)
            g.replay()
            expected = work(a_cpu, b_cpu, c_cpu)
            for got, want in zip(outs, expected):
                torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)

    @settings(max_examples=15, deadline=None)
    @given(n=st.integers(1, 40), m=st.integers(1, 7), k=st.floats(-3, 3, allow_nan=False))
    def test_pointwise_chains(self, n, m, k):
        x_cpu = torch.randn(n, m)
        x = x_cpu.to(DEVICE)
        g, y = capture(lambda: ((x + k) * x).relu().sqrt() - x.mean(0))
        g.replay()
        torch.testing.assert_close(y.cpu(), ((x_cpu + k) * x_cpu).relu().sqrt() - x_cpu.mean(0),
                                   equal_nan=True)

    @settings(max_examples=25, deadline=None)
    @given(shape=st.sampled_from([(7,), (3, 5), (4, 1, 6)]),
           dtype=st.sampled_from([torch.float32, torch.float64, torch.int64]),
           transposed=st.booleans(), broadcast=st.booleans(),
           k=st.integers(-3, 3))
    def test_replays_bit_equal_to_the_cpu(self, shape, dtype, transposed, broadcast, k):
        """Elementwise operators (in place, with an output, with a Python number,
        broadcast, on non-contiguous views), reductions, copies and operators with
        several outputs: every replay equals the CPU's eager results bit for bit,
        after the inputs change."""
        def make(cpu, transpose=transposed):
            a = cpu.to(dtype) if dtype != torch.int64 else (cpu * 10).to(dtype)
            return a.mT if transpose and a.dim() >= 2 else a

        def work(a, b, acc, dst):
            r = [a + b, a - b * k, a * b, (a * k).neg(), b.add(a, alpha=2),
                 a.sum(), a.sum(0), a.amax(-1), torch.where(a > b, a, b), torch.cat([a, a * b])]
            if dtype != torch.int64:
                r += [a / (b.abs() + 1), torch.exp(a / 8), a.sigmoid(), a.tanh(), a.relu(),
                      torch.softmax(a, -1), a.mean(), torch.sort(a, -1)[0]]
            acc.add_(a).mul_(k).sub_(b)
            if dtype != torch.int64:
                acc.div_(2).tanh_()
            dst.copy_(a)
            return r + [acc, dst]

        torch.manual_seed(k + 10)
        a_cpu = make(torch.randn(shape))
        b_cpu = make(torch.randn(a_cpu.shape[-1:]), False) if broadcast else make(torch.randn(shape))
        acc_cpu = torch.zeros_like(a_cpu)
        dst_cpu = torch.empty_like(a_cpu)
        a, b, acc, dst = (t.to(DEVICE) for t in (a_cpu, b_cpu, acc_cpu, dst_cpu))
        if transposed and a.dim() >= 2:  # the same non-contiguous layout on the device
            a, acc, dst = a.mT.contiguous().mT, acc.mT.contiguous().mT, dst.mT.contiguous().mT
        g, outs = capture(lambda: work(a, b, acc, dst))
        for _ in range(3):
            new = make(torch.randn(shape))
            a.copy_(new)
            a_cpu.copy_(new)
            g.replay()
            want = work(a_cpu, b_cpu, acc_cpu, dst_cpu)
            for got, w in zip(outs, want):
                assert got.dtype == w.dtype and torch.equal(got.cpu(), w), (got, w)

    @pytest.mark.openreg_only
    def test_keep_graph_instantiate_and_debug_dump(self, tmp_path):
        x = torch.ones(4, device=DEVICE)
        g = torch.openreg.OpenRegGraph(keep_graph=True)
        g.enable_debug_mode()
        with torch.openreg.graph(g):
            x.mul_(3)
        g.instantiate()
        g.replay()
        assert torch.equal(x.cpu(), torch.full((4,), 3.0))
        path = tmp_path / "g.dot"
        g.debug_dump(str(path))
        text = path.read_text()
        assert text.startswith("digraph") and "aten::mul" in text

    def test_replay_on_the_default_stream_orders_with_eager_work(self):
        x = torch.zeros(64, device=DEVICE)
        g, _ = capture(lambda: x.add_(1))
        x.fill_(10)       # eager, on the default stream, before the replay
        g.replay()        # on the current (default) stream
        x.mul_(2)         # after it
        assert torch.equal(x.cpu(), torch.full((64,), 22.0))

    def test_replay_from_another_thread(self):
        x = torch.zeros(8, device=DEVICE)
        g, y = capture(lambda: (x.add_(1), x * 10)[1])
        errors = []

        def worker():
            try:
                for _ in range(5):
                    g.replay()
                target.device_module.synchronize()
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        t = threading.Thread(target=worker)
        t.start()
        t.join(timeout=60)
        assert not t.is_alive() and not errors
        assert torch.equal(x.cpu(), torch.full((8,), 5.0))
        assert torch.equal(y.cpu(), torch.full((8,), 50.0))

    def test_fork_and_join_across_two_streams(self):
        x = torch.ones(32, device=DEVICE)
        side = target.device_module.Stream()

        def work():
            main = target.device_module.current_stream()
            y = x * 2
            side.wait_stream(main)           # fork: side joins the capture
            with target.device_module.stream(side):
                z = y + 5                    # recorded on the side stream
            main.wait_stream(side)           # join
            return y, z, z * y

        g, (y, z, w) = capture(work)
        x.fill_(3)
        g.replay()
        assert torch.equal(w.cpu(), torch.full((32,), 66.0))

    @pytest.mark.openreg_only
    def test_a_forked_stream_must_join_back(self):
        x = torch.ones(32, device=DEVICE)
        side = torch.openreg.Stream()
        g = torch.openreg.OpenRegGraph()
        with pytest.raises(RuntimeError, match="did not join back"):
            with torch.openreg.graph(g):
                side.wait_stream(torch.openreg.current_stream())
                with torch.openreg.stream(side):
                    x.add_(1)
        assert_invalidated(g)
        torch.openreg.synchronize()
        assert torch.equal(x.cpu(), torch.ones(32))


@pytest.mark.graphs
class TestIllegalDuringCapture:
    """Each fails with an error naming capture, invalidates the capture and
    leaves no graph; the device works afterwards."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only
    @pytest.mark.parametrize("call,match", [
        (lambda x: torch.openreg.synchronize(), "orDeviceSynchronize.*not permitted while stream"),
        (lambda x: torch.openreg.current_stream().synchronize(), "is capturing"),
        (lambda x: torch.openreg.current_stream().query(), "is capturing"),
        (lambda x: x.cpu(), "must be non_blocking and use pinned host memory"),
        (lambda x: x.copy_(torch.ones(16)), "must be non_blocking and use pinned host memory"),
        (lambda x: x.sum().item(), "needs a value on the host"),
        (lambda x: torch.nonzero(x), "needs a value on the host"),
        (lambda x: bool(x.sum() > 0), "needs a value on the host"),
    ], ids=["device-sync", "stream-sync", "stream-query", "blocking-copy-to-host",
            "pageable-copy-from-host", "item",
            "nonzero", "bool"])
    def test_fails_and_invalidates(self, call, match):
        fresh()
        x = torch.ones(16, device=DEVICE)
        g = torch.openreg.OpenRegGraph()
        with pytest.raises(RuntimeError, match=match) as info:
            with torch.openreg.graph(g):
                x.add_(1)
                call(x)
        assert "invalidated" in str(info.value)
        assert_invalidated(g)
        torch.openreg.synchronize()
        assert torch.equal(x.cpu(), torch.ones(16))  # nothing half-recorded ran
        assert not torch.openreg.is_current_stream_capturing()

    def test_async_copies_with_pinned_memory_are_captured(self):
        host_in = torch.arange(16, dtype=torch.float32).pin_memory()
        host_out = torch.zeros(16).pin_memory()
        x = torch.zeros(16, device=DEVICE)

        def work():
            x.copy_(host_in, non_blocking=True)
            host_out.copy_(x * 2, non_blocking=True)
        g, _ = capture(work)
        host_in.add_(1)
        g.replay()
        target.device_module.synchronize()
        assert torch.equal(host_out, (torch.arange(16) + 1) * 2.0)

    def test_accelerator_graph_keywords(self):
        x = torch.zeros(4, device=DEVICE)
        s = torch.Stream(device=DEVICE)
        g1 = torch.accelerator.Graph(keep_graph=True, capture_error_mode="thread_local")
        with s, g1:
            x.add_(1)
        g2 = torch.accelerator.Graph(pool=g1.pool(), capture_error_mode="relaxed")
        with s, g2:
            x.mul_(10)
        assert g2.pool() == g1.pool()
        g1.replay()          # keep_graph: instantiated at the first replay
        g2.replay()
        assert torch.equal(x.cpu(), torch.full((4,), 10.0))

    @pytest.mark.openreg_only
    def test_thread_local_mode_allows_sync_from_another_thread(self):
        x = torch.ones(4, device=DEVICE)
        g = torch.openreg.OpenRegGraph()
        with torch.openreg.graph(g, capture_error_mode="thread_local"):
            x.add_(1)
            errors = sync_from_another_thread()
        assert not errors
        with pytest.raises(RuntimeError, match="captures in thread-local mode"):
            with torch.openreg.graph(torch.openreg.OpenRegGraph(),
                                     capture_error_mode="thread_local"):
                torch.openreg.synchronize()   # the capturing thread itself

    @pytest.mark.openreg_only
    def test_global_mode_refuses_sync_from_another_thread(self):
        x = torch.ones(4, device=DEVICE)
        g = torch.openreg.OpenRegGraph()
        seen = []
        with pytest.raises(RuntimeError, match="invalidated: orDeviceSynchronize was called "
                                               "from another thread"):
            with torch.openreg.graph(g, capture_error_mode="global"):
                x.add_(1)
                seen = sync_from_another_thread()
        assert seen and "begun by another thread" in seen[0]
        assert_invalidated(g)

    def test_relaxed_mode_allows_sync_from_another_thread(self):
        x = torch.ones(4, device=DEVICE)
        g = torch.accelerator.Graph()
        with target.device_module.graph(g, capture_error_mode="relaxed"):
            x.add_(1)
            errors = sync_from_another_thread()
        assert not errors
        g.replay()
        assert torch.equal(x.cpu(), torch.full((4,), 2.0))

    @pytest.mark.openreg_only
    def test_default_stream_cannot_be_captured(self):
        g = torch.accelerator.Graph()
        with pytest.raises(RuntimeError, match="non-default stream"):
            g.capture_begin()

    @pytest.mark.openreg_only
    def test_replay_before_capture_and_capture_twice(self):
        g = torch.openreg.OpenRegGraph()
        with pytest.raises(RuntimeError, match="not captured"):
            g.replay()
        x = torch.zeros(4, device=DEVICE)
        with torch.openreg.graph(g):
            x.add_(1)
        with pytest.raises(RuntimeError, match="already been captured"):
            with torch.openreg.graph(g):
                x.add_(1)
        g.reset()
        with torch.openreg.graph(g):
            x.add_(2)
        g.replay()
        assert torch.equal(x.cpu(), torch.full((4,), 2.0))

    @pytest.mark.openreg_only
    def test_debug_dump_needs_debug_mode(self, tmp_path):
        g, _ = capture(lambda: torch.ones(2, device=DEVICE) * 2)
        with pytest.raises(RuntimeError, match="enable_debug_mode"):
            g.debug_dump(str(tmp_path / "g.dot"))

    @pytest.mark.openreg_only
    def test_unknown_capture_error_mode(self):
        with pytest.raises(ValueError, match="capture_error_mode"):
            torch.openreg.graph(torch.openreg.OpenRegGraph(), capture_error_mode="sometimes")

@pytest.mark.graphs
class TestMemoryPools:
    hw_classification = HW.ACCELERATOR

    def test_capture_allocates_from_the_graph_pool(self):
        fresh()
        x = torch.ones(1024, device=DEVICE)
        g, y = capture(lambda: x * 2)
        pool = g.pool()
        segments = target.device_module.memory_snapshot()
        pools = {tuple(s["segment_pool_id"]) for s in segments}
        assert pool in pools and (0, 0) in pools
        owned = [s for s in segments if tuple(s["segment_pool_id"]) == pool]
        addr = y.data_ptr()
        assert any(s["address"] <= addr < s["address"] + s["total_size"] for s in owned)

    def test_freed_during_capture_stays_reserved_and_reset_gives_it_back(self):
        fresh()
        reserved0 = target.device_module.memory_reserved()
        allocated0 = target.device_module.memory_allocated()
        x = torch.ones(4096, device=DEVICE)

        def work():
            tmp = x * 3          # freed before the capture ends ...
            return tmp + 1       # ... but replay writes it again
        g, y = capture(work)
        fresh()
        assert target.device_module.memory_reserved() > reserved0  # the pool keeps its segment
        g.replay()
        assert torch.equal(y.cpu(), torch.full((4096,), 4.0))
        del y
        g.reset()
        del x
        fresh()
        assert target.device_module.memory_allocated() == allocated0
        assert target.device_module.memory_reserved() == reserved0

    def test_two_graphs_share_a_pool(self):
        fresh()
        x = torch.ones(256, device=DEVICE)
        g1, y1 = capture(lambda: x + 1)
        g2, y2 = capture(lambda: y1 * 10, pool=g1.pool())
        assert g2.pool() == g1.pool()
        handle = target.device_module.graph_pool_handle()
        g3, y3 = capture(lambda: y2 - 1, pool=handle)
        g4, y4 = capture(lambda: y3 * 2, pool=handle)
        assert g3.pool() == g4.pool() == handle != g1.pool()
        for g in (g1, g2, g3, g4):
            g.replay()
        assert torch.equal(y4.cpu(), torch.full((256,), 38.0))
        pools = {tuple(s["segment_pool_id"]) for s in target.device_module.memory_snapshot()}
        assert {g1.pool(), handle} <= pools
        del y1, y2, y3, y4
        for g in (g1, g2, g3, g4):
            g.reset()
        fresh()
        pools = {tuple(s["segment_pool_id"]) for s in target.device_module.memory_snapshot()}
        assert not pools & {g1.pool(), handle}

    def test_graph_destruction_gives_the_pool_back(self):
        fresh()
        reserved0 = target.device_module.memory_reserved()
        x = torch.ones(100_000, device=DEVICE)
        g, y = capture(lambda: x.exp())
        del g, y, x
        fresh()
        assert target.device_module.memory_reserved() == reserved0

    def test_a_thousand_replays_keep_memory_flat(self):
        fresh()
        x = torch.randn(64, 64, device=DEVICE)
        w = torch.randn(64, 64, device=DEVICE)
        g, y = capture(lambda: torch.relu(x @ w).softmax(dim=1).sum(0))
        g.replay()
        target.device_module.synchronize()
        allocated = target.device_module.memory_allocated()
        reserved = target.device_module.memory_reserved()
        for _ in range(1000):
            g.replay()
        target.device_module.synchronize()
        assert target.device_module.memory_allocated() == allocated
        assert target.device_module.memory_reserved() == reserved
        torch.testing.assert_close(y.cpu(), torch.relu(x.cpu() @ w.cpu()).softmax(dim=1).sum(0))


@pytest.mark.graphs
class TestRandomness:
    hw_classification = HW.ACCELERATOR

    def test_each_replay_draws_new_numbers_reproducibly(self):
        def run():
            g, (u, n, d) = capture(lambda: (torch.rand(64, device=DEVICE),
                                            torch.randn(64, device=DEVICE),
                                            torch.nn.functional.dropout(
                                                torch.ones(64, device=DEVICE), 0.5)))
            target.device_module.manual_seed(1234)
            draws = []
            for _ in range(3):
                g.replay()
                draws.append(torch.cat([u, n, d]).cpu())
            return draws

        first, second = run(), run()
        assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])
        for a, b in zip(first, second):
            assert torch.equal(a, b)

    def test_replays_continue_the_generator_stream(self):
        # A replay after seeding draws what eager code drawing the same
        # amount at that point of the stream would (the generator moves on).
        g, u = capture(lambda: torch.rand(8, device=DEVICE))
        target.device_module.manual_seed(7)
        g.replay()
        after_graph = torch.rand(8, device=DEVICE).cpu()
        target.device_module.manual_seed(7)
        g.replay()
        assert torch.equal(torch.rand(8, device=DEVICE).cpu(), after_graph)
        assert not torch.equal(u.cpu(), after_graph)

    @pytest.mark.parametrize("draw", [
        lambda: torch.poisson(torch.full((6,), 4.0, device=DEVICE)),
        lambda: torch.bernoulli(torch.full((64,), 0.5, device=DEVICE)),
        lambda: torch.multinomial(torch.ones(50, device=DEVICE), 10),
        lambda: torch.randint(0, 1000, (16,), device=DEVICE),
        lambda: torch.randperm(32, device=DEVICE),
        lambda: torch.empty(32, device=DEVICE).exponential_(),
    ], ids=["poisson", "bernoulli", "multinomial", "randint", "randperm", "exponential"])
    def test_random_operators(self, draw):
        g, out = capture(draw)
        target.device_module.manual_seed(5)
        g.replay()
        first = out.cpu()
        g.replay()
        assert not torch.equal(first, out.cpu())
        target.device_module.manual_seed(5)
        g.replay()
        assert torch.equal(first, out.cpu())

    @pytest.mark.openreg_only
    def test_seeding_while_capturing_is_refused(self):
        g = torch.openreg.OpenRegGraph()
        with pytest.raises(RuntimeError, match="while a graph is capturing"):
            with torch.openreg.graph(g):
                torch.openreg.manual_seed(3)
        torch.openreg.synchronize()

    @pytest.mark.openreg_only
    def test_another_generator_is_refused(self):
        gen = torch.Generator(device=DEVICE)
        g = torch.openreg.OpenRegGraph()
        with pytest.raises(RuntimeError, match="does not capture"):
            with torch.openreg.graph(g):
                torch.rand(4, device=DEVICE, generator=gen)


def _mlp(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(),
                               torch.nn.Linear(24, 3)).to(device)


@pytest.mark.graphs
class TestTraining:
    hw_classification = HW.ACCELERATOR

    def test_the_recipe_of_the_cuda_graphs_docs(self):
        """Whole-network capture from PyTorch's CUDA graphs notes, device swapped."""
        torch.manual_seed(1)
        data = [(torch.randn(16, 12), torch.randn(16, 3)) for _ in range(5)]
        # The CPU oracle: eager steps from the same weights.
        ref = _mlp("cpu")
        opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for x, y in data:
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(ref(x), y).backward()
            opt.step()

        model = _mlp(DEVICE)
        loss_fn = torch.nn.MSELoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        static_input = torch.randn(16, 12, device=DEVICE)
        static_target = torch.randn(16, 3, device=DEVICE)
        initial = [p.detach().clone() for p in model.parameters()]

        s = target.device_module.Stream()
        s.wait_stream(target.device_module.current_stream())
        with target.device_module.stream(s):
            for _ in range(3):
                optimizer.zero_grad(set_to_none=True)
                y_pred = model(static_input)
                loss = loss_fn(y_pred, static_target)
                loss.backward()
                optimizer.step()
        target.device_module.current_stream().wait_stream(s)
        del y_pred, loss
        with torch.no_grad():
            for p, p0 in zip(model.parameters(), initial):
                p.copy_(p0)

        g = torch.accelerator.Graph()
        optimizer.zero_grad(set_to_none=True)
        with target.device_module.graph(g):
            static_y_pred = model(static_input)
            static_loss = loss_fn(static_y_pred, static_target)
            static_loss.backward()
            optimizer.step()

        for x, y in data:
            static_input.copy_(x)
            static_target.copy_(y)
            g.replay()
        for got, want in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-6)

    def test_make_graphed_callables_trains_like_eager(self):
        torch.manual_seed(2)
        data = [(torch.randn(8, 12), torch.randn(8, 3)) for _ in range(4)]
        ref = _mlp("cpu")
        opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        for x, y in data:
            opt.zero_grad()
            torch.nn.functional.mse_loss(ref(x), y).backward()
            opt.step()

        model = _mlp(DEVICE)
        graphed = target.device_module.make_graphed_callables(
            model, (torch.randn(8, 12, device=DEVICE),))
        assert graphed is model
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for x, y in data:
            opt.zero_grad()
            torch.nn.functional.mse_loss(graphed(x.to(DEVICE)), y.to(DEVICE)).backward()
            opt.step()
        for got, want in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-6)
        # Outside the training mode it was graphed in, the module runs eagerly.
        model.eval()
        x = torch.randn(8, 12)
        torch.testing.assert_close(model(x.to(DEVICE)).detach().cpu(), ref.eval()(x).detach(),
                                   rtol=1e-5, atol=1e-6)

    @pytest.mark.openreg_only
    def test_make_graphed_callables_for_functions_and_errors(self):
        w = torch.randn(5, 5, device=DEVICE, requires_grad=True)

        def f(x):
            return (x @ w).sin()

        gf = torch.openreg.make_graphed_callables(f, (torch.randn(3, 5, device=DEVICE,
                                                                  requires_grad=True),))
        x = torch.randn(3, 5, requires_grad=True)
        xd = x.detach().to(DEVICE).requires_grad_()
        out = gf(xd)
        out.sum().backward()
        ref = (x @ w.detach().cpu()).sin()
        ref.sum().backward()
        torch.testing.assert_close(out.detach().cpu(), ref.detach())
        torch.testing.assert_close(xd.grad.cpu(), x.grad)
        with pytest.raises(TypeError, match="only contain tensors"):
            torch.openreg.make_graphed_callables(f, (3,))
        m = torch.nn.Linear(2, 2).to(DEVICE)
        m.register_forward_hook(lambda *a: None)
        with pytest.raises(RuntimeError, match="hooks"):
            torch.openreg.make_graphed_callables(m, (torch.randn(1, 2, device=DEVICE),))


@pytest.mark.graphs
class TestCompiledCapture:
    """torch.compile'd code captured by hand (docs/graphs.md, "Compiled code in a
    graph"): its kernels' launches and the operators it calls become graph nodes,
    and a replay computes what the compiled function computes when called."""
    hw_classification = HW.ACCELERATOR

    @staticmethod
    def no_recompile():
        # The capture must run the code that was warmed up, not a recompile.
        return torch._dynamo.config.patch(error_on_recompile=True)

    def test_compiled_function_replays_as_eager_compiled(self):
        torch._dynamo.reset()
        w = torch.randn(16, 16, device=DEVICE)

        @torch.compile
        def f(x):
            return torch.relu(x @ w + 1).sin() * 2 + x.sum(dim=0)

        static_x = torch.randn(8, 16, device=DEVICE)
        warm_up(lambda: f(static_x))
        g = torch.accelerator.Graph()
        with self.no_recompile(), target.device_module.graph(g):
            static_y = f(static_x)
        torch.manual_seed(3)
        for _ in range(3):
            x = torch.randn(8, 16)
            static_x.copy_(x)
            g.replay()
            with self.no_recompile():
                want = f(x.to(DEVICE))
            assert torch.equal(static_y.cpu(), want.cpu())
            torch.testing.assert_close(static_y.cpu(),
                                       torch.relu(x @ w.cpu() + 1).sin() * 2 + x.sum(dim=0))

    def test_compiled_training_step_replays_bit_equal(self):
        """Forward and backward compiled, optimizer eager: the captured step trains
        exactly as the same step called eagerly."""
        torch._dynamo.reset()
        torch.manual_seed(4)
        data = [(torch.randn(16, 12), torch.randn(16, 3)) for _ in range(4)]

        def make():
            model = _mlp(DEVICE)
            return model, torch.compile(model), torch.optim.SGD(model.parameters(), lr=0.1)

        def step(compiled, opt, x, y):
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.mse_loss(compiled(x), y)
            loss.backward()
            opt.step()
            return loss

        # Eager compiled: the oracle.
        ref, ref_c, ref_opt = make()
        ref_losses = [step(ref_c, ref_opt, x.to(DEVICE), y.to(DEVICE)).detach().cpu()
                      for x, y in data]

        model, compiled, opt = make()
        initial = [p.detach().clone() for p in model.parameters()]
        static_x = torch.zeros(16, 12, device=DEVICE)
        static_y = torch.zeros(16, 3, device=DEVICE)
        warm_up(lambda: step(compiled, opt, static_x, static_y))
        with torch.no_grad():
            for p, p0 in zip(model.parameters(), initial):
                p.copy_(p0)
        g = torch.accelerator.Graph()
        with self.no_recompile(), target.device_module.graph(g):
            static_loss = step(compiled, opt, static_x, static_y)
        losses = []
        for x, y in data:
            static_x.copy_(x)
            static_y.copy_(y)
            g.replay()
            losses.append(static_loss.detach().cpu())
        for got, want in zip(losses, ref_losses):
            assert torch.equal(got, want)
        for got, want in zip(model.parameters(), ref.parameters()):
            assert torch.equal(got.detach().cpu(), want.detach().cpu())

    @pytest.mark.slow
    @pytest.mark.openreg_only
    def test_cpp_wrapper_launches_are_captured(self):
        torch._dynamo.reset()
        f = torch.compile(lambda a, b: (a * b).cos() + a.mean(), options={"cpp_wrapper": True})
        a = torch.randn(32, device=DEVICE)
        b = torch.randn(32, device=DEVICE)
        warm_up(lambda: f(a, b), n=2)
        g = torch.openreg.OpenRegGraph()
        with self.no_recompile(), torch.openreg.graph(g):
            out = f(a, b)
        for _ in range(2):
            a.copy_(torch.randn(32))
            g.replay()
            with self.no_recompile():
                assert torch.equal(out.cpu(), f(a, b).cpu())


@pytest.mark.graphs
@pytest.mark.openreg_only
class TestPreparedReplay:
    """A node's kernel prepared at capture (OPENREG_GRAPH_PREPARE, docs/graphs.md):
    elementwise iterators and CPU kernels on prepared aliases replay bit-equal
    to the dispatcher path."""
    hw_classification = HW.ACCELERATOR

    @staticmethod
    def stats():
        import torch_openreg
        return torch_openreg._C._graph_prepare_stats()

    def captured(self, monkeypatch, mode, work, *inputs):
        """Capture work(*inputs) with OPENREG_GRAPH_PREPARE=mode; (graph, outputs,
        how its nodes replay)."""
        monkeypatch.setenv("OPENREG_GRAPH_PREPARE", mode)
        before = self.stats()
        g, out = capture(lambda: work(*inputs))
        after = self.stats()
        monkeypatch.delenv("OPENREG_GRAPH_PREPARE")
        return g, out, {k: after[k] - before[k] for k in after}

    def test_modes_replay_bit_equal(self, monkeypatch):
        def work(x, w, acc):
            h = (x @ w).relu()                       # aliases: mm, relu (a copy into the result)
            y = h * 2 + x[:, :1]                     # iterators: mul.out, add.out (broadcast)
            acc.mul_(0.5).add_(y.sum(0))             # iterators in place; aliases: sum
            return y.sigmoid() - y.tanh(), acc.clone()

        torch.manual_seed(0)
        x0, w0 = torch.randn(16, 8), torch.randn(8, 8)
        results, kinds = {}, {}
        for mode in ("0", "aliases", "1"):
            x, w, acc = x0.to(DEVICE), w0.to(DEVICE), torch.zeros(8, device=DEVICE)
            g, out, kinds[mode] = self.captured(monkeypatch, mode, work, x, w, acc)
            got = []
            for i in range(3):
                x.copy_(x0 + i)
                g.replay()
                got.append([t.cpu() for t in out])
            results[mode] = got
        assert kinds["0"]["aliases"] == kinds["0"]["iterator"] == 0
        assert kinds["aliases"]["aliases"] > 0 and kinds["aliases"]["iterator"] == 0
        assert kinds["1"]["iterator"] >= 5 and kinds["1"]["aliases"] > 0
        for mode in ("aliases", "1"):
            for got, want in zip(results[mode], results["0"]):
                assert all(torch.equal(a, b) for a, b in zip(got, want))

    def test_what_is_not_prepared_keeps_the_dispatcher_path(self, monkeypatch):
        x = torch.ones(8, device=DEVICE)
        i = torch.ones(8, dtype=torch.int32, device=DEVICE)
        cpu_scalar = torch.tensor(2.0)              # a caller's CPU tensor, read at every replay
        h = torch.ones(8, dtype=torch.bfloat16, device=DEVICE)
        g, out, kinds = self.captured(
            monkeypatch, "1",
            lambda: (x + i, x * cpu_scalar, h * 3, torch.nn.functional.dropout(x, 0.5)))
        assert kinds["iterator"] == 0               # a cast, a CPU tensor, bfloat16, random
        cpu_scalar.fill_(5.0)
        g.replay()
        assert torch.equal(out[0].cpu(), torch.full((8,), 2.0))
        assert torch.equal(out[1].cpu(), torch.full((8,), 5.0))
        assert torch.equal(out[2].cpu(), torch.full((8,), 3.0, dtype=torch.bfloat16))

    def test_bad_setting_names_the_variable(self, monkeypatch):
        x = torch.ones(4, device=DEVICE)
        monkeypatch.setenv("OPENREG_GRAPH_PREPARE", "yes")
        g = torch.accelerator.Graph()
        with pytest.raises(RuntimeError, match="OPENREG_GRAPH_PREPARE must be '1'.*got 'yes'"):
            with torch.openreg.graph(g):
                x.mul_(2)
        monkeypatch.delenv("OPENREG_GRAPH_PREPARE")
        torch.openreg.synchronize()
        assert torch.equal(x.cpu(), torch.ones(4))


@pytest.mark.graphs
class TestTools:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only
    def test_profiler_shows_the_replay_and_its_kernels(self):
        from torch.profiler import ProfilerActivity, profile

        x = torch.zeros(16, device=DEVICE)
        g, _ = capture(lambda: x.add_(1) * 3)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            g.replay()
            torch.openreg.synchronize()
        device_events = [e for e in prof.events()
                         if e.device_type == torch.autograd.DeviceType.PrivateUse1]
        names = {e.name for e in device_events}
        assert "orGraphLaunch" in names
        assert {"aten::add_", "aten::mul"} <= names

    @pytest.mark.openreg_only
    def test_stream_sanitizer_checks_replays(self):
        torch.openreg.set_stream_sanitizer(True)
        try:
            x = torch.ones(4096, device=DEVICE)
            g, y = capture(lambda: x * 2)   # captured with the sanitizer on
            torch.openreg.synchronize()
            side = torch.openreg.Stream()
            with torch.openreg.stream(side):
                g.replay()                  # writes y on the side stream
            # Read on the default stream without waiting for the side stream.
            with pytest.raises(torch.openreg.StreamRaceError, match="float32\\[4096\\]"):
                y + 1
            torch.openreg.current_stream().wait_stream(side)
            assert torch.equal((y + 1).cpu(), torch.full((4096,), 3.0))
            # A replay that reads what another stream is still writing.
            with torch.openreg.stream(side):
                x.fill_(5)
            with pytest.raises(torch.openreg.StreamRaceError, match="orGraphLaunch"):
                g.replay()
            torch.openreg.current_stream().wait_stream(side)
            g.replay()
            assert torch.equal(y.cpu(), torch.full((4096,), 10.0))
        finally:
            torch.openreg.set_stream_sanitizer(False)

    def test_current_stream_capturing(self):
        assert not target.device_module.is_current_stream_capturing()
        seen = []
        g = torch.accelerator.Graph()
        with target.device_module.graph(g):
            seen.append(target.device_module.is_current_stream_capturing())
        assert seen == [True] and not target.device_module.is_current_stream_capturing()
