"""Autograd on openreg: device threads, cross-device graphs, gradcheck."""

import textwrap
import threading

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

from tests import target
from tests._subprocess import run_python
from tests.target import DEVICE, HW, device


@pytest.mark.ops
class TestAutogradEngine:
    hw_classification = HW.ACCELERATOR

    def test_backward_runs_on_a_device_thread(self):
        seen = {}
        x = torch.randn(4, device=DEVICE, requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: seen.update(device=threading.get_ident()))
        y.sum().backward()
        c = torch.randn(4, requires_grad=True)
        z = c * 2
        z.register_hook(lambda g: seen.update(cpu=threading.get_ident()))
        z.sum().backward()
        main = threading.get_ident()
        assert seen["cpu"] == main  # CPU work runs on the calling thread
        assert seen["device"] != main  # device work on the engine's device thread

    def test_each_device_has_its_own_thread(self):
        seen = {}
        for i in (0, 1):
            x = torch.randn(3, device=device(i), requires_grad=True)
            y = x.exp()
            y.register_hook(lambda g, i=i: seen.update({i: threading.get_ident()}))
            y.sum().backward()
        assert seen[0] != seen[1]

    def test_cross_device_graph(self):
        a = torch.randn(5, requires_grad=True)  # CPU leaf
        b = torch.randn(5, device=device(1), requires_grad=True)
        c = torch.randn(5, device=device(0), requires_grad=True)
        out = (a.to(device(1)) * b).to(device(0)) + c.sin()
        out.sum().backward()
        assert a.grad.device.type == "cpu"
        assert b.grad.device == torch.device(device(1))
        assert c.grad.device == torch.device(device(0))
        torch.testing.assert_close(a.grad, b.detach().cpu())
        torch.testing.assert_close(b.grad.cpu(), a.detach())
        torch.testing.assert_close(c.grad.cpu(), c.detach().cpu().cos())

    def test_backward_waits_for_streams(self):
        x = torch.randn(100, device=DEVICE, requires_grad=True)
        s = target.device_module.Stream()
        with target.device_module.stream(s):
            y = (x * 3).sum()
            y.backward()
        torch.testing.assert_close(x.grad.cpu(), torch.full((100,), 3.0))

    def test_autograd_grad_and_double_backward(self):
        x = torch.randn(6, device=DEVICE, requires_grad=True)
        y = (x ** 3).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), x)
        torch.testing.assert_close(gg.cpu(), 6 * x.detach().cpu())


@pytest.mark.ops
@pytest.mark.openreg_only  # openreg runs device kernels on host threads
class TestDeviceThreadOpenMP:
    hw_classification = HW.ACCELERATOR

    # Two training steps; a hook on the product (run by autograd's device
    # thread) records that thread's OpenMP width after the first step's kernels.
    CODE = textwrap.dedent("""
        import threading, torch
        torch.set_num_threads(2)
        seen = []
        def step():
            x = torch.randn(64, 64, device="openreg", requires_grad=True)
            y = x @ x
            y.register_hook(lambda g: seen.append(
                (threading.current_thread() is not threading.main_thread(), torch.get_num_threads())))
            y.sum().backward()
        step()
        step()
        print("device thread:", seen[-1], "main:", torch.get_num_threads(), flush=True)
    """)

    def test_the_device_thread_runs_kernels_with_one_openmp_thread(self):
        # A second OpenMP pool on autograd's device thread would throttle
        # every pool of a 2-core process (docs/performance.md).
        p = run_python(self.CODE, timeout=120)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "device thread: (True, 1) main: 2" in p.stdout, p.stdout

    def test_keep_leaves_the_device_threads_pool(self):
        p = run_python(self.CODE, timeout=120, env={"OPENREG_DEVICE_THREAD_OMP": "keep"})
        assert p.returncode == 0, p.stderr[-3000:]
        assert "device thread: (True, 2) main: 2" in p.stdout, p.stdout

    # A graph replay queued behind an asynchronous copy from pinned memory (as
    # in the CUDA graphs recipe) runs on the runtime's stream worker
    # ("openreg_w0"; on an idle stream it runs on the calling thread): an
    # operator whose CPU kernel is written in Python (openreg runs it through
    # its fallback, which the capture records as a node; a kernel registered
    # for the device itself would run at capture, as on CUDA), after an
    # openreg kernel in the same graph, records that thread's OpenMP width
    # and name.
    REPLAY = textwrap.dedent("""
        import threading, torch
        torch.set_num_threads(2)
        seen, names = [], []
        lib = torch.library.Library("omp_probe", "DEF")
        lib.define("width(Tensor x) -> Tensor")
        def width(x):
            seen.append((threading.current_thread() is not threading.main_thread(),
                         torch.get_num_threads()))
            names.append(open(f"/proc/self/task/{threading.get_native_id()}/comm").read().strip())
            return x.clone()
        lib.impl("width", width, "CPU")
        lib.impl("width", lambda x: torch.empty_like(x), "Meta")
        x = torch.ones(4, device="openreg")
        g = torch.accelerator.Graph()
        with torch.openreg.graph(g):
            y = torch.ops.omp_probe.width(x * 2)
        host = torch.ones(1 << 24).pin_memory()
        big = torch.empty(1 << 24, device="openreg")
        big.copy_(host, non_blocking=True)   # 64 MiB: the stream is busy for a while
        g.replay()
        torch.openreg.synchronize()
        print("worker:", seen[-1], "main:", torch.get_num_threads(), y.cpu().tolist(), names[-1],
              flush=True)
    """)

    def test_the_stream_worker_keeps_the_intra_op_width(self):
        # (A large replay there needs both cores: docs/performance.md.)
        p = run_python(self.REPLAY, timeout=120)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "worker: (True, 2) main: 2 [2.0, 2.0, 2.0, 2.0] openreg_w0" in p.stdout, p.stdout

    # In a backward hook (run by autograd's device thread), a kernel whose
    # work is worth both cores (a fallback operator over 2^20 elements) and a
    # small one record their OpenMP width; the process's thread count after
    # the backward says whether the wide kernel's pool outlived it.
    WIDE = textwrap.dedent("""
        import os, torch
        torch.set_num_threads(2)
        lib = torch.library.Library("omp_probe", "DEF")
        lib.define("width(Tensor x) -> Tensor")
        seen = []
        def width(x):
            seen.append((x.numel(), torch.get_num_threads()))
            return x.clone()
        lib.impl("width", width, "CPU")
        lib.impl("width", lambda x: torch.empty_like(x), "Meta")
        big = torch.ones(1 << 20, device="openreg")
        small = torch.ones(1 << 10, device="openreg")
        def step(probe):
            x = torch.randn(64, 64, device="openreg", requires_grad=True)
            y = x @ x
            if probe:
                y.register_hook(lambda g: (torch.ops.omp_probe.width(big),
                                           torch.ops.omp_probe.width(small), None)[-1])
            y.sum().backward()
            torch.openreg.synchronize()
        step(False)
        before = len(os.listdir("/proc/self/task"))
        step(True)
        step(True)
        after = len(os.listdir("/proc/self/task"))
        print("widths:", seen[-2:], "threads:", after - before, "main:", torch.get_num_threads(),
              flush=True)
    """)

    def test_a_large_kernel_on_the_device_thread_runs_at_full_width_and_releases_its_pool(self):
        # The pool lives only as long as the kernel (KernelViewAllocation.cpp, WideKernel).
        p = run_python(self.WIDE, timeout=120)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "widths: [(1048576, 2), (1024, 1)] threads: 0 main: 2" in p.stdout, p.stdout

    # A compiled kernel (Inductor's launch ABI, as generated code calls it) launched
    # from a backward hook, on the device thread, and then from the main thread.
    COMPILED = textwrap.dedent("""
        import ctypes, os, torch, torch_openreg
        torch.set_num_threads(2)
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch_openreg.__file__), "lib",
                                       "libopenreg_inductor.so"))
        omp = ctypes.CDLL(None)
        KFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        seen = []
        body = KFN(lambda arg: seen.append(omp.omp_get_max_threads()))
        lib.orInductorLaunch.argtypes = [ctypes.c_int, ctypes.c_char_p, KFN, ctypes.c_void_p,
                                         ctypes.c_char_p, ctypes.c_size_t]
        err = ctypes.create_string_buffer(256)
        def launch():
            assert lib.orInductorLaunch(0, b"probe", body, None, err, 256) == 0, err.value
        def step():
            x = torch.randn(64, 64, device="openreg", requires_grad=True)
            y = x * 2
            y.register_hook(lambda g: (launch(), None)[-1])
            y.sum().backward()
            torch.openreg.synchronize()
        step()
        before = len(os.listdir("/proc/self/task"))
        step()
        after = len(os.listdir("/proc/self/task"))
        launch()
        print("compiled widths:", seen[-2:], "threads:", after - before, flush=True)
    """)

    def test_a_compiled_kernel_on_the_device_thread_runs_at_full_width(self):
        # Inductor decided which of its loops run in parallel (inductor_backend/csrc/launch.cpp).
        p = run_python(self.COMPILED, timeout=120)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "compiled widths: [2, 2] threads: 0" in p.stdout, p.stdout

    def test_one_runs_every_kernel_at_one_thread(self):
        p = run_python(self.WIDE, timeout=120, env={"OPENREG_DEVICE_THREAD_OMP": "one"})
        assert p.returncode == 0, p.stderr[-3000:]
        assert "widths: [(1048576, 1), (1024, 1)] threads: 0" in p.stdout, p.stdout
        p = run_python(self.COMPILED, timeout=120, env={"OPENREG_DEVICE_THREAD_OMP": "one"})
        assert p.returncode == 0, p.stderr[-3000:]
        assert "compiled widths: [1, 2]" in p.stdout, p.stdout

    def test_keep_runs_every_kernel_at_the_pools_width(self):
        p = run_python(self.WIDE, timeout=120, env={"OPENREG_DEVICE_THREAD_OMP": "keep"})
        assert p.returncode == 0, p.stderr[-3000:]
        assert "widths: [(1048576, 2), (1024, 2)]" in p.stdout, p.stdout

    def test_an_invalid_setting_fails_the_first_kernel_naming_it(self):
        p = run_python(
            "import torch\n"
            "try:\n"
            "    torch.ones(3, device='openreg') * 2\n"
            "except RuntimeError as e:\n"
            "    print('raised:', e)\n",
            timeout=120, env={"OPENREG_DEVICE_THREAD_OMP": "2"})
        assert p.returncode == 0, p.stderr[-3000:]
        assert ("raised: OPENREG_DEVICE_THREAD_OMP must be 'kernel' (the default), 'one' or "
                "'keep', got '2'") in p.stdout, p.stdout


def d64(*shape, requires_grad=True):
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    return torch.randn(*shape, dtype=torch.float64, generator=g).to(DEVICE).requires_grad_(requires_grad)


GRADCHECK_CASES = {
    "matmul": lambda: (torch.matmul, (d64(3, 4), d64(4, 2))),
    "bmm": lambda: (torch.bmm, (d64(2, 3, 4), d64(2, 4, 2))),
    "addmm": lambda: (torch.addmm, (d64(3, 2), d64(3, 4), d64(4, 2))),
    "linear": lambda: (F.linear, (d64(3, 4), d64(5, 4), d64(5))),
    "conv2d": lambda: (lambda x, w, b: F.conv2d(x, w, b, padding=1), (d64(1, 2, 5, 5), d64(3, 2, 3, 3), d64(3))),
    "conv_transpose2d": lambda: (F.conv_transpose2d, (d64(1, 2, 3, 3), d64(2, 3, 2, 2))),
    "softmax": lambda: (lambda x: F.softmax(x, -1), (d64(3, 5),)),
    "log_softmax": lambda: (lambda x: F.log_softmax(x, 0), (d64(3, 5),)),
    "layer_norm": lambda: (lambda x, w, b: F.layer_norm(x, (5,), w, b), (d64(3, 5), d64(5), d64(5))),
    "batch_norm": lambda: (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (d64(4, 3), d64(3), d64(3))),
    "group_norm": lambda: (lambda x: F.group_norm(x, 2), (d64(2, 4, 3),)),
    "gelu_tanh": lambda: (lambda x: F.gelu(x, approximate="tanh"), (d64(7),)),
    "silu_sigmoid_tanh": lambda: (lambda x: F.silu(x) + x.sigmoid() * x.tanh(), (d64(7),)),
    "pow_exp_log": lambda: (lambda x: (x.abs() + 1).log() * x.exp() + x.pow(2), (d64(6),)),
    "embedding": lambda: (lambda w: F.embedding(torch.tensor([[0, 2], [3, 2]], device=DEVICE), w), (d64(4, 3),)),
    "index_and_gather": lambda: (lambda x: x[torch.tensor([2, 0], device=DEVICE)].sum(0) + x.gather(1, torch.zeros(4, 1, dtype=torch.long, device=DEVICE)).sum(), (d64(4, 3),)),
    "index_put": lambda: (lambda x, v: x.index_put((torch.tensor([1, 3], device=DEVICE),), v), (d64(4, 2), d64(2, 2))),
    "cat_stack_split": lambda: (lambda a, b: torch.cat([a, b]).split(2)[1] + torch.stack([a, b]).sum(0)[:2], (d64(3, 2), d64(3, 2))),
    "reductions": lambda: (lambda x: x.sum(1) + x.mean(1) + x.amax(1) + x.std(1) + x.norm(dim=1), (d64(3, 4),)),
    "max_pool_avg_pool": lambda: (lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2), (d64(1, 1, 4, 4),)),
    "cross_entropy": lambda: (lambda x: F.cross_entropy(x, torch.tensor([1, 0, 2], device=DEVICE)), (d64(3, 4),)),
    "mse_smooth_l1": lambda: (lambda x, y: F.mse_loss(x, y) + F.smooth_l1_loss(x, y), (d64(5), d64(5))),
    "where_clamp": lambda: (lambda x: torch.where(x > 0, x, x * 0.1).clamp(-1, 1), (d64(8),)),
    "views": lambda: (lambda x: x.t().reshape(-1)[1:5].unsqueeze(0).expand(2, 4).flip(0), (d64(3, 4),)),
    "sdpa_math": lambda: (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), (d64(1, 2, 3, 4), d64(1, 2, 3, 4), d64(1, 2, 3, 4))),
}


@pytest.mark.ops
class TestGradcheck:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("name", sorted(GRADCHECK_CASES))
    def test_gradcheck_float64(self, name):
        fn, inputs = GRADCHECK_CASES[name]()
        assert all(t.device.type == DEVICE for t in inputs)
        assert gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.ops
class TestRecurrent:
    """ATen sends PrivateUse1 RNN cells to the fused kernels CUDA uses."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
    def test_multilayer_rnn_matches_cpu(self, cls):
        import copy

        torch.manual_seed(0)
        m = cls(4, 5, num_layers=2, batch_first=True, bidirectional=True)
        md = copy.deepcopy(m).to(DEVICE)
        x = torch.randn(3, 6, 4)
        y, _ = m(x)
        yd, _ = md(x.to(DEVICE))
        torch.testing.assert_close(yd.cpu(), y)
        y.square().sum().backward()
        yd.square().sum().backward()
        for (n, p), q in zip(m.named_parameters(), md.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, msg=n, rtol=1e-4, atol=1e-5)

    @pytest.mark.parametrize("cell", ["lstm", "gru"])
    def test_cell_gradcheck(self, cell):
        torch.manual_seed(0)
        m = (torch.nn.LSTMCell if cell == "lstm" else torch.nn.GRUCell)(3, 2).double().to(DEVICE)
        x, h = d64(2, 3), d64(2, 2)
        if cell == "lstm":
            c = d64(2, 2)
            fn = lambda x, h, c: m(x, (h, c))  # noqa: E731
            assert gradcheck(fn, (x, h, c), eps=1e-6, atol=1e-5)
        else:
            assert gradcheck(lambda x, h: m(x, h), (x, h), eps=1e-6, atol=1e-5)

    @pytest.mark.openreg_only  # the message is openreg's own (its fused-cell kernels)
    def test_fused_cell_shape_errors(self):
        g = torch.randn(2, 8, device=DEVICE)
        with pytest.raises(RuntimeError, match="gates must be \\[batch, 4 \\* hidden\\]"):
            torch.ops.aten._thnn_fused_lstm_cell(g, g, torch.randn(2, 3, device=DEVICE))
