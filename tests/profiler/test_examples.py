"""examples/profile_training.py runs and writes a Chrome trace that trace
viewers can open, with the device rows filled; tools/render_trace.py draws it."""

import json
import pathlib
import subprocess
import sys

import pytest
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run of the example: (its stdout, the trace path)."""
    trace = tmp_path_factory.mktemp("profile") / "trace.json"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "profile_training.py"), str(trace),
                        "--steps", "4"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout, trace


@pytest.mark.profiler
class TestProfileTrainingExample:
    hw_classification = HW.ACCELERATOR

    def test_prints_the_table_and_the_trace_path(self, run):
        out, trace = run
        assert "recorded steps 2..3 of 4" in out
        assert "Self OPENREG" in out  # key_averages has the device-time columns
        assert f"Chrome trace: {trace}" in out

    def test_trace_is_valid_json_with_linked_device_work(self, run):
        _, trace = run
        doc = json.loads(trace.read_text())  # what Perfetto and chrome://tracing load
        events = doc["traceEvents"]
        kernels = [e for e in events if e.get("cat") == "kernel"]
        assert kernels, "no device kernels in the trace"
        # Named by operator ("mm", "aten::mm" or "mm.out" alike).
        ops = {e["name"].removeprefix("aten::").split(".")[0] for e in kernels}
        assert {"mm", "convolution_overrideable", "convolution_backward_overrideable"} <= ops
        assert all(e["dur"] > 0 and "External id" in e["args"] for e in kernels)
        copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
        assert copies and all(e["args"]["bytes"] > 0 for e in copies)
        # The schedule recorded steps 2 and 3 only; each range marker is on a device row.
        names = {e["name"] for e in events if e.get("cat") == "gpu_user_annotation"}
        assert {"step 2", "step 3"} <= names and "step 1" not in names
        assert {"ProfilerStep#2", "forward", "backward", "optimizer step"} <= {
            e["name"] for e in events if e.get("cat") == "user_annotation"}
        # Launch -> kernel arrows: every flow end has its start.
        flows = [e for e in events if e.get("cat") == "ac2g"]
        assert {e["id"] for e in flows if e["ph"] == "f"} <= {e["id"] for e in flows if e["ph"] == "s"}
        # profile_memory=True: openreg allocations (c10::DeviceType::PrivateUse1 == 20).
        assert any(e.get("name") == "[memory]" and e["args"].get("Device Type") == 20 for e in events)

    def test_render_trace_draws_it(self, run, tmp_path):
        pytest.importorskip("matplotlib")
        _, trace = run
        png = tmp_path / "trace.png"
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "render_trace.py"), str(trace), str(png)],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "1 memory rows" in r.stdout and " 0 arrows" not in r.stdout
