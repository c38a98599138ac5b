"""A forked child of a process whose runtime is initialised cannot use the runtime."""

import json

import pytest

from tests._subprocess import run_python
from tests.runtime._helpers import CHILD_PRELUDE
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


FORK_SCRIPT = CHILD_PRELUDE + r"""
out = {}
pid = os.fork()  # before any device is initialised: the child may use it
if pid == 0:
    try:
        p = rt.malloc(16); rt.free(p); os._exit(0)
    except BaseException:
        os._exit(1)
out["fork_before_init"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
p = rt.malloc(16)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    res = {}
    for key, fn in [("malloc", lambda: rt.malloc(16)), ("free", lambda: rt.free(p)),
                    ("stream", lambda: rt.stream_create(0))]:
        try:
            fn()
            res[key] = ["ok", ""]
        except rt.OpenRegError as e:
            res[key] = [e.name, str(e)]
    os.write(w, json.dumps(res).encode())
    os._exit(0)
os.close(w)
data = b""
while chunk := os.read(r, 65536):
    data += chunk
os.waitpid(pid, 0)
out["child"] = json.loads(data)
rt.free(p)
print(json.dumps(out))
"""


@pytest.mark.runtime
class TestFork:
    hw_classification = HW.ACCELERATOR

    def test_forked_child_cannot_use_an_initialised_runtime(self):
        res = run_python(FORK_SCRIPT, timeout=60, clean_openreg_env=True)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert out["fork_before_init"] == 0
        for key in ("malloc", "free"):
            name, msg = out["child"][key]
            assert name == "orErrorInitializationError", out
            assert "forked child" in msg
        assert "spawn" in out["child"]["malloc"][1]
        assert out["child"]["stream"][0] == "orErrorInitializationError"
