"""Per-process settings, read once at initialisation, so exercised in child interpreters:
strict memory (``OPENREG_STRICT_MEMORY``), device count and capacity.

Each child starts from the default configuration (``clean_openreg_env=True``)
plus the variables a test sets."""

import json
import os
import re

import pytest

from tests._subprocess import run_python
from tests.runtime._helpers import CHILD_PRELUDE, CHILD_PRELUDE_WITH_TORCH
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


# ---------------------------------------------------------------- strict memory
READ_DEVICE_POINTER = r"""
p = rt.malloc(4096)
rt.memset(p, 1, 4096)
print(json.dumps({"ptr": p, "offset": rt.kernel_view_offset(0),
                  "strict": rt.get_device_properties(0)["strict_memory"]}), flush=True)
if os.environ.get("PROBE_WRITE"):
    ctypes.memset(p + 8, 2, 4)
value = ctypes.c_int.from_address(p + 8).value
print(json.dumps({"value": value}), flush=True)
"""


@pytest.mark.runtime
class TestStrictMemory:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("prelude, write", [
        (CHILD_PRELUDE, ""),
        # The sanitizer runs (make check-asan, check-tsan) test their own
        # torch-free build; this child would load the venv's package instead,
        # which CI may be reinstalling beside them (a relay job's build).
        pytest.param(CHILD_PRELUDE_WITH_TORCH, "", marks=pytest.mark.skipif(
            bool(os.environ.get("OPENREG_TEST_SANITIZER")),
            reason="loads the venv's package, not the sanitizer build under test")),
        (CHILD_PRELUDE, "1"),
    ], ids=["read", "read_with_torch", "write"])
    def test_host_access_to_device_memory_faults(self, prelude, write):
        res = run_python(prelude + READ_DEVICE_POINTER, env={"PROBE_WRITE": write}, timeout=60,
                         clean_openreg_env=True)
        assert res.returncode == -11, (res.returncode, res.stderr)
        first = json.loads(res.stdout.strip().splitlines()[0])
        assert first["strict"] is True and first["offset"] != 0
        assert len(res.stdout.strip().splitlines()) == 1  # the read never returned
        assert "illegal host access to device memory at address" in res.stderr
        m = re.search(r"at address (0x[0-9a-f]+) \(device openreg:0, offset (\d+)", res.stderr)
        assert m, res.stderr
        assert int(m.group(1), 16) == first["ptr"] + 8
        assert hex(first["ptr"] + 8)[2:] in res.stderr
        assert "OPENREG_STRICT_MEMORY=0" in res.stderr

    def test_non_strict_read_succeeds(self):
        for write, expected in [("", 0x01010101), ("1", 0x02020202)]:
            res = run_python(CHILD_PRELUDE + READ_DEVICE_POINTER,
                             env={"OPENREG_STRICT_MEMORY": "0", "PROBE_WRITE": write}, timeout=60,
                             clean_openreg_env=True)
            assert res.returncode == 0, res.stderr
            lines = [json.loads(x) for x in res.stdout.strip().splitlines()]
            assert lines[0]["strict"] is False and lines[0]["offset"] == 0
            assert lines[1]["value"] == expected
        assert "illegal host access" not in res.stderr


# ---------------------------------------------------------------- device count and capacity
ENV_PROBE = CHILD_PRELUDE + r"""
out = {}
def attempt(key, fn, *args):
    try:
        out[key] = ["ok", fn(*args)]
    except rt.OpenRegError as e:
        out[key] = [e.name, str(e)]
attempt("count", rt.device_count)
attempt("props_last", lambda: rt.get_device_properties(rt.device_count() - 1)["total_memory"])
attempt("set_last", lambda: rt.set_device(rt.device_count() - 1) or rt.mem_get_info())
attempt("set_past_end", lambda: rt.set_device(rt.device_count()))
attempt("malloc", rt.malloc, 16)
print(json.dumps(out))
"""


def _probe(env):
    res = run_python(ENV_PROBE, env=env, timeout=60, clean_openreg_env=True)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.runtime
class TestEnvironment:
    hw_classification = HW.ACCELERATOR

    def test_invalid_device_memory(self):
        out = _probe({"OPENREG_DEVICE_MEMORY": "banana"})
        name, msg = out["count"]
        assert name == "orErrorInitializationError"
        assert "OPENREG_DEVICE_MEMORY='banana'" in msg
        assert out["malloc"][0] == "orErrorInitializationError"
        assert "OPENREG_DEVICE_MEMORY" in out["malloc"][1]

    def test_three_devices_with_suffix(self):
        out = _probe({"OPENREG_DEVICE_COUNT": "3", "OPENREG_DEVICE_MEMORY": "256M"})
        assert out["count"] == ["ok", 3]
        assert out["props_last"] == ["ok", 256 << 20]
        assert out["set_last"] == ["ok", [256 << 20, 256 << 20]]
        assert out["set_past_end"][0] == "orErrorInvalidDevice"
        assert "ordinal 3" in out["set_past_end"][1]
        assert out["malloc"][0] == "ok"

    @pytest.mark.parametrize("value, expected", [
        ("64MiB", 64 << 20), ("1g", 1 << 30), ("3000000", 3002368), ("2048K", 2 << 20),
    ])
    def test_size_suffixes(self, value, expected):
        out = _probe({"OPENREG_DEVICE_MEMORY": value, "OPENREG_DEVICE_COUNT": "1"})
        assert out["count"] == ["ok", 1]
        assert out["props_last"] == ["ok", expected]

    @pytest.mark.parametrize("env, var", [
        ({"OPENREG_DEVICE_MEMORY": "512K"}, "OPENREG_DEVICE_MEMORY"),  # below 1M
        ({"OPENREG_DEVICE_COUNT": "many"}, "OPENREG_DEVICE_COUNT"),
        ({"OPENREG_DEVICE_COUNT": "17"}, "OPENREG_DEVICE_COUNT"),
    ])
    def test_other_invalid_values(self, env, var):
        out = _probe(env)
        name, msg = out["count"]
        assert name == "orErrorInitializationError"
        assert var in msg
