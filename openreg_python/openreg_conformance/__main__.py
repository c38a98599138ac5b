"""python -m openreg_conformance --device NAME [-m EXPR] [--junit FILE] [pytest args...]"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

from . import CLASSIFICATIONS

TESTS = pathlib.Path(__file__).resolve().parent / "tests"


def run(device: str, marker: str | None, junit: str, backend: str | None,
        extra: list[str], dist_backend: str | None = None,
        timeout: float | None = None) -> int:
    """Runs the suite in a child interpreter (only the backend under test is loaded:
    autoload off, its entry point called by the plugin); returns pytest's status."""
    cmd = [sys.executable, "-m", "pytest", str(TESTS), "-p", "openreg_conformance.plugin",
           "-c", os.devnull, "--rootdir", str(TESTS), "-p", "no:cacheprovider",
           f"--conformance-device={device}", f"--junitxml={junit}", "-q", "-rfEs"]
    if backend:
        cmd.append(f"--conformance-backend={backend}")
    if dist_backend:
        cmd.append(f"--conformance-dist-backend={dist_backend}")
    if marker:
        cmd += ["-m", marker]
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    return subprocess.run(cmd + extra, env=env, timeout=timeout).returncode


def summary(junit: str) -> tuple[str, int]:
    """The table per classification, and the number of failures."""
    rows = collections.OrderedDict((c, collections.Counter()) for c in CLASSIFICATIONS)
    notes = []
    failures = 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cls = props.get("classification", "?")
        name = case.get("name")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
            failures += 1
            notes.append(f"FAILED  [{cls}] {name}: PyTorch expectation: {props.get('expectation')}")
        elif case.find("skipped") is not None:
            outcome = "skipped"
            reason = case.find("skipped").get("message", "")
            notes.append(f"skipped [{cls}] {name}: {reason}")
        else:
            outcome = "passed"
        rows.setdefault(cls, collections.Counter())[outcome] += 1
    lines = [f"{'classification':<15}{'passed':>8}{'failed':>8}{'skipped':>9}"]
    for cls, c in rows.items():
        if sum(c.values()):
            lines.append(f"{cls:<15}{c['passed']:>8}{c['failed']:>8}{c['skipped']:>9}")
    total = sum((c for c in rows.values()), collections.Counter())
    lines.append(f"{'total':<15}{total['passed']:>8}{total['failed']:>8}{total['skipped']:>9}")
    return "\n".join(lines + ([""] + notes if notes else [])), failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m openreg_conformance",
                                 description="PyTorch's expectations of a PrivateUse1 backend")
    ap.add_argument("--device", required=True, help="the device name (torch.device(NAME))")
    ap.add_argument("-m", dest="marker", help="a classification (pytest -m expression)")
    ap.add_argument("--junit", help="the JUnit XML report (default conformance-DEVICE.xml)")
    ap.add_argument("--backend", help="the torch.backends entry point to load")
    ap.add_argument("--dist-backend", help="the device's c10d backend (for the distributed tests)")
    args, extra = ap.parse_known_args(argv)
    junit = args.junit or f"conformance-{args.device}.xml"
    status = run(args.device, args.marker, junit, args.backend, extra, args.dist_backend)
    if not os.path.exists(junit):
        print(f"conformance: pytest wrote no report (status {status})", file=sys.stderr)
        return status or 1
    table, failures = summary(junit)
    print(f"\nconformance of {args.device!r} (JUnit report: {junit})\n{table}")
    return 1 if failures or status not in (0, 5) else 0


if __name__ == "__main__":
    sys.exit(main())
