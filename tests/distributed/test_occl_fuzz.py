"""liboccl against hostile input, torch-free (also run under ASan/UBSan and TSan
by make check-asan / check-tsan): its C API with valid and invalid arguments
(hypothesis), arguments that differ between ranks, and corrupted shared-memory
control blocks. The wire protocol is fuzzed in test_occl_wire.py.

The rule everywhere: every call either succeeds or fails with a documented
result and a message; no crash, no hang, and the communicator (or, after a
collective failed, a new one) keeps working."""

import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._torch_free import load

from ._launch import check_ok, run_ranks
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

oc = load("_occl_testing")
rt = load("_runtime")

FUZZ_EXAMPLES = int(os.environ.get("OPENREG_TEST_OCCL_FUZZ_EXAMPLES", "150"))
DOCUMENTED = {"occlInvalidArgument", "occlInvalidUsage", "occlSystemError", "occlRemoteError",
              "occlTimeout", "occlInternalError"}

# ---------------------------------------------------------------- the C API
# Pools of argument values, each tagged valid or not for a call on a
# one-rank communicator whose buffers hold BUF bytes.
BUF = 4096
VALID_DTYPES = ["float32", "int32", "float64"]
INVALID_DTYPES = [-1, 15, 16, 2**31 - 1, -2**31]
VALID_OPS = ["sum", "max", "min"]
INVALID_OPS = [-1, 9, 100, 2**31 - 1]
COUNTS = [0, 1, 100, 1024, 1025, 4097, 2**31, 2**61, 2**64 - 1]
ROOTS = [0, -1, 1, 2**31 - 1, -2**31]
BUFFERS = ["valid", "valid+8", "end", "end-4", "null", "host", "freed", "forged", "other_device"]
STREAMS = ["default", "created", "destroyed"]


class ApiWorld:
    """A one-rank communicator and the objects the pools point at."""

    def __init__(self, tmp):
        self.comm = oc.Comm(oc.FileStore(str(tmp), 10.0), 1, 0, device=0, timeout_ms=10_000)
        self.buf = rt.malloc(BUF)
        self.buf2 = rt.malloc(BUF)
        self.host = np.zeros(BUF, np.uint8)
        freed = rt.malloc(BUF)
        rt.free(freed)
        self.freed = freed
        self.other = None
        if rt.device_count() > 1:
            rt.set_device(1)
            self.other = rt.malloc(BUF)
            rt.set_device(0)
        self.stream = rt.stream_create()
        dead = rt.stream_create()
        rt.stream_destroy(dead)
        self.dead_stream = dead

    def pointer(self, kind, second=False):
        base = self.buf2 if second else self.buf
        return {"valid": base, "valid+8": base + 8, "end": base + BUF, "end-4": base + BUF - 4,
                "null": 0, "host": self.host.ctypes.data, "freed": self.freed,
                "forged": 0x7E57_0000_0000, "other_device": self.other or 0xDEAD_0000}[kind]

    def room(self, kind):
        """Bytes a call may use from pointer `kind` (None: no valid memory)."""
        return {"valid": BUF, "valid+8": BUF - 8, "end": 0, "end-4": 4}.get(kind)

    def stream_of(self, kind):
        return {"default": 0, "created": self.stream, "destroyed": self.dead_stream}[kind]

    def close(self):
        self.comm.destroy()
        for p in (self.buf, self.buf2) + ((self.other,) if self.other else ()):
            rt.free(p)
        rt.stream_destroy(self.stream)


@pytest.fixture(scope="module")
def api_world(tmp_path_factory):
    w = ApiWorld(tmp_path_factory.mktemp("occl-api"))
    yield w
    w.close()


def itemsize(dtype):
    return {"float32": 4, "int32": 4, "float64": 8}[dtype]


CALLS = ["allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "gather", "scatter",
         "alltoallv", "send", "recv"]


@pytest.mark.distributed
class TestOcclApiFuzz:
    """Every collective and point-to-point entry point with arguments drawn
    from valid and invalid pools: invalid ones are refused at the call with
    occlInvalidArgument and a message naming the argument, valid ones run,
    and the communicator keeps working either way."""
    hw_classification = HW.ACCELERATOR

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(call=st.sampled_from(CALLS), dtype=st.sampled_from(VALID_DTYPES + INVALID_DTYPES),
           op=st.sampled_from(VALID_OPS + INVALID_OPS), count=st.sampled_from(COUNTS),
           send=st.sampled_from(BUFFERS), recv=st.sampled_from(BUFFERS),
           root=st.sampled_from(ROOTS), stream=st.sampled_from(STREAMS),
           scalar=st.sampled_from([1.0, float("nan"), float("inf")]))
    def test_calls_are_refused_or_run(self, api_world, call, dtype, op, count, send, recv, root,
                                      stream, scalar):
        w, c = api_world, api_world.comm
        s = w.stream_of(stream)
        sp, rp = w.pointer(send), w.pointer(recv, second=True)
        # What makes this call invalid, from the documented rules (occl.h).
        why = []
        if dtype in INVALID_DTYPES:
            why.append("data type")
        reducing = call in ("allreduce", "reduce", "reduce_scatter")
        if reducing and op in INVALID_OPS:
            why.append("reduce op")
        if call in ("reduce", "broadcast", "gather", "scatter") and root != 0:
            why.append("root")
        if call in ("send", "recv"):  # root is the peer: in a one-rank world, never valid
            why.append("peer")
        if not why:
            nbytes = count * itemsize(dtype)
            if nbytes and (w.room(send) is None or nbytes > w.room(send)):
                why.append("send")
            if nbytes and call not in ("send",) and (w.room(recv) is None or nbytes > w.room(recv)):
                why.append("recv")
        if stream == "destroyed":
            why.append("stream")
        if call == "alltoallv":
            args = (sp, [count], [0], rp, [count], [0], dtype)
        elif call in ("send", "recv"):
            args = ((sp if call == "send" else rp), count, dtype, root)
        elif call in ("broadcast", "gather", "scatter"):
            args = (sp, rp, count, dtype, root)
        elif call == "reduce":
            args = (sp, rp, count, dtype, op, root)
        elif call in ("allgather",):
            args = (sp, rp, count, dtype)
        elif call == "allreduce":
            args = (sp, rp, count, dtype, op, scalar)
        else:
            args = (sp, rp, count, dtype, op)
        try:
            getattr(c, call)(*args, stream=s)
        except oc.OcclError as e:
            assert why, f"valid call refused: {e}"
            assert e.name == "occlInvalidArgument", e
            assert str(e).split(": ", 1)[1].strip(), e  # a message after the result's name
        else:
            assert not why, f"{call} accepted an invalid {why}: {args}"
            c.synchronize(s)
        # The communicator still works and has no error.
        c.barrier(stream=w.stream)
        c.synchronize(w.stream)
        assert c.async_error()[0] == "occlSuccess"

    def test_invalid_arguments_name_what_is_wrong(self, api_world):
        w, c = api_world, api_world.comm
        cases = [
            (lambda: c.allreduce(w.buf, w.buf, 10, 16, "sum"), "invalid data type 16"),
            (lambda: c.allreduce(w.buf, w.buf, 10, -2**31, "sum"), "invalid data type"),
            (lambda: c.allreduce(w.buf, w.buf, 10, "float32", 9), "invalid reduce op 9"),
            (lambda: c.allreduce(w.buf, w.buf, 10, "float32", -1), "invalid reduce op -1"),
            (lambda: c.broadcast(w.buf, w.buf, 10, "float32", root=-2**31), "root"),
            (lambda: c.allreduce(0, 0, 10, "float32", "sum"), "NULL"),
            (lambda: c.allreduce(w.freed, w.freed, 10, "float32", "sum"), "live allocation"),
            # A displacement whose byte offset wraps (found by the fuzzer:
            # gather's root side, n * count elements, wrapped to 0 bytes).
            (lambda: c.gather(w.buf, w.buf2, 2**61, "float64", root=0), "too large"),
            (lambda: c.alltoallv(w.buf, [1], [2**62], w.buf2, [1], [0], "float32"),
             "too large"),
            (lambda: c.alltoallv(w.buf, [1], [BUF], w.buf2, [1], [0], "uint8"),
             "sendbuff block"),
            (lambda: c.allreduce(w.buf, w.buf, 10, "float32", "sum", stream=w.dead_stream),
             "stream"),
            (lambda: c.allreduce(w.buf + BUF - 4, w.buf, 2, "float32", "sum"), "allocation"),
            (lambda: c.allgather(w.buf, w.buf2, 2**62, "float32"), "too large"),
        ]
        for call, words in cases:
            with pytest.raises(oc.OcclError) as info:
                call()
            assert info.value.name == "occlInvalidArgument", info.value
            assert words in str(info.value), (words, str(info.value))

    def test_null_communicator_is_refused_by_every_entry_point(self):
        results = oc.null_comm_calls()
        assert len(results) == 19
        for name, result, message in results:
            if name in ("occlCommDestroy", "occlCommAbort"):
                assert result == "occlSuccess", name  # like free(NULL), as NCCL does
            else:
                assert result == "occlInvalidArgument", (name, result)
                assert "NULL" in message, (name, message)


# ------------------------------------------------------- across ranks
def parse(lines):
    out = {}
    for line in lines.splitlines():
        m = re.match(r"(\d+) (OK|ERR (\w+) (\w+) ([\d.]+) (.*))", line)
        if m:
            k = int(m.group(1))
            out[k] = ("OK",) if m.group(2) == "OK" else (m.group(3), m.group(4),
                                                          float(m.group(5)), m.group(6))
    return out


@pytest.mark.distributed
class TestOcclMismatchFuzz:
    """Collectives and send/receive rings whose arguments one rank changes
    (count, dtype, op, root, the collective itself, alltoallv counts, a
    message's size or tag): every rank fails with a clear error, fast (no
    rank waits for its timeout), and the unchanged examples in between run
    and give numpy's result."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("nranks,transport,seed,examples", [
        (2, "shm", 1, 60), (3, "shm", 2, 40), (2, "tcp", 3, 30)])
    def test_mismatched_arguments_fail_on_every_rank(self, tmp_path, nranks, transport, seed,
                                                     examples):
        env = {"OCCL_TEST_TIMEOUT_MS": "20000"}
        if transport == "tcp":
            env["OCCL_TRANSPORT"] = "tcp"
        results = run_ranks("occl_fuzz.py", nranks, timeout=240, env=env,
                            args=(tmp_path, "mismatch", seed, examples))
        check_ok(results)
        per_rank = [parse(out) for _, out, _ in results]
        changed = {}
        for line in results[0][1].splitlines():
            m = re.match(r"(\d+) .*\| (\w+) (.*)$", line)
            if m:
                changed[int(m.group(1))] = m.group(3) != "None"
        assert sorted(changed) == list(range(examples)), results[0][1][-2000:]
        assert any(changed.values()) and not all(changed.values())
        for k, bad in changed.items():
            outcomes = [r[k] for r in per_rank]
            if not bad:
                assert all(o == ("OK",) for o in outcomes), (k, outcomes)
                continue
            for o in outcomes:
                assert o[0] in ("op", "barrier"), (k, outcomes)
                assert o[1] in ("occlInvalidUsage", "occlRemoteError"), (k, outcomes)
                assert o[2] < 10, (k, outcomes)  # long before the 20 s timeout
            # Someone names the disagreement itself.
            assert any(o[1] == "occlInvalidUsage" and
                       re.search(r"mismatched collectives|expects|sends", o[3])
                       for o in outcomes), (k, outcomes)


# ------------------------------------------------------- shared memory
@pytest.mark.distributed
class TestOcclCorruptedSharedMemory:
    """A peer's shared-memory blocks are memory another process can write.
    Rank 1 corrupts a control block (its own or rank 0's) the way a stray
    write would; rank 0's next operation that reads it fails with a clear
    error instead of crashing, hanging or reading outside the segment."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("what,result,words", [
        # Without a bounded read, the reason ran on into the bytes after it.
        ("abort_reason", "occlRemoteError", "rank 1 aborted"),
        # Without the check, the send's copy ran past the ring's end.
        ("ring_tail_ahead", "occlRemoteError", "ring from rank 0 to rank 1 claims"),
        ("ring_tail_behind", "occlRemoteError", "ring from rank 0 to rank 1 claims"),
        ("ring_head", "occlRemoteError", "ring from rank 1 to rank 0 claims"),
        ("step", "occlInvalidUsage", "mismatched collectives"),
        # Without the check, rank 0 read 1 TiB past the mapped buffer.
        ("zero_copy_offset", "occlRemoteError", "rank 1 published a buffer"),
    ])
    def test_corrupted_block_fails_the_operation(self, tmp_path, what, result, words):
        if what == "zero_copy_offset" and os.environ.get("OPENREG_TEST_SANITIZER") == "tsan":
            # Rank 1's scribbling thread races with liboccl's own write of the
            # slot on purpose: ThreadSanitizer rightly reports the test.
            pytest.skip("the corruption is a deliberate data race (TSan reports the test itself)")
        results = run_ranks("occl_fuzz.py", 2, timeout=60, args=(tmp_path, "corrupt", what),
                            env={"OCCL_TEST_TIMEOUT_MS": "10000"})
        check_ok(results)
        out0 = results[0][1].strip().splitlines()[-1]
        m = re.match(r"ERR (\w+) ([\d.]+) (.*)", out0)
        assert m, results[0]
        assert m.group(1) == result and words in m.group(3), out0
        assert float(m.group(2)) < 5, out0
        if what == "abort_reason":
            reason = m.group(3).split("waiting for the same collective: ", 1)[1]
            assert reason == "A" * 511, reason[:80] + "..." + reason[-80:]
        out1 = results[1][1].strip().splitlines()[-1]
        assert out1.startswith(("ERR", "OK idle")), results[1]
