"""OCCL's TCP protocol against a fake peer (torch-free; also run under ASan/UBSan
and TSan by make check-asan / check-tsan).

A real rank 0 (workers/occl_wire_target.py, OCCL_TRANSPORT=tcp) and a fake
rank 1 in this process, which bootstraps through the store like a rank and
then writes whatever bytes a case chooses: the valid session (to prove the
fake speaks the protocol), hand-picked malformed frames, and hypothesis's
truncated, mutated and random ones, at the handshake, the communicator's
first round and a collective's round. Rank 0 must either complete the
operation or fail it with a documented result and a message naming the peer,
within its timeout; never crash, hang or allocate what a header announces."""

import os
import select
import socket
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._subprocess import REPO, child_env
from tests._torch_free import load

from ._launch import WORKERS
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

oc = load("_occl_testing")

TIMEOUT_S = 1.5  # rank 0's communicator timeout
WIRE_EXAMPLES = int(os.environ.get("OPENREG_TEST_OCCL_WIRE_EXAMPLES", "40"))

# The protocol (occl/src/tcp.cpp and internal.h), written out independently.
HELLO_MAGIC, FRAME_MAGIC = 0x314F4C4C45484F43, 0x4F434631
ROUND, MESSAGE, DATA = 1, 2, 3
ALLREDUCE, BARRIER = 1, 9
FLOAT32, UINT8 = 10, 1
SLOT_HEADER = 128  # OpDesc (40 bytes) + meta[6], aligned to 64


def hello(token, rank=1, nranks=2, to=0):
    return struct.pack("<Q16siiii", HELLO_MAGIC, token, rank, nranks, to, 0)


def desc(kind, dtype=0, seq=0, count=0, root=-1, redop=0, rnd=0):
    d = struct.pack("<IIQQiIII", kind, dtype, seq, count, root, redop, rnd, 0)
    return d + bytes(SLOT_HEADER - len(d))


def frame(ftype, a, b, body, length=None):
    return struct.pack("<IIQQQ", FRAME_MAGIC, ftype, a, b,
                       len(body) if length is None else length) + body


def round_frame(step, slot_header, ranges):
    """ranges: [(parity, off, bytes)]"""
    meta = slot_header + b"".join(struct.pack("<QQQ", p, o, len(d)) for p, o, d in ranges)
    return frame(ROUND, step, len(ranges), meta + b"".join(d for _, _, d in ranges))


def session(token, op):
    """The valid byte stream of rank 1, in three parts: the handshake, the
    communicator's first round (a barrier that says: every pair over TCP),
    the operation."""
    init = round_frame(1, desc(BARRIER), [(0, 0, b"\x01\x01")])
    if op == "allreduce":  # 1000 float32 of 2.0: rank 0's 1.5 + 2.0
        body = struct.pack("<1000f", *[2.0] * 1000)
        last = round_frame(2, desc(ALLREDUCE, FLOAT32, 1, 1000), [(1, 0, body)])
    elif op == "recv":
        last = frame(MESSAGE, 7, 4000, struct.pack("<1000i", *range(1000)))
    else:
        last = round_frame(2, desc(BARRIER, UINT8, 1), [])
    return [hello(token), init, last]


class Target:
    """The real rank 0, one process for many sessions."""

    def __init__(self, tmp):
        self.tmp, self.n = tmp, 0
        env = child_env({"OCCL_TRANSPORT": "tcp", "OCCL_TEST_TIMEOUT_MS": str(int(TIMEOUT_S * 1000)),
                         "RANK": "0", "WORLD_SIZE": "2"})
        self.proc = subprocess.Popen([sys.executable, os.path.join(WORKERS, "occl_wire_target.py")],
                                     env=env, cwd=REPO, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        ready = self.line(60)
        assert ready.startswith("READY"), ready
        self.rss0 = int(ready.split()[1])

    def line(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            self.proc.kill()
            raise AssertionError(f"rank 0 did not answer within {timeout} s (a hang)\n"
                                 + self.proc.stderr.read()[-3000:])
        out = self.proc.stdout.readline()
        if not out:
            self.proc.wait()
            raise AssertionError(f"rank 0 died (exit {self.proc.returncode})\n"
                                 + self.proc.stderr.read()[-3000:])
        return out.strip()

    def run(self, op, pieces_for, end="close"):
        """One session: rank 0 runs `op`; the fake peer sends the pieces that
        pieces_for(token) returns, then closes its end or stays silent."""
        self.n += 1
        d = os.path.join(self.tmp, f"s{self.n}")
        os.makedirs(d)
        self.proc.stdin.write(f"{d} {op}\n")
        self.proc.stdin.flush()
        store = oc.FileStore(d, 10.0)
        store.set("occl/rank/1", "fakehost/fake-boot 1 -1 00 127.0.0.1 1 1")
        token = bytes.fromhex(store.get("occl/job").decode())
        info = store.get("occl/rank/0").decode().split()
        sock = socket.create_connection((info[4], int(info[5])), timeout=5)
        try:
            for piece in pieces_for(token):
                try:
                    sock.sendall(piece)
                except OSError:  # rank 0 closed its end already: fine
                    break
            if end == "close":
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:  # rank 0 closed it first
                    pass
            return self.result(self.line(TIMEOUT_S + 8))
        finally:
            sock.close()

    def result(self, out):
        parts = out.split(" ", 4)
        if parts[0] == "OK":
            return ("OK", float(parts[1]), int(parts[2]), out.split(" ", 3)[3])
        return (parts[0], parts[1], float(parts[2]), int(parts[3]), parts[4])

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    t = Target(str(tmp_path_factory.mktemp("occl-wire")))
    yield t
    t.close()
    assert t.proc.returncode == 0, t.proc.stderr.read()[-3000:]


def check_failure(res, where=None, words=()):
    assert res[0] != "OK", res
    stage, name, seconds, rss, msg = res
    if where:
        assert stage == where, res
    assert name in ("occlRemoteError", "occlInvalidUsage", "occlTimeout"), res
    assert seconds < TIMEOUT_S + 3, res
    assert "rank 1" in msg or "TCP peer" in msg, res
    for w in words:
        assert w in msg, (w, res)


@pytest.mark.distributed
class TestOcclWireFakePeer:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("op,want", [("allreduce", "[3.5]"), ("recv", "[0, 1, 2, 3]"),
                                         ("barrier", "")])
    def test_the_fake_peer_speaks_the_protocol(self, target, op, want):
        res = target.run(op, lambda tok: session(tok, op))
        assert res[0] == "OK", res
        assert res[3].startswith(want), res

    @pytest.mark.parametrize("case,words", [
        # Each was accepted before the header checks: a round shorter than
        # its own header made rank 0 spin forever; a range whose end wraps
        # wrote outside the mirror; a huge message was allocated at once.
        ("round_shorter_than_its_header", ["malformed frame", "a round of 10 bytes"]),
        ("range_end_wraps", ["malformed frame", "slot range"]),
        ("range_past_the_slot", ["malformed frame", "slot range"]),
        ("ranges_disagree_with_length", ["malformed frame", "ranges hold"]),
        ("too_many_ranges", ["malformed frame", "slot ranges"]),
        ("round_out_of_order", ["malformed frame", "round 5 where round 1 was due"]),
        ("unknown_type", ["malformed frame", "unknown frame type 9"]),
        ("huge_message", ["malformed frame", "a message of 4611686018427387904 bytes"]),
        ("bad_magic", ["carried garbage"]),
        ("truncated_then_closed", ["was closed"]),
        ("mismatched_descriptor", ["mismatched collectives"]),
    ])
    def test_malformed_init_round_fails_clearly(self, target, case, words):
        good = round_frame(1, desc(BARRIER), [(0, 0, b"\x01\x01")])
        bad = {
            "round_shorter_than_its_header": frame(ROUND, 1, 0, bytes(10)),
            "range_end_wraps": frame(ROUND, 1, 1, desc(BARRIER) + struct.pack(
                "<QQQ", 0, 2**64 - 8, 16) + bytes(16)),
            "range_past_the_slot": frame(ROUND, 1, 1, desc(BARRIER) + struct.pack(
                "<QQQ", 1, (16 << 20) - 4, 8) + bytes(8)),
            "ranges_disagree_with_length": frame(ROUND, 1, 1, desc(BARRIER) + struct.pack(
                "<QQQ", 0, 0, 2) + bytes(100)),
            "too_many_ranges": frame(ROUND, 1, 2**40, desc(BARRIER)),
            "round_out_of_order": round_frame(5, desc(BARRIER), [(0, 0, b"\x01\x01")]),
            "unknown_type": frame(9, 1, 0, bytes(64)),
            "huge_message": frame(MESSAGE, 0, 2**62, b"x" * 1000, length=2**62),
            "bad_magic": b"\x00" * 4 + good[4:],
            "truncated_then_closed": good[:100],
            "mismatched_descriptor": round_frame(1, desc(ALLREDUCE, FLOAT32, 0, 3), []),
        }[case]
        res = target.run("barrier", lambda tok: [hello(tok), bad])
        check_failure(res, "INIT", words)

    def test_announced_message_costs_only_what_arrives(self, target):
        # 1 GiB announced (less than the device holds), 1 MiB sent, then the
        # peer goes quiet: rank 0 times out without having grown its buffer
        # past what arrived.
        def pieces(tok):
            s = session(tok, "recv")
            return s[:2] + [frame(MESSAGE, 7, 1 << 30, b"y" * (1 << 20), length=1 << 30)]
        res = target.run("recv", pieces, end="silent")
        check_failure(res, "OP", ["timed out"])
        assert res[3] - target.rss0 < 200, res

    def test_wrong_identity_is_refused(self, target):
        res = target.run("barrier", lambda tok: [hello(bytes(16))] + session(tok, "barrier")[1:])
        check_failure(res, "INIT", ["did not connect in time"])

    @settings(max_examples=WIRE_EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(stage=st.sampled_from([0, 1, 1, 2, 2, 2]),
           op=st.sampled_from(["allreduce", "recv", "barrier"]),
           how=st.sampled_from(["random", "truncate", "flip", "field", "append"]),
           data=st.data(), end=st.sampled_from(["close", "close", "close", "silent"]))
    def test_fuzzed_bytes_never_crash_hang_or_balloon(self, target, stage, op, how, data, end):
        """Part `stage` of the valid session (0: handshake, 1: first round,
        2: the operation) is replaced by random bytes, cut short, has a byte
        of its header flipped or a field set to an extreme value, or gets
        random bytes appended; what follows it is dropped."""
        def pieces(tok):
            parts = session(tok, op)
            good = parts[stage]
            if how == "random":
                bad = data.draw(st.binary(max_size=400), label="bytes")
            elif how == "truncate":
                bad = good[:data.draw(st.integers(0, len(good) - 1), label="cut")]
            elif how == "flip":
                i = data.draw(st.integers(0, min(len(good), 40 if stage == 0 else 200) - 1),
                              label="at")
                bad = good[:i] + bytes([good[i] ^ data.draw(st.integers(1, 255), label="xor")]) \
                    + good[i + 1:]
            elif how == "field":
                # One 8-byte word of the header area set to an extreme value.
                i = data.draw(st.integers(0, min(len(good), 40 if stage == 0 else 200) // 8 - 1),
                              label="word") * 8
                v = data.draw(st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1]),
                              label="value")
                bad = good[:i] + struct.pack("<Q", v) + good[i + 8:]
            else:
                bad = good + data.draw(st.binary(min_size=1, max_size=400), label="extra")
            return parts[:stage] + [bad]
        res = target.run(op, pieces, end=end)
        if res[0] == "OK":
            # Only bytes that still form a valid session (a flipped value,
            # trailing bytes after the last frame) can complete.
            assert how in ("flip", "field", "append"), res
            assert res[2] - target.rss0 < 200, res
            return
        stage_name, name, seconds, rss, msg = res
        assert name in ("occlRemoteError", "occlInvalidUsage", "occlTimeout"), res
        assert seconds < TIMEOUT_S + 3, res
        assert "rank 1" in msg or "TCP peer" in msg, res
        assert rss - target.rss0 < 200, res
