"""Deployment on openreg: ``torch.export`` then AOTInductor
(``torch._inductor.aoti_compile_and_package``), loaded from Python
(``aoti_load_package``) and from a C++ program without Python
(examples/aoti_cpp). Results are compared with eager openreg and with the CPU,
within the tolerances of the other compile tests."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch
import torch.nn as nn

from tests._subprocess import run_python
from torch_openreg.testing import recorded_kernel_records
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOL = 1e-5


def close(a, b, tol=TOL):
    torch.testing.assert_close(a.cpu(), b.cpu(), atol=tol, rtol=tol)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10))


def bn_model():
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 8))
    m.train()
    for _ in range(3):  # running statistics that are not the initial ones
        m(torch.randn(64, 16))
    return m.eval()


def linspace_input(rows=4, cols=32, device="openreg"):
    """The input examples/aoti_cpp/main.cpp builds."""
    return torch.linspace(-1.0, 1.0, rows * cols).reshape(rows, cols).to(device)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """The packages the tests share, compiled once: name -> path."""
    d = tmp_path_factory.mktemp("aoti")
    out = {}
    with torch.no_grad():
        m = mlp().to("openreg")
        ep = torch.export.export(m, (linspace_input(),))
        out["mlp"] = torch._inductor.aoti_compile_and_package(
            ep, package_path=str(d / "mlp.pt2"))
        b = torch.export.Dim("batch", min=1, max=128)
        bn = bn_model().to("openreg")
        ep = torch.export.export(bn, (torch.randn(8, 16, device="openreg"),),
                                 dynamic_shapes=({0: b},))
        out["bn_dynamic"] = torch._inductor.aoti_compile_and_package(
            ep, package_path=str(d / "bn_dynamic.pt2"))
    return out


@pytest.mark.compile
class TestAOTInductorPython:
    hw_classification = HW.ACCELERATOR

    def test_static_mlp_equals_eager_and_cpu(self, packages):
        model = torch._inductor.aoti_load_package(packages["mlp"])
        x = linspace_input()
        with torch.no_grad():
            y = model(x)
            close(y, mlp().to("openreg")(x))
            close(y, mlp()(x.cpu()))
        assert y.device == torch.device("openreg:0")

    def test_package_holds_no_build_tree_or_openreg_dependency(self, packages):
        with zipfile.ZipFile(packages["mlp"]) as z:
            libs = [n for n in z.namelist() if n.endswith(".so")]
            assert libs, z.namelist()
            data = z.read(libs[0])
        tmp = os.path.join(os.path.dirname(packages["mlp"]), "model.so")
        with open(tmp, "wb") as f:
            f.write(data)
        dyn = subprocess.run(["readelf", "-d", tmp], capture_output=True, text=True,
                             check=True).stdout
        needed = [line.split("[")[1].rstrip("]") for line in dyn.splitlines() if "NEEDED" in line]
        assert "libtorch_cpu.so" in needed, needed
        assert not any("openreg" in n or "occl" in n for n in needed), needed
        assert "RPATH" not in dyn and "RUNPATH" not in dyn, dyn
        # The openreg symbols come from the process (libopenreg_aoti.so).
        syms = subprocess.run(["nm", "-D", "--undefined-only", tmp], capture_output=True,
                              text=True, check=True).stdout
        assert "orInductorLaunch" in syms, syms

    def test_dynamic_batch_with_batchnorm_buffers(self, packages):
        model = torch._inductor.aoti_load_package(packages["bn_dynamic"])
        ref = bn_model()
        with torch.no_grad():
            for n in (1, 5, 8, 77, 128):
                x = torch.randn(n, 16)
                close(model(x.to("openreg")), ref(x))

    def test_runs_on_the_current_non_default_stream(self, packages):
        model = torch._inductor.aoti_load_package(packages["mlp"])
        x = linspace_input()
        ref = mlp().to("openreg")
        s = torch.openreg.Stream()
        s.wait_stream(torch.openreg.current_stream())
        with recorded_kernel_records() as records:  # which stream ran what
            with torch.no_grad():
                x.add(0)  # a kernel on the default stream
                with torch.openreg.stream(s):
                    x.add(0)  # a kernel on s
                    y = model(x)
                    y_ref = ref(x)
            torch.openreg.current_stream().wait_stream(s)
            close(y, y_ref)
        default, side = records[0]["stream"], records[1]["stream"]
        assert default != side
        compiled = [r for r in records if r["name"].startswith("cpp_fused")]
        assert compiled, [r["name"] for r in records]
        assert {r["stream"] for r in compiled} == {side}, records
        # Everything after the first kernel ran on s: the package's kernels
        # (compiled ones and extern operators) and eager's reference.
        assert {r["stream"] for r in records[1:]} == {side}, records

    def test_an_explicit_stream_handle_is_honoured(self, packages):
        """The loader's run(inputs, stream_handle), as a C++ caller passes a
        cudaStream_t: here the orStream_t of a torch stream, in a capsule."""
        import ctypes

        capsule_new = ctypes.pythonapi.PyCapsule_New
        capsule_new.restype = ctypes.py_object
        capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        model = torch._inductor.aoti_load_package(packages["mlp"])
        x = linspace_input()
        s = torch.openreg.Stream()
        s.wait_stream(torch.openreg.current_stream())
        with recorded_kernel_records() as records:
            with torch.no_grad():
                x.add(0)  # the current (default) stream
                (y,) = model.loader.run([x], capsule_new(s.native_handle, None, None))
            assert torch.openreg.current_stream() == torch.openreg.default_stream()
        assert len({r["stream"] for r in records[1:]}) == 1, records
        assert records[1]["stream"] != records[0]["stream"], records
        with torch.no_grad():
            close(y, mlp().to("openreg")(x))
        with pytest.raises(RuntimeError, match="is not a stream of openreg:0"):
            model.loader.run([x], capsule_new(12345, None, None))

    def test_compiled_on_openreg0_loaded_on_openreg1(self, packages):
        model = torch._inductor.aoti_load_package(packages["mlp"], device_index=1)
        x = linspace_input(device="openreg:1")
        with torch.no_grad():
            y = model(x)
        assert y.device == torch.device("openreg:1")
        close(y, mlp()(x.cpu()))

    def test_inputs_on_another_device_are_refused(self, packages):
        model = torch._inductor.aoti_load_package(packages["mlp"])
        with pytest.raises(ValueError, match=r"runs on openreg:0, but input 0 is on cpu"):
            model(linspace_input(device="cpu"))
        with pytest.raises(ValueError, match=r"runs on openreg:0, but input 0 is on openreg:1"):
            model(linspace_input(device="openreg:1"))

    def test_loading_on_a_missing_device_is_refused(self, packages):
        with pytest.raises(RuntimeError, match=r"cannot load the package on openreg:9: 2 openreg"):
            torch._inductor.aoti_load_package(packages["mlp"], device_index=9)

    def test_weights_loaded_separately(self, tmp_path):
        m = mlp().to("openreg")
        x = linspace_input()
        ep = torch.export.export(m, (x,))
        path = torch._inductor.aoti_compile_and_package(
            ep, package_path=str(tmp_path / "noweights.pt2"),
            inductor_configs={"aot_inductor.package_constants_in_so": False})
        model = torch._inductor.aoti_load_package(path)
        fqns = model.get_constant_fqns()
        assert sorted(fqns) == sorted(n for n, _ in m.named_parameters())
        weights = {n: p.detach().clone() for n, p in m.named_parameters()}
        # Copying updates: AOTInductor's runtime copies with host memcpy for
        # out-of-tree devices; refused with the reason, nothing written.
        with pytest.raises(NotImplementedError, match="user_managed=True"):
            model.load_constants(weights, check_full_update=True)
        model.load_constants(weights, check_full_update=True, user_managed=True)
        with torch.no_grad():
            close(model(x), m(x))
            # In place: the caller's tensors are the model's weights.
            weights["3.bias"].add_(1.0)
            close(model(x), m(x) + 1.0)


@pytest.mark.compile
class TestAOTInductorErrors:
    hw_classification = HW.ACCELERATOR

    def test_cpu_package_given_openreg_inputs_fails_clearly(self, tmp_path):
        torch.manual_seed(0)
        f = nn.Sequential(nn.ReLU())  # a generated kernel first: it would read device memory
        x = torch.randn(4, 8)
        ep = torch.export.export(f, (x,))
        path = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "cpu.pt2"))
        model = torch._inductor.aoti_load_package(path)
        close(model(x), x.relu())
        with pytest.raises(ValueError, match=r"compiled for the CPU, but input 0 is on openreg:0"):
            model(x.to("openreg"))

    def test_openreg_package_without_openreg_fails_clearly(self, packages):
        code = (f"import torch\n"
                f"torch._inductor.aoti_load_package({packages['mlp']!r})\n")
        r = run_python(code, timeout=120, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
        assert r.returncode == 1, r.stderr
        assert "RuntimeError: Unsupported device key found: openreg" in r.stderr, r.stderr


@pytest.mark.compile
class TestAOTInductorCpp:
    """examples/aoti_cpp: the package run by a C++ program, no Python."""
    hw_classification = HW.ACCELERATOR

    def test_cpp_program_matches_python(self, packages, tmp_path):
        # The venv's cmake (requirements-dev.txt), whether or not .venv/bin is on PATH.
        cmake = os.path.join(os.path.dirname(sys.executable), "cmake")
        if not os.path.exists(cmake):
            cmake = shutil.which("cmake")
        assert cmake, "cmake is a build requirement (requirements-dev.txt)"
        import torch_openreg

        build = tmp_path / "build"
        subprocess.run(
            [cmake, "-S", os.path.join(ROOT, "examples", "aoti_cpp"), "-B", str(build),
             f"-DTORCH_DIR={os.path.dirname(torch.__file__)}",
             f"-DOPENREG_DIR={os.path.dirname(torch_openreg.__file__)}"],
            check=True, capture_output=True, timeout=300)
        subprocess.run([cmake, "--build", str(build), "-j", "2"], check=True,
                       capture_output=True, timeout=600)
        exe = str(build / "run_package")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        model = torch._inductor.aoti_load_package(packages["mlp"])
        for device in (0, 1):
            r = subprocess.run([exe, packages["mlp"], str(device)], capture_output=True,
                               text=True, timeout=120, env=env)
            assert r.returncode == 0, r.stderr
            lines = r.stdout.splitlines()
            assert lines[0] == f"output 0 openreg:{device} [4, 10]", lines[0]
            got = torch.tensor([float(v) for v in lines[1:]], dtype=torch.float64).reshape(4, 10)
            with torch.no_grad():
                expected = model(linspace_input())
            close(got.float(), expected)
        # The device comes from the arguments: a missing one is a clear error.
        r = subprocess.run([exe, packages["mlp"], "7"], capture_output=True, text=True,
                           timeout=120, env=env)
        assert r.returncode == 1
        assert "cannot load the package on openreg:7" in r.stderr, r.stderr
