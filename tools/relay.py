"""The smoke target's CI job as one local command: PyTorch's Cross-Repository CI
Relay (RFC-0050) sends a PyTorch commit; this builds OpenReg against a torch,
runs the smoke subset, the gap tests and the conformance suite with JUnit
output, triages the failures, and writes the report that
``.github/workflows/relay.yml`` hands to test-infra's
``cross-repo-ci-relay-callback`` action (docs/ci.md).

    python tools/relay.py resolve --commit SHA     # which torch a relay event tests
    python tools/relay.py run --torch 2.14.1 [--out build/relay] [--event-commit SHA]
    python tools/relay.py run --torch 2.15.0 --pytorch-tests ../pytorch/test   # + PyTorch's own files
    python tools/relay.py tests-ref --torch 2.15.0                 # their ref: v2.15.0
    python tools/relay.py triage smoke.xml gaps.xml [--rerun R.xml] [--baseline B.xml]
    python tools/relay.py validate build/relay/report.json

The triage verdict (RFC-0054's categories), from JUnit files:

* a set-up or build step failed before any test ran: ``infra``;
* a failed test passes when re-run: ``flake``;
* a test fails on the torch under test and passes on the newest supported
  release (the baseline): ``upstream``, with the tests named;
* a test fails on both: ``backend`` (this backend's bug, whatever PyTorch did);
* failures the baseline could not judge: ``unknown``.

With ``--pytorch-tests``, PyTorch's own device-generic test files run as a
fourth step (tools/pytorch_suite.py, docs/pytorch-suite.md), which triages its
failures against the CPU itself: what it reports as defects count as failed
tests here, and are compared with the baseline like the rest.

A gap test that passes (``XPASS(strict)``: PyTorch fixed one of
docs/pytorch-gaps.md's gaps) is not a failure: the report lists it under
``gaps-fixed`` with the gap's number.

Standard library only (``run`` starts before any venv exists); ``validate``
needs ``jsonschema`` (requirements-dev.txt).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import urllib.parse
import urllib.request
import time
import xml.etree.ElementTree as ET

from torch_pin import window  # tools/, beside this file

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "tools" / "relay-report.schema.json"
ANALYZER = {"name": "openreg-relay-triage", "version": "1"}

# The callback's limits (test-infra's action inputs, RFC-0054).
MAX_FAILED = 1000
MAX_MESSAGE = 1024
MAX_STACKTRACE = 4096
MAX_SUMMARY = 1000
MAX_EVIDENCE = 10
MAX_VERDICT_BYTES = 16 * 1024

_XPASS_GAP = re.compile(r"XPASS\(strict\)\]?\s*gap (\d+)\b")


# ------------------------------------------------------------------ JUnit ----


@dataclasses.dataclass
class Case:
    """One test case of a JUnit file."""

    classname: str
    name: str
    outcome: str  # "passed", "failed", "skipped"
    message: str = ""
    stacktrace: str = ""
    duration: float = 0.0
    file: str = ""  # pytest's xunit1 "file" attribute, when present
    step: str = ""  # the step (JUnit file) it came from

    @property
    def key(self) -> str:
        return f"{self.classname}::{self.name}"

    @property
    def nodeid(self) -> str | None:
        """pytest's node id, from the xunit1 ``file`` attribute, else None."""
        if not self.file:
            return None
        module = self.file[:-3].replace("/", ".") if self.file.endswith(".py") else ""
        rest = self.classname[len(module) + 1:] if self.classname.startswith(module + ".") else ""
        return "::".join([self.file] + ([rest] if rest else []) + [self.name])

    def fixed_gap(self) -> int | None:
        """The gap number of a gap test that passed where a failure was expected."""
        m = _XPASS_GAP.search(self.message) if self.outcome == "failed" else None
        return int(m.group(1)) if m else None


def read_junit(path: str | os.PathLike, step: str | None = None) -> list[Case]:
    """The test cases of a JUnit XML file (pytest's, either family)."""
    cases = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        bad = tc.find("failure")
        if bad is None:
            bad = tc.find("error")
        skipped = tc.find("skipped")
        if bad is not None:
            outcome = "failed"
            message, trace = bad.get("message", ""), bad.text or ""
        elif skipped is not None:
            outcome, message, trace = "skipped", skipped.get("message", ""), ""
        else:
            outcome, message, trace = "passed", "", ""
        cases.append(Case(tc.get("classname", ""), tc.get("name", ""), outcome, message, trace,
                          float(tc.get("time", 0) or 0), tc.get("file", ""),
                          step or pathlib.Path(path).stem))
    return cases


# ----------------------------------------------------------------- triage ----


@dataclasses.dataclass
class Triage:
    category: str | None  # None: nothing failed
    confidence: str | None
    summary: str
    failed: list[Case]  # what stays failed (flakes and fixed gaps excluded)
    flaky: list[Case]
    fixed_gaps: list[tuple[int, Case]]
    upstream: list[Case]
    backend: list[Case]
    unjudged: list[Case]


def _names(cases: list[Case], limit: int = 5) -> str:
    names = [c.name for c in cases[:limit]]
    more = f" and {len(cases) - limit} more" if len(cases) > limit else ""
    return ", ".join(names) + more


def triage(results: list[Case], *, setup_failed: str | None = None,
           rerun: list[Case] | None = None, baseline: list[Case] | None = None,
           baseline_release: str = "the newest supported release") -> Triage:
    """The verdict of a run. ``setup_failed``: the set-up or build step that
    failed before any test (its name); ``rerun``: the failed tests run again on
    the torch under test; ``baseline``: the still-failing tests run on the
    newest supported release (None: not run)."""
    if setup_failed is not None:
        return Triage("infra", "high", f"the {setup_failed} step failed before any test ran",
                      [], [], [], [], [], [])
    fixed = [(c.fixed_gap(), c) for c in results if c.fixed_gap() is not None]
    failed = [c for c in results if c.outcome == "failed" and c.fixed_gap() is None]
    again = {c.key: c for c in (rerun or [])}
    flaky = [c for c in failed if c.key in again and again[c.key].outcome == "passed"]
    failed = [c for c in failed if c not in flaky]
    base = {c.key: c for c in (baseline or [])}
    upstream = [c for c in failed if c.key in base and base[c.key].outcome == "passed"]
    backend = [c for c in failed if c.key in base and base[c.key].outcome == "failed"]
    unjudged = [c for c in failed if c not in upstream and c not in backend]
    good = f"; PyTorch fixed gap {', '.join(str(n) for n, _ in fixed)}" if fixed else ""
    if backend:
        category, confidence = "backend", "high"
        summary = (f"{len(backend)} test(s) fail on this torch and on {baseline_release} too: "
                   f"{_names(backend)}")
        if upstream:
            summary += f"; {len(upstream)} fail only on this torch: {_names(upstream)}"
    elif upstream and not unjudged:
        category, confidence = "upstream", "high"
        summary = (f"{len(upstream)} test(s) fail on this torch and pass on {baseline_release}: "
                   f"{_names(upstream)}")
    elif failed:
        category, confidence = "unknown", "low"
        summary = (f"{len(failed)} test(s) failed and could not be compared with "
                   f"{baseline_release}: {_names(failed)}")
    elif flaky:
        category, confidence = "flake", "medium"
        summary = f"{len(flaky)} test(s) failed and passed when re-run: {_names(flaky)}"
    else:
        category, confidence, summary = None, None, "every test passed"
    return Triage(category, confidence, (summary + good)[:MAX_SUMMARY], failed, flaky, fixed,
                  upstream, backend, unjudged)


# ----------------------------------------------------------------- report ----


def _detail(c: Case) -> dict:
    return {"name": c.name, "classname": c.classname, "message": c.message[:MAX_MESSAGE],
            "stacktrace": c.stacktrace[-MAX_STACKTRACE:], "duration": round(c.duration, 3)}


def verdict_json(t: Triage, *, torch_commit: str | None, pr: int | None,
                 log_url: str | None = None) -> dict | None:
    """The ``triage-verdict`` input of the callback action (None: nothing to triage)."""
    if t.category is None:
        return None
    v = {"schema_version": 1, "category": t.category, "confidence": t.confidence,
         "summary": t.summary, "analyzer": ANALYZER,
         "analyzed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if t.category != "infra":  # failed tests are re-run once: did the failure come back?
        v["reproduced_on_retry"] = bool(t.failed)
    if t.category == "upstream":
        suspect = {"reason": f"passes on the baseline, fails on this torch: {_names(t.upstream)}"}
        if pr is not None:
            suspect["pr"] = pr
        if torch_commit:
            suspect["commit"] = torch_commit
        if "pr" in suspect or "commit" in suspect:
            v["suspected_upstream"] = suspect
        else:  # the schema wants a pr or a commit: say less rather than something false
            v["confidence"] = "medium"
    evidence = t.backend + t.upstream + t.unjudged + t.flaky
    v["evidence"] = [{"job": c.step, "test": c.key, "excerpt": c.message[:500],
                      **({"log_url": log_url} if log_url else {})}
                     for c in evidence[:MAX_EVIDENCE]]
    while len(json.dumps(v).encode()) > MAX_VERDICT_BYTES and v["evidence"]:
        v["evidence"].pop()
    return v


def build_report(results: list[Case], t: Triage, *, steps: list[dict], torch_info: dict,
                 baseline_release: str | None, pr: int | None = None,
                 log_url: str | None = None) -> dict:
    """The report: what the workflow passes to the callback action, and more."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for c in results:
        counts[c.outcome] += 1
    # A fixed gap is good news, not a failure; a flaky test passed in the end.
    good = {id(c) for _, c in t.fixed_gaps} | {id(c) for c in t.flaky}
    counts["failed"] -= len(good)
    counts["passed"] += len(good)
    counts["total"] = len(results)
    failing = t.category not in (None, "flake")
    report = {
        "status": "completed",
        "conclusion": "failure" if failing else "success",
        "test-results": counts,
        "failed-tests-detail": [_detail(c) for c in t.failed[:MAX_FAILED]],
        "torch": torch_info,
        "baseline": baseline_release,
        "steps": steps,
        "gaps-fixed": [{"gap": n, "test": c.key} for n, c in t.fixed_gaps],
        "flaky": [c.key for c in t.flaky],
        "summary": t.summary,
    }
    v = verdict_json(t, torch_commit=torch_info.get("git_version"), pr=pr, log_url=log_url)
    if v is not None:
        report["triage-verdict"] = v
    return report


def validate(report: dict) -> None:
    """Raises jsonschema.ValidationError if the report breaks
    tools/relay-report.schema.json (the callback action's inputs), or
    ValueError if the verdict is over the relay's 16 KB."""
    import jsonschema  # requirements-dev.txt

    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    if "triage-verdict" in report:
        size = len(json.dumps(report["triage-verdict"]).encode())
        if size > MAX_VERDICT_BYTES:
            raise ValueError(f"the triage verdict is {size} bytes, over the relay's "
                             f"{MAX_VERDICT_BYTES}")


# -------------------------------------------------------------------- run ----


# What an outer make passes down, which the steps' own make and pytest must not
# see: the twin of tests/_subprocess.MAKE_VARS (a tool cannot import the tests).
MAKE_VARS = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT",
             "MAKE_TERMERR", "TORCH", "VENV", "BUILD_DIR", "PYTEST_ARGS")


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in MAKE_VARS}


TAIL_LINES = 40  # of a failed step's log, printed


class Runner:
    """The steps of one run, each timed and logged to OUT/<step>.log."""

    def __init__(self, out: pathlib.Path):
        self.out = out
        self.steps: list[dict] = []

    def step(self, name: str, cmd: list[str], *, timeout: float, env: dict | None = None) -> bool:
        log = self.out / f"{name}.log"
        print(f"relay: {name}: {shlex.join(cmd)}", flush=True)
        t0 = time.monotonic()
        try:
            with open(log, "w") as f:
                rc = subprocess.run(cmd, cwd=ROOT, env=env or _env(), stdout=f,
                                    stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        self.steps.append({"name": name, "ok": rc == 0, "returncode": rc,
                           "seconds": round(time.monotonic() - t0, 1), "log": str(log)})
        if rc == 0:
            print(f"relay: {name}: ok", flush=True)
        else:
            tail = log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
            print(f"relay: {name}: failed ({rc}); the end of {log}:", *tail, sep="\n", flush=True)
        return rc == 0


def _venv_python(release: str) -> pathlib.Path:
    return ROOT / ".venv" / release / "bin" / "python"


def _torch_info(python: pathlib.Path) -> dict:
    code = ("import json, torch; print(json.dumps({'version': torch.__version__, "
            "'git_version': getattr(torch.version, 'git_version', None)}))")
    r = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(_env(), TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    return json.loads(r.stdout) if r.returncode == 0 else {"version": None, "git_version": None}


PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1"]
GAP_TESTS = ["tests/docs/test_pytorch_gaps.py", "tests/docs/test_torch_gates.py"]


def test_steps(python: pathlib.Path, out: pathlib.Path, tag: str = "") -> list[tuple]:
    """(step name, command, JUnit file) of the three test steps."""
    py = str(python)
    return [
        (f"smoke{tag}", [py, *PYTEST, "tests", "-m", "smoke", f"--junitxml={out}/smoke{tag}.xml"],
         out / f"smoke{tag}.xml"),
        (f"gaps{tag}", [py, *PYTEST, *GAP_TESTS, "-rxX", f"--junitxml={out}/gaps{tag}.xml"],
         out / f"gaps{tag}.xml"),
        (f"conformance{tag}", [py, "-m", "openreg_conformance", "--device", "openreg",
                               "--dist-backend", "occl", f"--junit={out}/conformance{tag}.xml"],
         out / f"conformance{tag}.xml"),
    ]


SUITE = "pytorch-suite"


def suite_cmd(python: pathlib.Path, tests: pathlib.Path, out: pathlib.Path,
              select: list[str] | None = None) -> list[str]:
    """PyTorch's device-generic test files (tools/pytorch_suite.py) on ``python``'s
    torch, from the test tree ``tests`` (docs/pytorch-suite.md)."""
    cmd = [str(python), str(ROOT / "tools" / "pytorch_suite.py"), "run", "--tests", str(tests),
           "--python", str(python), "--out", str(out)]
    return cmd + (["--select", *select] if select else [])


def suite_cases(out: pathlib.Path, ok: bool) -> tuple[list[Case], list[Case]]:
    """The suite's triaged JUnit file as the relay's cases, and its flaky tests
    as a failure that passed when re-run (the runner re-ran them already). A
    defect (a failure on the device alone that the expectations file does not
    name) is a failed case; excused, expected and skipped tests are skipped."""
    junit, report = out / "junit.xml", out / "report.json"
    if not junit.exists() or not report.exists():
        return [Case(SUITE, f"{SUITE} (no report)", "failed",
                     f"the {SUITE} step {'passed' if ok else 'failed'} and wrote no report",
                     step=SUITE)], []
    cases = read_junit(junit, SUITE)
    flaky = {f["test"] for f in json.loads(report.read_text())["flaky"]}
    rerun = []
    for i, c in enumerate(cases):
        if c.nodeid in flaky:
            cases[i] = dataclasses.replace(c, outcome="failed", message="failed, then passed")
            rerun.append(c)
    return cases, rerun


def _rerun_cmd(python: pathlib.Path, step: str, cmd: list[str], failed: list[Case],
               junit: pathlib.Path) -> list[str]:
    """The step again, for its failed tests only where pytest can name them."""
    ids = [c.nodeid for c in failed]
    cmd = [a if not a.startswith("--junit") else a.split("=")[0] + f"={junit}" for a in cmd]
    assert any(a.startswith("--junit") and a.endswith(f"={junit}") for a in cmd), cmd
    if step.startswith("conformance") or not ids or None in ids:
        return cmd
    return [str(python), *PYTEST, *ids, f"--junitxml={junit}"]


def _outcomes(junit: pathlib.Path, step: str, failed: list[Case], ok: bool) -> list[Case]:
    """The cases of a re-run's JUnit file; a re-run that exited 0 also
    passed every failed case its file does not name (a step's own failure)."""
    cases = read_junit(junit, step) if junit.exists() else []
    if ok:
        named = {c.key for c in cases}
        cases += [dataclasses.replace(c, outcome="passed", message="", stacktrace="")
                  for c in failed if c.key not in named]
    return cases


NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/cpu"
_WHEEL = re.compile(r"torch-([^-]+)-")


def _under_test(r: Runner, spec: str, releases: list[str],
                index_url: str | None) -> pathlib.Path | None:
    """Install and build the torch under test; its venv's python (None: a
    step failed). A release of the window uses make's own venv and build
    directory; a wheel (path or URL) or another version (a nightly, from
    ``index_url``) gets .venv/relay-<version> and build/relay-<version>, built
    with OPENREG_TORCH_UNLISTED=1 (tools/torch_pin.py)."""
    if spec in releases:
        ok = r.step("build", ["make", "build", f"TORCH={spec}"], timeout=3600)
        return _venv_python(spec) if ok else None
    m = _WHEEL.search(pathlib.PurePath(spec).name)
    version = m.group(1) if spec.endswith(".whl") and m else spec
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?[0-9A-Za-z.+]*", version):
        raise SystemExit(f"relay: --torch {spec!r} is neither a release of the window "
                         f"({', '.join(releases)}), a torch wheel nor a torch version")
    def rel(v):
        return tuple(int(x) for x in re.findall(r"\d+", v)[:3])
    if rel(version) < rel(releases[-1]):
        raise SystemExit(f"relay: torch {version} is older than the oldest release of the window "
                         f"({releases[-1]}, torch-releases.txt): OpenReg does not build against it")
    tag = f"relay-{version}"
    venv = ROOT / ".venv" / tag
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    constraint = venv / "torch-constraint.txt"
    env = dict(_env(), PIP_CONSTRAINT=str(constraint))
    if not r.step("venv", [sys.executable, "-m", "venv", str(venv)], timeout=600):
        return None
    constraint.write_text(f"torch=={version}\n")
    first = [spec] if spec.endswith(".whl") else \
        ["--pre", f"torch=={version}", "--index-url", index_url or NIGHTLY_INDEX]
    if not (r.step("install-torch", pip + first, timeout=3600, env=env)
            and r.step("install", pip + ["-r", "requirements-dev.txt"], timeout=3600, env=env)):
        return None
    (venv / ".deps-stamp").touch()  # make's venv step: done above
    ok = r.step("build", ["make", "build", f"VENV={venv}", f"BUILD_DIR=build/{tag}"],
                timeout=3600, env=dict(_env(), OPENREG_TORCH_UNLISTED="1"))
    return venv / "bin" / "python" if ok else None


def run(spec: str, out: pathlib.Path, *, pr: int | None = None, log_url: str | None = None,
        index_url: str | None = None, event_commit: str | None = None,
        pytorch_tests: pathlib.Path | None = None) -> dict:
    """Build against ``spec`` (a release of the window, a torch wheel, or a
    torch version from ``index_url``), test, triage; the report.
    ``pytorch_tests``: a PyTorch test tree at the tag of the torch under test,
    whose device-generic files run as one more step (tools/pytorch_suite.py)."""
    releases = window()
    newest = releases[0]
    out.mkdir(parents=True, exist_ok=True)
    r = Runner(out)
    python = _under_test(r, spec, releases, index_url)
    if python is None:
        t = triage([], setup_failed=r.steps[-1]["name"])
        report = build_report([], t, steps=r.steps, torch_info=_with_event({"spec": spec}, event_commit),
                              baseline_release=None, pr=pr, log_url=log_url)
        return _write(out, report)
    info = _with_event(dict(_torch_info(python), spec=spec), event_commit)
    results, rerun, baseline = [], [], None
    for name, cmd, junit in test_steps(python, out):
        ok = r.step(name, cmd, timeout=3600)
        cases = read_junit(junit, name) if junit.exists() else []
        failed = [c for c in cases if c.outcome == "failed" and c.fixed_gap() is None]
        if not ok and not failed:
            # A crash before the JUnit file, or an exit status no test explains:
            # a failure of the step itself, re-run and compared as a whole.
            rc = r.steps[-1]["returncode"]
            failed = [Case(name, f"{name} (exit status {rc})", "failed",
                           f"the {name} step exited with status {rc} and its JUnit file "
                           f"{'names no failed test' if junit.exists() else 'was not written'}",
                           step=name)]
            cases += failed
        results += cases
        if not ok and failed:
            again = out / f"{name}-rerun.xml"
            passed = r.step(f"{name}-rerun", _rerun_cmd(python, name, cmd, failed, again),
                            timeout=3600)
            rerun += _outcomes(again, name, failed, passed)
    if pytorch_tests is not None:
        # The runner re-runs and triages against the CPU itself: its JUnit
        # file's failures are defects already.
        ok = r.step(SUITE, suite_cmd(python, pytorch_tests, out / SUITE), timeout=7200)
        cases, again = suite_cases(out / SUITE, ok)
        results += cases
        rerun += again
    t = triage(results, rerun=rerun)
    if t.failed:
        # The baseline: the same tests on the newest supported release.
        if spec == newest:
            # Nothing newer to compare with: the run itself is the baseline,
            # and every failure that is not a flake is ours.
            baseline = t.failed
            t = triage(results, rerun=rerun, baseline=baseline,
                       baseline_release=f"{newest} (the torch under test)")
        elif r.step("baseline-build", ["make", "build", f"TORCH={newest}"], timeout=3600):
            base_py = _venv_python(newest)
            baseline = []
            for name, cmd, _ in test_steps(base_py, out, "-baseline"):
                mine = [c for c in t.failed if c.step == name.replace("-baseline", "")]
                if not mine:
                    continue
                junit = out / f"{name}.xml"
                passed = r.step(name, _rerun_cmd(base_py, name, cmd, mine, junit), timeout=3600)
                baseline += _outcomes(junit, name.replace("-baseline", ""), mine, passed)
            mine = [c for c in t.failed if c.step == SUITE and c.nodeid]
            if mine and pytorch_tests is not None:
                base_out = out / f"{SUITE}-baseline"
                r.step(f"{SUITE}-baseline", suite_cmd(base_py, pytorch_tests, base_out,
                                                      [c.nodeid for c in mine]), timeout=7200)
                if (base_out / "junit.xml").exists():
                    baseline += read_junit(base_out / "junit.xml", SUITE)
            t = triage(results, rerun=rerun, baseline=baseline, baseline_release=newest)
    report = build_report(results, t, steps=r.steps, torch_info=info,
                          baseline_release=newest if baseline is not None else None,
                          pr=pr, log_url=log_url)
    return _write(out, report, python)


def _with_event(info: dict, event_commit: str | None) -> dict:
    return dict(info, event_commit=event_commit) if event_commit else info


def _write(out: pathlib.Path, report: dict, python: pathlib.Path | None = None) -> dict:
    """Write OUT/report.json and check it against the schema, with the venv's
    python (jsonschema is in requirements-dev.txt) or, before one exists, this
    one; an invalid report raises SystemExit."""
    path = out / "report.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    checker = str(python) if python is not None and python.exists() else sys.executable
    r = subprocess.run([checker, __file__, "validate", str(path)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0 and "No module named 'jsonschema'" in r.stderr:
        print(f"relay: {path} not checked against the schema: no jsonschema for {checker}")
    elif r.returncode != 0:
        raise SystemExit(f"relay: the report breaks {SCHEMA.name}:\n{r.stderr[-3000:]}")
    print(f"relay: {report['conclusion']}: {report['summary']} (report: {path})", flush=True)
    return report


# ------------------------------------------------------- the torch of an event

GITHUB_API = "https://api.github.com"
GITHUB_RAW = "https://raw.githubusercontent.com"
# The first line of each commit of PyTorch's `nightly` branch: the day's cut of
# main, "2026-12-01 nightly release (<main's sha>)"; its wheels are
# <version.txt's X.Y.Z>.dev20261201 on the nightly index.
_NIGHTLY_TITLE = re.compile(r"(\d{4})-(\d{2})-(\d{2}) nightly release \(([0-9a-fA-F]{7,40})\)")


def _fetch(url: str, timeout: float = 30) -> str:
    req = urllib.request.Request(url, headers={"User-Agent": "openreg-relay",
                                               "Accept": "application/vnd.github+json"})
    token = os.environ.get("GITHUB_TOKEN")
    if token and urllib.parse.urlsplit(url).hostname == urllib.parse.urlsplit(GITHUB_API).hostname:
        req.add_header("Authorization", f"Bearer {token}")  # (rate limits; sent to the API only)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def resolve(commit: str | None, *, api: str = GITHUB_API, raw: str = GITHUB_RAW) -> tuple[str, str]:
    """The torch to test for a relay event about PyTorch commit ``commit``
    (None: the newest nightly), as ``(spec for run --torch, why)``: the
    nightly wheel of that commit if main was cut there, else the newest
    nightly (the event's commit has no wheel of its own: a pull request's
    never has one, and a push to main gets one only at the next day's cut),
    else, when PyTorch's nightly branch cannot be read, the newest release
    of the window."""
    try:
        commits = json.loads(_fetch(f"{api}/repos/pytorch/pytorch/commits?sha=nightly&per_page=100"))
        cuts = []  # (day, main's sha), newest first
        for c in commits:
            m = _NIGHTLY_TITLE.match(c["commit"]["message"].split("\n", 1)[0].strip())
            if m:
                cuts.append(("".join(m.group(1, 2, 3)), m.group(4).lower()))
        if not cuts:
            raise ValueError("no 'YYYY-MM-DD nightly release (sha)' commit on its nightly branch")
        sha = (commit or "").lower()
        mine = next(((d, s) for d, s in cuts if sha and (s.startswith(sha) or sha.startswith(s))),
                    None)
        day, cut = mine or cuts[0]
        text = _fetch(f"{raw}/pytorch/pytorch/{cut}/version.txt").strip()
        base = re.match(r"(\d+\.\d+\.\d+)", text)
        if not base:
            raise ValueError(f"version.txt at {cut[:12]} reads {text[:40]!r}")
        spec = f"{base.group(1)}.dev{day}"
        if mine:
            return spec, f"the nightly wheel of commit {cut[:12]} ({spec})"
        if commit:
            return spec, (f"commit {sha[:12]} has no nightly wheel: the newest nightly, "
                          f"of commit {cut[:12]} ({spec})")
        return spec, f"the newest nightly, of commit {cut[:12]} ({spec})"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        newest = window()[0]
        return newest, (f"the newest release of the window ({newest}): PyTorch's nightly "
                        f"branch could not be read ({type(e).__name__}: {e})")


def tests_ref(spec: str, commit: str | None = None) -> str:
    """The ref of pytorch/pytorch whose test/ folder goes with the torch under
    test: a release's tag (``v2.15.0``); for a nightly or a wheel, the event's
    commit, else ``main`` (the nightly is main's daily cut)."""
    if re.fullmatch(r"\d+\.\d+\.\d+", spec):
        return f"v{spec}"
    if commit and re.fullmatch(r"[0-9a-fA-F]{7,40}", commit):
        return commit
    return "main"


# -------------------------------------------------------------------- CLI ----


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/relay.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="build, test, triage and write OUT/report.json")
    p.add_argument("--torch", required=True,
                   help="a release of torch-releases.txt, a torch wheel (path or URL), or a "
                        "torch version from --index-url (a nightly)")
    p.add_argument("--index-url", help=f"where a --torch version comes from (default {NIGHTLY_INDEX})")
    p.add_argument("--out", default="build/relay", type=pathlib.Path)
    p.add_argument("--pr", type=int, help="the PyTorch pull request under test (the verdict names it)")
    p.add_argument("--log-url", help="where the run's logs are (the verdict's evidence links it)")
    p.add_argument("--event-commit", help="the PyTorch commit of the relay's event (the report "
                                          "says it beside the torch it tested)")
    p.add_argument("--pytorch-tests", type=pathlib.Path,
                   help="a PyTorch test tree at the tag of the torch under test: its "
                        "device-generic files run too, triaged against the CPU "
                        "(tools/pytorch_suite.py)")
    p = sub.add_parser("resolve", help="print the --torch a relay event about PyTorch commit "
                                       "SHA tests (the reason goes to stderr)")
    p.add_argument("--commit", help="the event's PyTorch commit (none: the newest nightly)")
    p.add_argument("--api", default=GITHUB_API, help=argparse.SUPPRESS)
    p.add_argument("--raw", default=GITHUB_RAW, help=argparse.SUPPRESS)
    p = sub.add_parser("tests-ref", help="print the pytorch/pytorch ref whose test/ folder goes "
                                         "with --torch (for --pytorch-tests)")
    p.add_argument("--torch", required=True)
    p.add_argument("--commit", help="the event's PyTorch commit")
    p = sub.add_parser("triage", help="the verdict of JUnit files, as the report's JSON")
    p.add_argument("junit", nargs="+", type=pathlib.Path)
    p.add_argument("--rerun", nargs="*", default=[], type=pathlib.Path)
    p.add_argument("--baseline", nargs="*", default=None, type=pathlib.Path)
    p.add_argument("--setup-failed", metavar="STEP")
    p = sub.add_parser("validate", help="check a report against tools/relay-report.schema.json")
    p.add_argument("report", type=pathlib.Path)
    args = ap.parse_args(argv)

    if args.command == "run":
        report = run(args.torch, args.out.resolve(), pr=args.pr, log_url=args.log_url,
                     index_url=args.index_url, event_commit=args.event_commit,
                     pytorch_tests=args.pytorch_tests.resolve() if args.pytorch_tests else None)
        return 0 if report["conclusion"] == "success" else 1
    if args.command == "resolve":
        spec, why = resolve(args.commit, api=args.api, raw=args.raw)
        print(spec)
        print(f"relay: testing {why}", file=sys.stderr)
        return 0
    if args.command == "tests-ref":
        print(tests_ref(args.torch, args.commit))
        return 0
    if args.command == "triage":
        results = [c for f in args.junit for c in read_junit(f)]
        rerun = [c for f in args.rerun for c in read_junit(f)]
        baseline = None if args.baseline is None else [c for f in args.baseline for c in read_junit(f)]
        t = triage(results, setup_failed=args.setup_failed, rerun=rerun, baseline=baseline)
        report = build_report(results, t, steps=[], torch_info={}, baseline_release=None)
        print(json.dumps(report, indent=2))
        return 0 if report["conclusion"] == "success" else 1
    report = json.loads(args.report.read_text())
    validate(report)
    print(f"{args.report}: valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
