"""Compile modes and guards: fullgraph, dynamic shapes, recompiles, device
index, autocast, max-autotune, the FX graph cache across processes and compile
worker processes (cpp_wrapper=True: test_cpp_wrapper.py)."""

import pytest
import torch._dynamo.testing
import torch
import torch.nn as nn

from tests._subprocess import run_python
from tests.target import DEVICE, HW, device

from ._helpers import assert_inductor_code, compile_and_run


def close(a, b, tol=1e-5):
    torch.testing.assert_close(a.cpu(), b.cpu(), atol=tol, rtol=tol)


def fn(x):
    return (x * 2).softmax(-1) + x.sum()


@pytest.mark.compile
class TestGuards:
    hw_classification = HW.ACCELERATOR

    def test_shape_change_recompiles_once_then_dynamic(self):
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
        f = torch.compile(fn, backend=counter, fullgraph=True)
        for n in (4, 4, 6, 9, 13):  # automatic dynamic after the first change
            x = torch.randn(3, n)
            close(f(x.to(DEVICE)), fn(x))
        assert counter.frame_count == 2, counter.frame_count

    def test_dynamic_true_compiles_once(self):
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
        f = torch.compile(fn, backend=counter, dynamic=True)
        for n in (3, 5, 8):
            x = torch.randn(n, n + 1)
            close(f(x.to(DEVICE)), fn(x))
        assert counter.frame_count == 1

    def test_device_index_is_guarded(self):
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
        f = torch.compile(fn, backend=counter)
        x = torch.randn(4, 4)
        y0 = f(x.to(device(0)))
        y1 = f(x.to(device(1)))
        assert y0.device == torch.device(device(0)) and y1.device == torch.device(device(1))
        close(y0, fn(x))
        close(y1, fn(x))
        assert counter.frame_count == 2  # a new device index recompiles
        f(x.to(device(1)))
        assert counter.frame_count == 2


@pytest.mark.compile
class TestModes:
    hw_classification = HW.ACCELERATOR

    def test_autocast_bf16(self):
        m = nn.Linear(16, 16).to(DEVICE)
        x = torch.randn(4, 16, device=DEVICE)

        def step(x):
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                return m(x).relu() * 2

        out, codes, counter = compile_and_run(step, x, fullgraph=True)
        assert_inductor_code(codes)
        assert out.dtype == torch.bfloat16
        close(out.float(), step(x).float())

    def test_max_autotune_no_cudagraphs(self):
        a, b = torch.randn(64, 32), torch.randn(32, 16)
        f = lambda a, b: (a @ b).relu() + 1  # noqa: E731
        out, codes, _ = compile_and_run(f, a.to(DEVICE), b.to(DEVICE),
                                        mode="max-autotune-no-cudagraphs")
        assert_inductor_code(codes)
        close(out, f(a, b), 1e-4)

    @pytest.mark.slow
    def test_fx_graph_cache_hit_in_a_second_process(self, tmp_path):
        code = (
            "import torch\n"
            "from torch._dynamo.utils import counters\n"
            "from tests.target import DEVICE\n"
            "f = torch.compile(lambda x: (x.cos() * 3).sum(0) + 1)\n"
            "x = torch.arange(12., device=DEVICE).reshape(3, 4)\n"
            "torch.testing.assert_close(f(x).cpu(), (x.cpu().cos() * 3).sum(0) + 1)\n"
            "print('hits', counters['inductor']['fxgraph_cache_hit'],"
            " 'misses', counters['inductor']['fxgraph_cache_miss'])\n")
        env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
        first = run_python(code, timeout=300, env=env)
        assert first.returncode == 0, first.stderr
        assert "hits 0 misses 1" in first.stdout, first.stdout
        second = run_python(code, timeout=300, env=env)
        assert second.returncode == 0, second.stderr
        assert "hits 1 misses 0" in second.stdout, second.stdout

    @pytest.mark.slow
    def test_compile_worker_processes_build_the_kernels(self, tmp_path):
        # Parallel compilation: kernels are built in Inductor's subprocess pool
        # (the Worker serves device properties cached before the pool starts).
        code = (
            "import torch\n"
            "from torch._inductor.async_compile import get_compile_threads\n"
            "from tests.target import DEVICE\n"
            "assert get_compile_threads() == 2\n"
            "f = torch.compile(lambda x, y: ((x + y).relu() @ y).sigmoid() * x.sum())\n"
            "x, y = torch.randn(8, 8), torch.randn(8, 8)\n"
            "out = f(x.to(DEVICE), y.to(DEVICE))\n"
            "torch.testing.assert_close(out.cpu(), ((x + y).relu() @ y).sigmoid() * x.sum())\n"
            "print('ok')\n")
        r = run_python(code, timeout=300, env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path),
                                               "TORCHINDUCTOR_COMPILE_THREADS": "2"})
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr
