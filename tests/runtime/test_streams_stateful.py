"""Stateful (hypothesis) tests of streams and events.

The machine enqueues ``launch_log`` entries (with small sleeps) and gates on
a few streams (with priorities, on both devices, including the default
stream), records events, makes streams wait on events and synchronises.

The model is the happens-before relation the API promises: every stream has
a *frontier*, the set of work that must finish before anything enqueued on it
next may run: its own earlier entries and gates, plus, after
``stream_wait_event(s, e)``, everything that was in the frontier of e's stream
when e was recorded. Checked throughout:

* a log entry appears only after every entry in its frontier (so entries of a
  stream appear in enqueue order, and entries enqueued after a wait run after
  everything recorded before the event) and never while a gate in its
  frontier is closed;
* ``stream_query``/``event_query`` never report done while a closed gate
  precedes the work, and when they do report done, all that work is in the
  log;
* after ``stream_synchronize``/``event_synchronize`` the query is true and
  all the preceding work is in the log.
"""

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tests._subprocess import child_env
from tests.runtime._helpers import REPO, RuntimeHang, call_with_timeout, on_device, rt
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

# Child runs (per-process worker counts) are configured through these.
CHILD_ENV = "OPENREG_STREAM_MACHINE_CHILD"  # number of examples
CHILD_DEVICES_ENV = "OPENREG_STREAM_MACHINE_DEVICES"  # e.g. "0" or "0,0,1"
CHILD_FAST_FAIL_ENV = "OPENREG_STREAM_MACHINE_FAST_FAIL"  # no shrinking, short timeouts

MAX_STREAMS = 4  # created ones, besides the default stream
MAX_GATES = 2  # each closed gate holds one of the device's workers until released

sleeps = st.sampled_from([0, 0, 0, 50, 200, 1000, 2000])


def _sync_devices():
    for d in range(2):
        rt.set_device(d)
        rt.device_synchronize()
    rt.set_device(0)


class StreamMachine(RuleBasedStateMachine):
    # Devices new streams are drawn from (0 twice: device 0 is more likely).
    DEVICES = (0, 0, 1)
    # Upper bound (s) on any synchronisation (the queued work is a few ms at
    # most); a runtime hang fails the test instead of blocking it.
    TIMEOUT = 5.0

    def __init__(self):
        super().__init__()
        self.log = rt.Log()
        self.streams = [0]  # 0 = device 0's default stream
        self.created = []
        self.frontier = {0: set()}
        self.required = {}  # entry id -> frozenset of entry/gate ids
        # Events are cheap host objects: make them up front so that records
        # and waits happen often. event -> frozenset, or None if never recorded
        self.events = [rt.event_create(f) for f in (0, 0, rt.EventDisableTiming)]
        self.event_deps = {e: None for e in self.events}
        self.gates = {}  # gate id (negative) -> Gate
        self.released = set()
        self.next_id = 0
        self.next_gate = -1
        self.hung = False

    # ------------------------------------------------------------ helpers
    @staticmethod
    def entries(ids):
        return {i for i in ids if i >= 0}

    def closed(self, ids):
        return {i for i in ids if i < 0 and i not in self.released}

    def logged(self):
        return set(self.log.values)

    def release_all(self):
        for gid, g in self.gates.items():
            self.released.add(gid)  # model first: the entry may run at once
            g.release()

    def block(self, fn, *args):
        """Run a blocking call with the time bound; remember a hang so the
        teardown does not wait on the stuck runtime again."""
        try:
            return call_with_timeout(fn, *args, timeout=self.TIMEOUT)
        except RuntimeHang:
            self.hung = True
            raise

    def assert_done(self, ids, what):
        missing = self.entries(ids) - self.logged()
        assert not missing, f"{what}: entries {sorted(missing)} have not run"

    # ------------------------------------------------------------ rules
    @initialize(priorities=st.lists(st.integers(-4, 1), min_size=2, max_size=2),
                data=st.data())
    def two_streams(self, priorities, data):
        for e in self.events:
            assert rt.event_query(e)  # never recorded
        for p in priorities:
            self._create_stream(p, data.draw(st.sampled_from(self.DEVICES), label="device"))

    @precondition(lambda self: len(self.created) < MAX_STREAMS)
    @rule(priority=st.integers(-4, 1), data=st.data())
    def create_stream(self, priority, data):
        self._create_stream(priority, data.draw(st.sampled_from(self.DEVICES), label="device"))

    def _create_stream(self, priority, device):
        with on_device(device):
            s = rt.stream_create(priority)
        self.created.append(s)
        self.streams.append(s)
        self.frontier[s] = set()
        assert rt.stream_priority(s) == min(0, max(-3, priority))
        assert rt.stream_device(s) == device
        assert rt.stream_query(s)

    def _log(self, s, sleep_us):
        i = self.next_id
        self.next_id += 1
        self.required[i] = frozenset(self.frontier[s])
        self.frontier[s].add(i)
        rt.launch_log(s, self.log, i, sleep_us)

    def launch_gate(self, s):
        gid = self.next_gate
        self.next_gate -= 1
        g = rt.Gate()
        self.gates[gid] = g
        self.frontier[s].add(gid)
        rt.launch_gate(s, g)

    @rule(data=st.data(), sleep_us=sleeps)
    def launch_log(self, data, sleep_us):
        self._log(data.draw(st.sampled_from(self.streams), label="stream"), sleep_us)

    @precondition(lambda self: len(self.gates) - len(self.released) < MAX_GATES)
    @rule(data=st.data())
    def gate(self, data):
        self.launch_gate(data.draw(st.sampled_from(self.streams), label="stream"))

    @precondition(lambda self: len(self.gates) > len(self.released))
    @rule()
    def release_gates(self):
        self.release_all()

    def _record(self, e, s):
        self.event_deps[e] = frozenset(self.frontier[s])
        rt.event_record(e, s)

    def _wait(self, s, e):
        rt.stream_wait_event(s, e)
        if self.event_deps[e] is not None:
            self.frontier[s] |= self.event_deps[e]

    @rule(data=st.data())
    def record_event(self, data):
        e = data.draw(st.sampled_from(self.events), label="event")
        s = data.draw(st.sampled_from(self.streams), label="stream")
        self._record(e, s)

    @rule(data=st.data())
    def wait_event(self, data):
        e = data.draw(st.sampled_from(self.events), label="event")
        s = data.draw(st.sampled_from(self.streams), label="stream")
        self._wait(s, e)

    @rule(data=st.data())
    def record_then_wait(self, data):
        e = data.draw(st.sampled_from(self.events), label="event")
        s1 = data.draw(st.sampled_from(self.streams), label="recording stream")
        s2 = data.draw(st.sampled_from(self.streams), label="waiting stream")
        self._record(e, s1)
        self._wait(s2, e)

    @precondition(lambda self: len(self.gates) - len(self.released) < MAX_GATES)
    @rule(data=st.data(), sleep_us=sleeps)
    def gated_dependency(self, data, sleep_us):
        # The pattern the wait semantics are about: work queued behind a
        # closed gate on s1, an event recorded after it, s2 waiting on it.
        s1 = data.draw(st.sampled_from(self.streams), label="gated stream")
        s2 = data.draw(st.sampled_from(self.streams), label="waiting stream")
        e = data.draw(st.sampled_from(self.events), label="event")
        self.launch_gate(s1)
        self._log(s1, sleep_us)
        self._record(e, s1)
        self._wait(s2, e)
        self._log(s2, 0)

    @precondition(lambda self: len(self.gates) - len(self.released) < MAX_GATES)
    @rule(data=st.data())
    def chained_dependency(self, data):
        # Transitive waits: s2 waits on s1's gated work, s3 waits on an event
        # recorded on s2 after that wait (so s3 depends on s1 through s2).
        s1, s2, s3 = (data.draw(st.sampled_from(self.streams), label=f"stream {k}")
                      for k in (1, 2, 3))
        e1, e2 = data.draw(st.lists(st.sampled_from(self.events), min_size=2, max_size=2,
                                    unique=True), label="events")
        self.launch_gate(s1)
        self._log(s1, 0)
        self._record(e1, s1)
        self._wait(s2, e1)
        self._record(e2, s2)
        self._wait(s3, e2)
        self._log(s3, 0)

    @rule(data=st.data(), what=st.sampled_from(["stream", "event", "devices"]))
    def synchronize(self, data, what):
        self.release_all()
        if what == "stream":
            s = data.draw(st.sampled_from(self.streams), label="stream")
            self.block(rt.stream_synchronize, s)
            assert rt.stream_query(s)
            self.assert_done(self.frontier[s], "after stream_synchronize")
        elif what == "event":
            e = data.draw(st.sampled_from(self.events), label="event")
            self.block(rt.event_synchronize, e)
            assert rt.event_query(e)
            if self.event_deps[e] is not None:
                self.assert_done(self.event_deps[e], "after event_synchronize")
        else:
            self.block(_sync_devices)
            for s in self.streams:
                assert rt.stream_query(s)
            for e in self.events:
                assert rt.event_query(e)
            self.assert_done(self.required, "after device_synchronize")

    # ------------------------------------------------------------ invariants
    @invariant()
    def log_respects_happens_before(self):
        values = self.log.values
        assert len(values) == len(set(values)), f"an entry ran twice: {values}"
        pos = {v: k for k, v in enumerate(values)}
        for v, k in pos.items():
            req = self.required[v]
            early = [r for r in self.entries(req) if pos.get(r, k + 1) > k]
            assert not early, f"entry {v} ran before its predecessors {early}: log {values}"
            gated = self.closed(req)
            assert not gated, f"entry {v} ran while gates {gated} were closed: log {values}"

    @invariant()
    def queries_consistent(self):
        for s in self.streams:
            done = rt.stream_query(s)
            if self.closed(self.frontier[s]):
                assert not done, f"stream {s:#x} reports done while a closed gate precedes its work"
            if done:
                self.assert_done(self.frontier[s], f"stream_query({s:#x}) returned True but")
        for e in self.events:
            deps = self.event_deps[e]
            done = rt.event_query(e)
            if deps is None:
                assert done, "a never-recorded event is not ready"
                continue
            if self.closed(deps):
                assert not done, "event reports done while a closed gate precedes it"
            if done:
                self.assert_done(deps, "event_query returned True but")

    def teardown(self):
        self.release_all()
        if self.hung:
            return  # already failed; leave the stuck streams alone
        try:
            self.block(_sync_devices)
            for e in self.events:
                assert rt.event_query(e)
            self.log_respects_happens_before()
            self.assert_done(self.required, "at teardown")
        finally:
            for e in self.events:
                rt.event_destroy(e)
            for s in self.created:
                if not self.hung:
                    self.block(rt.stream_destroy, s)


COMMON = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.mark.runtime
class TestStreamsStateful(StreamMachine.TestCase):
    """Default configuration: 4 workers per device, streams on both devices."""

    hw_classification = HW.ACCELERATOR
    settings = settings(max_examples=150, stateful_step_count=40, **COMMON)


if os.environ.get(CHILD_ENV):

    class ChildStreamMachine(StreamMachine):
        DEVICES = tuple(int(d) for d in os.environ.get(CHILD_DEVICES_ENV, "0,0,1").split(","))
        TIMEOUT = 1.5 if os.environ.get(CHILD_FAST_FAIL_ENV) else 10.0

    @pytest.mark.runtime
    class TestStreamMachineChild(ChildStreamMachine.TestCase):
        hw_classification = HW.ACCELERATOR
        settings = settings(
            max_examples=int(os.environ[CHILD_ENV]), stateful_step_count=40,
            # A hang costs TIMEOUT per replay: report the first failure as is.
            phases=[Phase.generate] if os.environ.get(CHILD_FAST_FAIL_ENV) else list(Phase),
            **COMMON,
        )


def run_child_machine(workers: str, devices: str, examples: int, fast_fail: bool):
    env = child_env({"OPENREG_DEVICE_WORKERS": workers, CHILD_ENV: str(examples),
                     CHILD_DEVICES_ENV: devices}, clean_openreg_env=True)
    if fast_fail:
        env[CHILD_FAST_FAIL_ENV] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         os.path.relpath(__file__, REPO), "-k", "TestStreamMachineChild"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=150,
    )


@pytest.mark.runtime
@pytest.mark.slow
class TestStreamsFewWorkers:
    """The machine with 1-2 workers per device, where closed gates and sleeps
    contend for the workers and the scheduler's choice decides what runs."""

    hw_classification = HW.ACCELERATOR

    def test_two_workers_two_devices(self):
        # Cross-device waits with few workers once exposed a lost wake-up
        # (a marker completed by a host-thread query did not wake workers).
        res = run_child_machine("2", "0,1", examples=50, fast_fail=False)
        assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
        assert "1 passed" in res.stdout, res.stdout[-2000:]

    def test_one_worker(self):
        res = run_child_machine("1", "0", examples=200, fast_fail=True)
        if res.returncode != 0 and "RuntimeHang" in res.stdout:
            raise RuntimeHang(res.stdout[-6000:])
        assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
        assert "1 passed" in res.stdout, res.stdout[-2000:]
