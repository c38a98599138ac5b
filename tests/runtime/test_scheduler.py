"""The device workers' scheduler, in child interpreters with chosen worker counts:
stream priorities and wake-ups of streams waiting on events."""

import json

import pytest

from tests._subprocess import run_python
from tests.runtime._helpers import CHILD_PRELUDE, RuntimeHang
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


# ---------------------------------------------------------------- priorities
PRIORITY_SCRIPT = CHILD_PRELUDE + r"""
def wait_until(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.001)
    return False

out = {"workers": rt.get_device_properties(0)["multi_processor_count"]}
gate_stream = rt.stream_create(0)
low, mid, high = rt.stream_create(0), rt.stream_create(-1), rt.stream_create(-3)
low2 = rt.stream_create(0)
log = rt.Log()
g = rt.Gate()
try:
    rt.launch_gate(gate_stream, g)
    assert wait_until(lambda: g.entered)
    rt.launch_log(low, log, 1)
    rt.launch_log(low, log, 2)
    rt.launch_log(mid, log, 20)
    rt.launch_log(high, log, 30)
    rt.launch_log(high, log, 31)
    time.sleep(0.05)
    out["before_release"] = list(log.values)
finally:
    g.release()
for s in (low, mid, high, gate_stream):
    rt.stream_synchronize(s)
out["priority_order"] = list(log.values)

# FIFO between equal priorities (global enqueue order).
log2 = rt.Log()
g2 = rt.Gate()
try:
    rt.launch_gate(gate_stream, g2)
    assert wait_until(lambda: g2.entered)
    rt.launch_log(low, log2, 1)
    rt.launch_log(low2, log2, 2)
    rt.launch_log(low, log2, 3)
    rt.launch_log(low2, log2, 4)
finally:
    g2.release()
for s in (low, low2, gate_stream):
    rt.stream_synchronize(s)
out["fifo_order"] = list(log2.values)
print(json.dumps(out))
"""


@pytest.mark.runtime
class TestPriorities:
    hw_classification = HW.ACCELERATOR

    def test_high_priority_runs_first_with_one_worker(self):
        res = run_python(PRIORITY_SCRIPT, env={"OPENREG_DEVICE_WORKERS": "1"}, timeout=60,
                         clean_openreg_env=True)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert out["workers"] == 1
        assert out["before_release"] == []
        assert out["priority_order"] == [30, 31, 20, 1, 2]
        assert out["fifo_order"] == [1, 2, 3, 4]

    def test_invalid_worker_count(self):
        res = run_python(CHILD_PRELUDE + r"""
try:
    rt.stream_create(0)
except rt.OpenRegError as e:
    print(json.dumps([e.name, str(e)]))
""", env={"OPENREG_DEVICE_WORKERS": "0"}, timeout=60, clean_openreg_env=True)
        assert res.returncode == 0, res.stderr
        name, msg = json.loads(res.stdout.strip().splitlines()[-1])
        assert name == "orErrorInitializationError"
        assert "OPENREG_DEVICE_WORKERS='0'" in msg


# ---------------------------------------------------------------- scheduler wake-ups
# Stream t waits on e1, recorded on stream s behind a wait on e0, recorded on
# stream g behind a closed gate. When the gate opens, e0 and then e1 complete
# without any real work left on s: t must then run its log entry.
TRANSITIVE_WAIT_SCRIPT = CHILD_PRELUDE + r"""
t = rt.stream_create(0)   # created before s: the worker scans it first
s = rt.stream_create(0)
g = rt.stream_create(0)
e0, e1 = rt.event_create(), rt.event_create()
log = rt.Log()
gate = rt.Gate()
rt.launch_gate(g, gate)
rt.event_record(e0, g)        # g: [gate, record e0]
rt.stream_wait_event(s, e0)   # s: [wait e0]
rt.event_record(e1, s)        # s: [wait e0, record e1]
rt.stream_wait_event(t, e1)   # t: [wait e1]
rt.launch_log(t, log, 1)      # t: [wait e1, log 1]
time.sleep(0.05)
gate.release()
done = []
import threading
th = threading.Thread(target=lambda: (rt.stream_synchronize(t), done.append(1)), daemon=True)
th.start()
th.join(1.0)
print(json.dumps({"workers": rt.get_device_properties(0)["multi_processor_count"],
                  "synchronized": bool(done), "log": log.values,
                  "e1_done": rt.event_query(e1)}), flush=True)
os._exit(0)  # a stuck worker or synchroniser must not keep the child alive
"""

# Device 1's workers are all busy with unrelated gates. s (device 1) holds
# only markers: [wait e0, record e1]; t (device 0) waits on e1. After e0
# completes, stream_query(s) on the host thread completes e1. Device 0's
# workers are idle, so t's log entry should run at once.
QUERY_COMPLETES_EVENT_SCRIPT = CHILD_PRELUDE + r"""
import threading
rt.set_device(1)
busy = [rt.stream_create(0) for _ in range(rt.get_device_properties(1)["multi_processor_count"])]
s = rt.stream_create(0)
rt.set_device(0)
busy_gates = [rt.Gate() for _ in busy]
out = {}
try:
    for b, g in zip(busy, busy_gates):
        rt.launch_gate(b, g)
    end = time.monotonic() + 5
    while not all(g.entered for g in busy_gates) and time.monotonic() < end:
        time.sleep(0.001)
    a, t = rt.stream_create(0), rt.stream_create(0)
    e0, e1 = rt.event_create(), rt.event_create()
    log = rt.Log()
    ga = rt.Gate()
    rt.launch_gate(a, ga)
    rt.event_record(e0, a)          # a (device 0): [gate, record e0]
    rt.stream_wait_event(s, e0)     # s (device 1): [wait e0]
    rt.event_record(e1, s)          # s: [wait e0, record e1]
    rt.stream_wait_event(t, e1)     # t (device 0): [wait e1]
    rt.launch_log(t, log, 1)        # t: [wait e1, log 1]
    ga.release()
    time.sleep(0.1)                 # device 0 finishes the gate and idles
    out["query_s"] = rt.stream_query(s)
    out["e1_done"] = rt.event_query(e1)
    done = []
    th = threading.Thread(target=lambda: (rt.stream_synchronize(t), done.append(1)), daemon=True)
    th.start()
    th.join(1.0)
    out["synchronized"] = bool(done)
    out["log"] = log.values
finally:
    for g in busy_gates:
        g.release()
print(json.dumps(out), flush=True)
os._exit(0)
"""


def _child_json(script, env=None):
    res = run_python(script, env=env, timeout=60, clean_openreg_env=True)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.runtime
class TestSchedulerWakeups:
    hw_classification = HW.ACCELERATOR

    def test_transitive_wait_with_default_workers(self):
        out = _child_json(TRANSITIVE_WAIT_SCRIPT)
        assert out == {"workers": 4, "synchronized": True, "log": [1], "e1_done": True}

    def test_transitive_wait_with_one_worker(self):
        out = _child_json(TRANSITIVE_WAIT_SCRIPT, env={"OPENREG_DEVICE_WORKERS": "1"})
        assert out["workers"] == 1 and out["e1_done"] is True
        if not out["synchronized"]:
            raise RuntimeHang(f"stream_synchronize(t) did not return; log {out['log']}")
        assert out["log"] == [1]

    def test_event_completed_by_stream_query_wakes_waiters(self):
        out = _child_json(QUERY_COMPLETES_EVENT_SCRIPT)
        assert out["query_s"] is True and out["e1_done"] is True
        if not out["synchronized"]:
            raise RuntimeHang(f"stream_synchronize(t) did not return; log {out['log']}")
        assert out["log"] == [1]
