"""The peer-suite runner (tools/pytorch_suite.py, docs/pytorch-suite.md): twins,
the expectations file's rules, the triage of each outcome, and a whole run over
a small PyTorch-style test tree (instantiate_device_type_tests) with a test of
each kind: passing, failing on both devices, failing on the device alone,
expected, flaky, skipped on the device only, left out, and a file that times
out. PyTorch's own files are CI's run (``make check-pytorch-suite``), not
repeated here."""

import json
import pathlib
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._subprocess import REPO, make_env
from tests.target import DEVICE, HW

# openreg's own tool (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = pathlib.Path(REPO)
sys.path.insert(0, str(ROOT / "tools"))
import pytorch_suite as ps  # noqa: E402


def torch_testing_file():
    import torch.testing._internal.common_dtype as m

    return m.__file__


def expectations(tmp_path, entries):
    path = tmp_path / "expect.json"
    path.write_text(json.dumps({"expected": entries}))
    return path


GAPS = ROOT / "docs" / "pytorch-gaps.md"


@pytest.mark.ci
class TestTwins:
    hw_classification = HW.GENERIC

    @pytest.mark.parametrize("nodeid, cpu", [
        ("test_x.py::TestFooPRIVATEUSE1::test_y_openreg_float32",
         "test_x.py::TestFooCPU::test_y_cpu_float32"),
        ("test_x.py::TestFooOPENREG::test_y_openreg", "test_x.py::TestFooCPU::test_y_cpu"),
        # the device's name only as a word of its own, the last one
        ("test_x.py::TestFooPRIVATEUSE1::test_openreg_alias_openreg_int8",
         "test_x.py::TestFooCPU::test_openreg_alias_cpu_int8"),
        # a class that is not device-generic is its own twin
        ("test_x.py::TestPlain::test_y", "test_x.py::TestPlain::test_y"),
    ])
    def test_twin(self, nodeid, cpu):
        assert ps.twin(nodeid, "openreg") == cpu

    @given(base=st.from_regex(r"test_[a-z]{1,8}(_[a-z0-9]{1,6}){0,3}", fullmatch=True),
           dtype=st.sampled_from(["", "_float32", "_int64", "_complex64"]),
           suffix=st.sampled_from(["PRIVATEUSE1", "FOO"]))
    def test_twin_of_any_name(self, base, dtype, suffix):
        nodeid = f"test_a.py::TestBar{suffix}::{base}_foo{dtype}"
        assert ps.twin(nodeid, "foo") == f"test_a.py::TestBarCPU::{base}_cpu{dtype}"


@pytest.mark.ci
class TestExpectations:
    hw_classification = HW.GENERIC

    def test_the_projects_file_is_valid(self):
        tests = ROOT.parent / "shared" / "pytorch-tests"
        entries = ps.load_expectations(ps.EXPECTATIONS, tests if tests.is_dir() else None)
        assert all(e.kind in ps.KINDS for e in entries)

    @pytest.mark.parametrize("entry, error", [
        ({"tests": "a.py::T::t", "kind": "openreg-bug", "reason": "the kernel is missing"},
         "kind 'openreg-bug' is not one of pytorch-gap, cuda-only, resource"),
        ({"tests": "a.py::T::t", "kind": "resource"}, "a reason of a sentence is required"),
        ({"tests": "t_only", "kind": "resource", "reason": "needs 80 GB of memory"},
         "'tests' must be node ids"),
        ({"tests": "a.py::T::t", "kind": "pytorch-gap", "reason": "a gap of PyTorch's"},
         "names the number of a gap"),
        ({"tests": "a.py::T::t", "kind": "pytorch-gap", "gap": 999, "reason": "a gap of PyTorch's"},
         "999 is none"),
        ({"tests": "a.py::T::t", "kind": "cuda-only", "reason": "the test branches on cuda"},
         "cites the line"),
        ({"tests": "a.py::T::t", "kind": "cuda-only", "cite": "a.py:1",
          "reason": "the test branches on cuda"}, "a.py:1 does not say cuda"),
        ({"tests": "a.py::T::t", "kind": "cuda-only", "cite": "a.py:2", "run": False,
          "reason": "the test branches on cuda"}, "only a resource entry may say"),
    ])
    def test_refused(self, tmp_path, entry, error):
        (tmp_path / "a.py").write_text("import torch\nif device == 'cuda': pass\n")
        with pytest.raises(ps.ExpectationsError, match=".*" + error.replace("(", r"\(")
                           .replace(")", r"\)")):
            ps.load_expectations(expectations(tmp_path, [entry]), tmp_path, GAPS)

    def test_accepted(self, tmp_path):
        (tmp_path / "a.py").write_text("import torch\nif device == 'cuda': pass\n")
        entries = ps.load_expectations(expectations(tmp_path, [
            {"tests": "a.py::T::t", "kind": "pytorch-gap", "gap": 8, "reason": "gap 8's symptom"},
            {"tests": ["a.py::T*::u_*"], "kind": "cuda-only", "cite": "a.py:2",
             "reason": "the test returns early on cuda"},
            {"tests": "a.py::T::v", "kind": "resource", "run": False,
             "reason": "takes ten minutes on two cores"},
        ]), tmp_path, GAPS)
        assert [e.kind for e in entries] == ["pytorch-gap", "cuda-only", "resource"]
        assert entries[1].matches("a.py::TFOO::u_foo_int8") and not entries[1].matches("a.py::T::t")
        assert entries[2].run is False

    def test_command_line(self, tmp_path):
        bad = expectations(tmp_path, [{"tests": "a.py::T::t", "kind": "flaky", "reason": "x" * 20}])
        r = subprocess.run([sys.executable, "tools/pytorch_suite.py", "check-expectations",
                            str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "kind 'flaky' is not one of" in r.stderr


def run_of(results, running=None, rc=1):
    return ps.Run(results, running, rc, 1.0, "log")


@pytest.mark.ci
class TestTriage:
    hw_classification = HW.GENERIC

    def test_each_outcome(self):
        F = "f.py::TPRIVATEUSE1::"
        C = "f.py::TCPU::"
        first = run_of({F + "test_ok_foo": ("passed", ""),
                        F + "test_both_foo": ("failed", "AssertionError: 1 != 2"),
                        F + "test_mine_foo": ("failed", "RuntimeError: boom"),
                        F + "test_known_foo": ("failed", "OutOfMemoryError"),
                        F + "test_racy_foo": ("failed", "timing"),
                        F + "test_gap_foo": ("skipped", "no bar on this device"),
                        F + "test_cpu_only_foo": ("skipped", "Only runs on cpu"),
                        F + "test_cuda_only_foo": ("skipped", "Only runs on cuda"),
                        F + "test_xf_foo": ("xfailed", "")})
        again = run_of({F + "test_both_foo": ("failed", ""), F + "test_mine_foo": ("failed", ""),
                        F + "test_known_foo": ("failed", ""), F + "test_racy_foo": ("passed", "")})
        cpu = run_of({C + "test_both_cpu": ("failed", "AssertionError: 1 != 2"),
                      C + "test_mine_cpu": ("passed", ""), C + "test_known_cpu": ("passed", ""),
                      C + "test_gap_cpu": ("passed", ""), C + "test_cpu_only_cpu": ("passed", ""),
                      C + "test_cuda_only_cpu": ("skipped", "Only runs on cuda")})
        exp = [ps.Expectation(["f.py::T*::test_known_*"], "resource", "needs 40 GB of memory")]
        r = ps.triage_file("f.py", "foo", first, again, cpu, exp)
        assert r.passed == [F + "test_ok_foo"] and r.xfailed == [F + "test_xf_foo"]
        assert [f["test"] for f in r.failed] == [F + "test_mine_foo"]
        assert r.failed[0]["cpu"] == "passed"
        assert [f["test"] for f in r.excused] == [F + "test_both_foo"]
        assert [f["test"] for f in r.expected] == [F + "test_known_foo"]
        assert r.expected[0]["kind"] == "resource"
        assert [f["test"] for f in r.flaky] == [F + "test_racy_foo"]
        ran_on_cpu = {s["test"]: s["reason"] for s in r.skipped if s["cpu"] != "skipped"}
        assert ran_on_cpu == {F + "test_gap_foo": "no bar on this device",
                              F + "test_cpu_only_foo": "Only runs on cpu"}
        assert r.counts["skipped_run_on_cpu"] == 2 and r.counts["timed_out"] == 0

    def test_a_timeout_names_the_running_test_and_counts_the_rest(self):
        first = run_of({"f.py::TFOO::test_a_foo": ("passed", "")}, running="f.py::TFOO::test_b_foo",
                       rc="timeout")
        r = ps.triage_file("f.py", "foo", first, None, None, [], collected=5)
        assert r.timed_out == "f.py::TFOO::test_b_foo"
        assert r.counts["timed_out"] == 1 and r.counts["not_run"] == 3
        assert [f["test"] for f in r.failed] == ["f.py::TFOO::test_b_foo"]
        assert "timed out" in r.failed[0]["message"]

    def test_a_twin_that_does_not_exist(self):
        first = run_of({"f.py::TFOO::test_a_foo": ("failed", "x")})
        r = ps.triage_file("f.py", "foo", first, run_of({}), run_of({}), [])
        assert r.failed[0]["cpu"] == "not found"


TREE = {
    "test_mixed.py": '''
        import os, pathlib, time, unittest
        import torch
        from torch.testing._internal.common_device_type import (
            instantiate_device_type_tests, onlyCPU)
        from torch.testing._internal.common_utils import TestCase, run_tests

        class TestMixed(TestCase):
            def test_ok(self, device):
                self.assertEqual(torch.ones(2, device=device).sum().item(), 2)

            def test_both(self, device):
                self.assertEqual(torch.ones(2, device=device).sum().item(), 3)

            def test_mine(self, device):
                if torch.device(device).type != "cpu":
                    raise RuntimeError("only the device fails this")

            def test_known(self, device):
                if torch.device(device).type == "cuda":
                    return  # the line the expectation cites
                if torch.device(device).type != "cpu":
                    raise RuntimeError("a CPU index tensor")

            def test_racy(self, device):
                mark = pathlib.Path(os.environ["MARK_DIR"]) / "racy"
                if torch.device(device).type != "cpu" and not mark.exists():
                    mark.touch()
                    raise AssertionError("first run only")

            def test_hidden(self, device):
                if torch.device(device).type != "cpu":
                    raise unittest.SkipTest("no bar on this device")

            @onlyCPU
            def test_cpu_only(self, device):
                pass

            def test_long(self, device):
                time.sleep(600)

        instantiate_device_type_tests(TestMixed, globals())

        if __name__ == "__main__":
            run_tests()
    ''',
    "test_hangs.py": '''
        import time
        import torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests
        from torch.testing._internal.common_utils import TestCase

        class TestHangs(TestCase):
            def test_a_first(self, device):
                pass

            def test_b_hangs(self, device):
                if torch.device(device).type != "cpu":
                    time.sleep(600)

            def test_c_never(self, device):
                pass

        instantiate_device_type_tests(TestHangs, globals())
    ''',
    "test_plain.py": "def test_not_device_generic():\n    pass\n",
    # A file of another PyTorch release: it imports a name this torch lacks.
    "test_other_release.py": (
        "from torch.testing._internal.common_device_type import instantiate_device_type_tests\n"
        "from torch.testing._internal.common_dtype import a_name_of_a_later_release\n"),
}


@pytest.mark.ci
@pytest.mark.slow
class TestRun:
    """A whole run over TREE, two files at once (about 50 s: the hanging file's
    30 s timeout, and every step is a pytest process that imports torch)."""

    hw_classification = HW.ACCELERATOR

    def test_run(self, tmp_path):
        tree = tmp_path / "test"
        tree.mkdir()
        for name, text in TREE.items():
            (tree / name).write_text(textwrap.dedent(text))
        known_line = next(i for i, line in enumerate(TREE["test_mixed.py"].splitlines())
                          if "the line the expectation cites" in line)
        exp = expectations(tmp_path, [
            {"tests": "test_mixed.py::TestMixed*::test_known_*", "kind": "cuda-only",
             "cite": f"test_mixed.py:{known_line}",
             "reason": "the test returns before its CPU index tensors on CUDA only"},
            {"tests": "test_mixed.py::TestMixed*::test_long_*", "kind": "resource", "run": False,
             "reason": "sleeps for ten minutes, as a test sized for a GPU"},
        ])
        out = tmp_path / "out"
        marks = tmp_path / "marks"
        marks.mkdir()
        r = subprocess.run(
            [sys.executable, "tools/pytorch_suite.py", "run", "--tests", str(tree),
             "--python", sys.executable, "--out", str(out), "--expectations", str(exp),
             "--timeout", "30", "--jobs", "2"],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
            env=dict(make_env(), MARK_DIR=str(marks)))
        assert r.returncode == 1, r.stdout + r.stderr
        report = json.loads((out / "report.json").read_text())
        # only the files that instantiate device-generic tests
        assert [f["file"] for f in report["files"]] == ["test_hangs.py", "test_mixed.py",
                                                        "test_other_release.py"]
        assert report["not_importable"] == [{
            "file": "test_other_release.py",
            "reason": "ImportError: cannot import name 'a_name_of_a_later_release' from "
                      "'torch.testing._internal.common_dtype' "
                      + f"({torch_testing_file()})"}]
        P = "test_mixed.py::TestMixedPRIVATEUSE1::"

        def names(key):
            return sorted(f["test"].split("::")[-1] for f in report[key])

        assert names("failed") == [f"test_b_hangs_{DEVICE}", f"test_mine_{DEVICE}"]
        mine = next(f for f in report["failed"] if f["test"] == f"{P}test_mine_{DEVICE}")
        assert mine["cpu"] == "passed" and "only the device fails this" in mine["message"]
        assert names("excused") == [f"test_both_{DEVICE}"]
        assert names("expected") == [f"test_known_{DEVICE}", f"test_long_{DEVICE}"]
        assert {f["test"].split("::")[-1]: f.get("ran", True) for f in report["expected"]} == \
            {f"test_known_{DEVICE}": True, f"test_long_{DEVICE}": False}
        assert names("flaky") == [f"test_racy_{DEVICE}"]
        assert report["timed_out"] == [{"file": "test_hangs.py",
                                        "test": f"test_hangs.py::TestHangsPRIVATEUSE1::"
                                                f"test_b_hangs_{DEVICE}"}]
        assert report["skip_reasons_run_on_cpu"] == {"no bar on this device": 1,
                                                     "Only runs on cpu": 1}
        hangs = next(f for f in report["files"] if f["file"] == "test_hangs.py")
        assert hangs["returncode"] == "timeout" and hangs["counts"]["not_run"] == 1
        assert report["totals"]["passed"] == 2  # test_ok, test_a_first
        assert report["conclusion"] == "failure"
        assert report["device"] == DEVICE
        # the JUnit file: a defect is a failure, the rest say why they are not
        cases = {c.get("name"): c for c in ET.parse(out / "junit.xml").iter("testcase")}
        assert cases[f"test_mine_{DEVICE}"].find("failure") is not None
        assert "excused" in cases[f"test_both_{DEVICE}"].find("skipped").get("message")
        assert "cuda-only" in cases[f"test_known_{DEVICE}"].find("skipped").get("message")
        assert cases[f"test_racy_{DEVICE}"].find("failure") is None
        # pytest's own JUnit of the device run, and the summary line
        assert (out / "test_mixed.xml").exists()
        assert "2 defects, 1 excused" in r.stdout and "TIMEOUT test_hangs.py" in r.stdout
        # the timed-out file's process group is gone
        ps_out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert str(tree) not in ps_out and "test_hangs.py" not in ps_out
