"""PyTorch's own device-generic test files (``instantiate_device_type_tests``)
run against a PrivateUse1 backend, and every failure triaged against the CPU:
the smoke target's acceptance test (docs/pytorch-suite.md).

    python tools/pytorch_suite.py run --tests ../shared/pytorch-tests \\
        --python .venv/2.15.0/bin/python --out build/pytorch-suite/2.15.0
    python tools/pytorch_suite.py twin 'test_x.py::TestFooPRIVATEUSE1::test_y_openreg_float32'
    python tools/pytorch_suite.py check-expectations [FILE]

``--tests`` is a PyTorch test tree at the release's tag (``test/`` of a
checkout; here, ../shared/pytorch-tests holds six files): the files are run
from there, never copied. ``make check-pytorch-suite TORCH=<release>`` runs it
on a release's venv.

For each file (one pytest process each, a timeout each):

1. the file's PrivateUse1 tests (``PYTORCH_TESTING_DEVICE_ONLY_FOR=privateuse1``,
   the backend autoloaded), with JUnit output;
2. its failures once more on the device: one that passes is **flaky**;
3. the failures left, and every test skipped on the device, as their CPU twins
   (``test_x_openreg_float32`` -> ``test_x_cpu_float32``, class ``...PRIVATEUSE1``
   -> ``...CPU``) in a process without the backend: a failure that fails on
   the CPU too is **excused**; one that fails on the device alone is a
   **defect**, unless the expectations file names it (**expected**) with one of
   three kinds of reason: ``pytorch-gap`` (an entry of docs/pytorch-gaps.md,
   which has its strict test), ``cuda-only`` (behaviour the test hard-codes
   for CUDA: the line is cited) or ``resource`` (a limit of the 2-core, 24 GB
   machine). A test skipped on the device that runs on the CPU is counted
   with its skip reason: a skip is a hidden gap until it has a reason.

A file that does not import (a test file of another PyTorch release) is
reported as not importable when it fails so on the CPU without the backend
too, and as a defect when only the backend's presence breaks it.

It writes OUT/<file>.xml (pytest's JUnit of step 1), OUT/junit.xml (every
test with its triaged outcome) and OUT/report.json (passed, failed, flaky,
timed out, excused, expected, skips; tools/relay.py reads it), prints a table
per file, and exits 1 when a defect or a timeout is left.

Standard library only; the backend and the files run in ``--python``'s
interpreter.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import fnmatch
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
EXPECTATIONS = TOOLS / "pytorch_suite_expectations.json"
GAPS_PAGE = ROOT / "docs" / "pytorch-gaps.md"
KINDS = ("pytorch-gap", "cuda-only", "resource")
DEFAULT_TIMEOUT = 1200  # seconds per file and step

# What an outer make passes down, which the files' pytest must not see (the
# twin of tools/relay.py's MAKE_VARS).
MAKE_VARS = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT",
             "MAKE_TERMERR", "TORCH", "VENV", "BUILD_DIR", "PYTEST_ARGS")


# ------------------------------------------------------------ test ids ----


def device_class_suffixes(device: str) -> tuple[str, ...]:
    """instantiate_device_type_tests names a class ``<Base><DEVICE_TYPE.upper()>``.
    PrivateUse1TestBase's device type is ``privateuse1`` until the first
    instantiated test sets it up, and the backend's name after that (its
    setUpClass writes the name into the base class): a file's first class is
    ``TestFooPRIVATEUSE1``, later ones ``TestBarOPENREG``."""
    return ("PRIVATEUSE1", device.upper())


def twin(nodeid: str, device: str, other: str = "cpu") -> str:
    """The node id of ``nodeid``'s twin on ``other``: its class's device suffix
    and the device's name in the test's name replaced. A test of a class that
    is not device-generic is its own twin."""
    parts = nodeid.split("::")
    if len(parts) < 3:
        return nodeid
    *path, cls, name = parts
    suffix = next((s for s in device_class_suffixes(device) if cls.endswith(s)), None)
    if suffix is None:
        return nodeid
    cls = cls[: -len(suffix)] + other.upper()
    # The device's name is a whole '_'-separated word of the test's name (the
    # last such word: 'test_x_openreg_float32', 'test_x_openreg').
    m = list(re.finditer(rf"_{re.escape(device)}(?=_|$|\[)", name))
    if m:
        last = m[-1]
        name = name[: last.start()] + f"_{other}" + name[last.end():]
    return "::".join([*path, cls, name])


# -------------------------------------------------------- expectations ----


@dataclasses.dataclass
class Expectation:
    tests: list[str]  # fnmatch patterns over node ids
    kind: str
    reason: str
    gap: int | None = None
    cite: str | None = None
    run: bool = True  # False: a resource entry whose tests are not run (time)

    def matches(self, nodeid: str) -> bool:
        return any(fnmatch.fnmatchcase(nodeid, p) for p in self.tests)


class ExpectationsError(ValueError):
    """The expectations file breaks its rules (docs/pytorch-suite.md)."""


def _gap_numbers(page: pathlib.Path = GAPS_PAGE) -> set[int]:
    return {int(m) for m in re.findall(r"^### (\d+)\. ", page.read_text(), re.M)}


def load_expectations(path: pathlib.Path | None, tests_dir: pathlib.Path | None = None,
                      gaps_page: pathlib.Path = GAPS_PAGE) -> list[Expectation]:
    """The entries of an expectations file, checked: a kind of the three; a
    ``pytorch-gap`` names a gap of docs/pytorch-gaps.md; a ``cuda-only``
    cites ``file:line`` (and, with ``tests_dir``, that line says cuda); every
    entry gives a reason."""
    if path is None or not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ExpectationsError(f"{path}: not JSON: {e}") from None
    entries = data.get("expected") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ExpectationsError(f"{path}: expected an object with a list 'expected'")
    gaps = _gap_numbers(gaps_page) if gaps_page.exists() else set()
    out = []
    for i, e in enumerate(entries):
        where = f"{path.name}: entry {i}"
        if not isinstance(e, dict):
            raise ExpectationsError(f"{where}: not an object")
        tests = e.get("tests")
        if isinstance(tests, str):
            tests = [tests]
        if not tests or not all(isinstance(t, str) and "::" in t for t in tests):
            raise ExpectationsError(f"{where}: 'tests' must be node ids (file::class::test, "
                                    f"patterns allowed)")
        kind, reason = e.get("kind"), e.get("reason")
        if kind not in KINDS:
            raise ExpectationsError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)} "
                                    f"(an openreg defect is fixed, not expected)")
        if not isinstance(reason, str) or len(reason.strip()) < 10:
            raise ExpectationsError(f"{where}: a reason of a sentence is required")
        gap = e.get("gap")
        cite = e.get("cite")
        if kind == "pytorch-gap":
            if not isinstance(gap, int) or gap not in gaps:
                raise ExpectationsError(f"{where}: a pytorch-gap entry names the number of a gap "
                                        f"of {gaps_page.name} ('gap': N); {gap!r} is none")
        if kind == "cuda-only":
            m = re.fullmatch(r"([\w./-]+\.py):(\d+)", cite or "")
            if not m:
                raise ExpectationsError(f"{where}: a cuda-only entry cites the line of the test "
                                        f"that hard-codes CUDA ('cite': 'test_x.py:123')")
            if tests_dir is not None and (tests_dir / m.group(1)).exists():
                lines = (tests_dir / m.group(1)).read_text().splitlines()
                n = int(m.group(2))
                if not (1 <= n <= len(lines) and "cuda" in lines[n - 1].lower()):
                    raise ExpectationsError(f"{where}: {cite} does not say cuda")
        run = e.get("run", True)
        if run is not True and (run is not False or kind != "resource"):
            raise ExpectationsError(f"{where}: only a resource entry may say \"run\": false "
                                    f"(tests that pass but take the machine too long)")
        out.append(Expectation(list(tests), kind, reason.strip(), gap, cite, run))
    return out


def load_environment(path: pathlib.Path | None) -> dict[str, str]:
    """The expectations file's ``environment``: the backend's settings for the
    run (variables and values, strings), given with an ``environment_reason``."""
    if path is None or not path.exists():
        return {}
    data = json.loads(path.read_text())
    env = data.get("environment", {}) if isinstance(data, dict) else {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in env.items()):
        raise ExpectationsError(f"{path.name}: 'environment' maps variable names to strings")
    if env and len(str(data.get("environment_reason", "")).strip()) < 10:
        raise ExpectationsError(f"{path.name}: an 'environment' needs its 'environment_reason'")
    return env


# ------------------------------------------------------------- running ----


@dataclasses.dataclass
class Run:
    """One pytest process over one file: each test's outcome and message."""

    results: dict[str, tuple[str, str]]  # nodeid -> (outcome, message)
    running: str | None  # the test that had started when it stopped (timeout or crash)
    returncode: int | str  # "timeout" when killed
    seconds: float
    log: str

    @property
    def timed_out(self) -> bool:
        return self.returncode == "timeout"


def _env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in MAKE_VARS}
    env.update(extra)
    return env


def read_progress(path: pathlib.Path) -> tuple[dict[str, tuple[str, str]], str | None]:
    results, running = {}, None
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a killed process
            if "start" in rec:
                running = rec["start"]
            elif "end" in rec:
                results[rec["end"]] = (rec["outcome"], rec["message"])
                running = None if running == rec["end"] else running
            elif "deselected" in rec:
                results[rec["deselected"]] = ("not run", "")
    return results, running


def run_pytest(python: str, tests_dir: pathlib.Path, args: list[str], *, device_type: str,
               out: pathlib.Path, name: str, timeout: float, env: dict,
               select: list[str] | None = None, deselect: list[str] | None = None) -> Run:
    """``python -m pytest ARGS`` in ``tests_dir`` for ``device_type``'s tests
    (only the node ids ``select``, if given), killed (its whole process group)
    after ``timeout`` seconds."""
    progress = out / f"{name}.progress.jsonl"
    progress.unlink(missing_ok=True)
    log = out / f"{name}.log"
    cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "pytorch_suite_progress",
           "-o", "junit_family=xunit1", "-q", "-rN", "--tb=short", *args]
    extra = {}
    if select is not None:
        ids = out / f"{name}.ids"
        ids.write_text("\n".join(select) + "\n")
        extra["PYTORCH_SUITE_SELECT"] = str(ids)
    if deselect:
        pats = out / f"{name}.deselect"
        pats.write_text("\n".join(deselect) + "\n")
        extra["PYTORCH_SUITE_DESELECT"] = str(pats)
    env = _env({"PYTORCH_TESTING_DEVICE_ONLY_FOR": device_type,
                "PYTORCH_SUITE_PROGRESS": str(progress),
                # The failure's own line, without the re-run recipe PyTorch appends.
                "PYTORCH_PRINT_REPRO_ON_FAILURE": "0",
                **extra,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(TOOLS),
                                                            env.get("PYTHONPATH", "")])),
                **{k: v for k, v in env.items() if k != "PYTHONPATH"}})
    t0 = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=tests_dir, env=env, stdout=f, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            rc: int | str = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
        finally:
            # The file's own children (a test that spawns) go with it.
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    results, running = read_progress(progress)
    return Run(results, running, rc, round(time.monotonic() - t0, 1), str(log))


# -------------------------------------------------------------- triage ----


@dataclasses.dataclass
class FileReport:
    file: str
    seconds: float
    returncode: int | str
    timed_out: str | None  # the test that was running when the file timed out
    counts: dict
    passed: list[str]
    failed: list[dict]  # defects
    flaky: list[dict]
    excused: list[dict]
    expected: list[dict]
    skipped: list[dict]  # on the device, with reason and what the CPU did
    xfailed: list[str]
    not_run: int  # tests that never ran (after a timeout or crash)
    cpu_seconds: float | None = None  # the whole file on the CPU (--cpu-timing)
    # Why the file ran no test because pytest could not collect it (an import
    # error), and whether it fails so on the CPU without the backend too (a
    # file of another PyTorch release: not the backend's).
    import_error: str | None = None
    import_fails_on_cpu: bool = False


def triage_file(file: str, device: str, first: Run, again: Run | None, cpu: Run | None,
                expectations: list[Expectation], collected: int | None = None,
                cpu_seconds: float | None = None) -> FileReport:
    """The outcome of each of ``file``'s tests from its three runs."""
    passed, failed, flaky, excused, expected, skipped, xfailed = [], [], [], [], [], [], []
    again_r = again.results if again else {}
    cpu_r = cpu.results if cpu else {}
    timed_out = first.running if first.timed_out else None
    results = dict(first.results)
    if first.running and first.running not in results:
        # The test that was running when the file timed out or crashed.
        why = ("the file timed out while it ran" if first.timed_out else
               f"the process died while it ran (exit status {first.returncode})")
        results[first.running] = ("failed", why)
    for nodeid, (outcome, message) in sorted(results.items()):
        if outcome == "not run":  # a resource entry's test, left out on purpose
            exp = next(e for e in expectations if e.matches(nodeid))
            expected.append({"test": nodeid, "message": "not run", "cpu_twin": twin(nodeid, device),
                             "cpu": None, "kind": exp.kind, "reason": exp.reason, "ran": False})
            continue
        if outcome in ("passed", "xfailed"):
            (passed if outcome == "passed" else xfailed).append(nodeid)
            continue
        cpu_id = twin(nodeid, device)
        cpu_outcome, cpu_message = cpu_r.get(cpu_id, (None, ""))
        if outcome == "skipped":
            skipped.append({"test": nodeid, "reason": message, "cpu": cpu_outcome,
                            "cpu_twin": cpu_id})
            continue
        # failed or xpassed (a test that passed where its author expected a failure)
        if nodeid in again_r and again_r[nodeid][0] in ("passed", "xfailed"):
            flaky.append({"test": nodeid, "message": message})
            continue
        entry = {"test": nodeid, "message": message, "cpu_twin": cpu_id, "cpu": cpu_outcome}
        if cpu_outcome in ("failed", "xpassed"):
            excused.append(dict(entry, cpu_message=cpu_message))
            continue
        exp = next((e for e in expectations if e.matches(nodeid)), None)
        if exp is not None and nodeid != timed_out:
            expected.append(dict(entry, kind=exp.kind, reason=exp.reason,
                                 **({"gap": exp.gap} if exp.gap else {}),
                                 **({"cite": exp.cite} if exp.cite else {})))
            continue
        if cpu_outcome is None:
            entry["cpu"] = "not run" if cpu is None else "not found"
        failed.append(entry)
    ran = len(results)
    not_run = max(0, (collected or ran) - ran)
    counts = {"tests": ran, "passed": len(passed), "failed": len(failed), "flaky": len(flaky),
              "excused": len(excused), "expected": len(expected), "skipped": len(skipped),
              "skipped_run_on_cpu": sum(1 for s in skipped if s["cpu"] not in (None, "skipped")),
              "xfailed": len(xfailed), "timed_out": 1 if timed_out else 0, "not_run": not_run}
    return FileReport(file, first.seconds, first.returncode, timed_out, counts, passed, failed,
                      flaky, excused, expected, skipped, xfailed, not_run, cpu_seconds)


def collect_count(python: str, tests_dir: pathlib.Path, file: str, device_type: str,
                  timeout: float, env: dict | None = None) -> int | None:
    """How many of the file's tests pytest collects for ``device_type`` (None:
    collection failed), so that tests a timeout kept from running are counted."""
    try:
        r = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only",
                            "-q", file], cwd=tests_dir, capture_output=True, text=True,
                           timeout=timeout,
                           env=_env({"PYTORCH_TESTING_DEVICE_ONLY_FOR": device_type,
                                     **(env or {})}))
    except subprocess.TimeoutExpired:
        return None
    return sum(1 for line in r.stdout.splitlines() if "::" in line) if r.returncode == 0 else None


def collection_error(log: str) -> str:
    """The error line of a file pytest could not collect (its log's last 'E' line)."""
    lines = [line[1:].strip() for line in pathlib.Path(log).read_text(errors="replace")
             .splitlines() if line.startswith("E ")]
    return lines[-1][:500] if lines else "pytest collected nothing (see the log)"


def run_file(python: str, tests_dir: pathlib.Path, file: str, out: pathlib.Path, *,
             device: str, timeout: float, expectations: list[Expectation],
             select: list[str] | None = None, cpu_timing: bool = False,
             run_all: bool = False, env: dict | None = None) -> FileReport:
    """The three runs of one file, triaged."""
    env = env or {}
    stem = file[:-3] if file.endswith(".py") else file
    left_out = None if run_all else [p for e in expectations if not e.run for p in e.tests]
    first = run_pytest(python, tests_dir, [file, f"--junitxml={out}/{stem}.xml"],
                       device_type="privateuse1", out=out, name=stem, timeout=timeout, env=env,
                       select=select, deselect=left_out)
    if not first.results and not first.running and first.returncode not in (0, 5, "timeout"):
        # Nothing ran: the file does not import here. Is it the backend's doing,
        # or does it fail so without the backend too?
        reason = collection_error(first.log)
        on_cpu = collect_count(python, tests_dir, file, "cpu", timeout,
                               dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")) is None
        report = triage_file(file, device, first, None, None, expectations)
        report.import_error, report.import_fails_on_cpu = reason, on_cpu
        if not on_cpu:
            report.failed.append({"test": file, "message": f"the file does not import with "
                                  f"the backend loaded: {reason}", "cpu_twin": file,
                                  "cpu": "imports"})
            report.counts["failed"] += 1
        return report
    collected = None
    if first.timed_out or first.returncode not in (0, 1, 5):
        collected = len(select) if select else collect_count(python, tests_dir, file,
                                                             "privateuse1", timeout)
    bad = [n for n, (o, _) in first.results.items() if o in ("failed", "xpassed")]
    again = None
    if bad:
        again = run_pytest(python, tests_dir, [file], device_type="privateuse1", out=out,
                           name=f"{stem}-rerun", timeout=timeout, env=env, select=bad)
    skips = [n for n, (o, _) in first.results.items() if o == "skipped"]
    still = [n for n in bad if not (again and again.results.get(n, ("",))[0] in ("passed",
                                                                                 "xfailed"))]
    if first.running and first.running not in first.results:
        still.append(first.running)
    cpu = None
    twins = sorted({twin(n, device) for n in still + skips})
    # The CPU oracle runs without the backend: PyTorch as it is, on the CPU.
    cpu_env = dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    if twins:
        cpu = run_pytest(python, tests_dir, [file], device_type="cpu", out=out,
                         name=f"{stem}-cpu", timeout=timeout, env=cpu_env, select=twins)
    cpu_seconds = None
    if cpu_timing:
        # The same tests as the device run: the patterns left out match the
        # CPU's classes too (TestFoo*).
        whole = run_pytest(python, tests_dir, [file, f"--junitxml={out}/{stem}-cpu-timing.xml"],
                           device_type="cpu", out=out, name=f"{stem}-cpu-timing",
                           timeout=timeout, env=cpu_env, deselect=left_out)
        cpu_seconds = whole.seconds
    return triage_file(file, device, first, again, cpu, expectations, collected, cpu_seconds)


# -------------------------------------------------------------- report ----


def _junit(reports: list[FileReport], path: pathlib.Path) -> None:
    """Every test with its triaged outcome: a defect is a failure; excused,
    expected and device skips are skipped, saying why."""
    suite = ET.Element("testsuite", name="pytorch-suite")
    def case(nodeid, file):
        cls = nodeid.split("::")[-2] if nodeid.count("::") >= 2 else ""
        return ET.SubElement(suite, "testcase", classname=f"{file[:-3]}.{cls}".strip("."),
                             name=nodeid.split("::")[-1], file=file)
    for r in reports:
        for n in r.passed + [f["test"] for f in r.flaky] + r.xfailed:
            case(n, r.file)
        for f in r.failed:
            ET.SubElement(case(f["test"], r.file), "failure",
                          message=f"{f['message'][:1000]} (CPU twin: {f['cpu']})")
        for f in r.excused:
            ET.SubElement(case(f["test"], r.file), "skipped",
                          message=f"excused: fails on the CPU too: {f['cpu_message'][:500]}")
        for f in r.expected:
            ET.SubElement(case(f["test"], r.file), "skipped",
                          message=f"expected ({f['kind']}): {f['reason']}")
        for s in r.skipped:
            ET.SubElement(case(s["test"], r.file), "skipped", message=s["reason"][:1000])
        if r.import_error and r.import_fails_on_cpu:
            ET.SubElement(case(f"{r.file}::<import>", r.file), "skipped",
                          message=f"does not import on this torch: {r.import_error[:900]}")
    suite.attrib.update(tests=str(len(suite)),
                        failures=str(sum(len(r.failed) for r in reports)))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def build_report(reports: list[FileReport], *, device: str, tests_dir: pathlib.Path,
                 torch_version: str | None, expectations_path: pathlib.Path | None,
                 expectations: list[Expectation], seconds: float) -> dict:
    totals: dict[str, int] = {}
    for r in reports:
        for k, v in r.counts.items():
            totals[k] = totals.get(k, 0) + v
    skip_reasons: dict[str, int] = {}
    for r in reports:
        for s in r.skipped:
            if s["cpu"] not in (None, "skipped"):
                key = s["reason"].splitlines()[0][:200] if s["reason"] else "(no reason)"
                skip_reasons[key] = skip_reasons.get(key, 0) + 1
    used = {id(e) for r in reports for f in r.expected for e in expectations
            if e.matches(f["test"])}
    timed_out = [{"file": r.file, "test": r.timed_out} for r in reports if r.timed_out]
    return {
        "device": device,
        "torch": torch_version,
        "tests_dir": str(tests_dir),
        "provenance": _provenance(tests_dir),
        "expectations": str(expectations_path) if expectations_path else None,
        "environment": load_environment(expectations_path),
        "conclusion": "failure" if totals.get("failed") or timed_out else "success",
        "seconds": round(seconds, 1),
        "totals": totals,
        "files": [{"file": r.file, "seconds": r.seconds, "cpu_seconds": r.cpu_seconds,
                   "returncode": r.returncode, "counts": r.counts,
                   **({"import_error": r.import_error} if r.import_error else {})}
                  for r in reports],
        "failed": [dict(f, file=r.file) for r in reports for f in r.failed],
        "flaky": [dict(f, file=r.file) for r in reports for f in r.flaky],
        "timed_out": timed_out,
        "not_importable": [{"file": r.file, "reason": r.import_error} for r in reports
                           if r.import_error and r.import_fails_on_cpu],
        "excused": [dict(f, file=r.file) for r in reports for f in r.excused],
        "expected": [dict(f, file=r.file) for r in reports for f in r.expected],
        "unused_expectations": [e.tests for e in expectations if id(e) not in used],
        "skipped_run_on_cpu": [dict(s, file=r.file) for r in reports for s in r.skipped
                               if s["cpu"] not in (None, "skipped")],
        "skip_reasons_run_on_cpu": dict(sorted(skip_reasons.items(), key=lambda kv: -kv[1])),
    }


def _provenance(tests_dir: pathlib.Path) -> list[dict]:
    """PROVENANCE.tsv beside the files, where there is one (repository, path, commit)."""
    tsv = tests_dir / "PROVENANCE.tsv"
    if not tsv.exists():
        return []
    lines = [line.split("\t") for line in tsv.read_text().splitlines() if line.strip()]
    head, rows = lines[0], lines[1:]
    return [dict(zip(head, row)) for row in rows]


def print_table(report: dict) -> None:
    cols = ("tests", "passed", "failed", "flaky", "excused", "expected", "skipped",
            "skipped_run_on_cpu", "timed_out")
    heads = ("tests", "passed", "defects", "flaky", "excused", "expected", "skipped",
             "skip/cpu ran", "timeout")
    w = max([len(f["file"]) for f in report["files"]] + [5])
    print(f"{'file':<{w}} " + " ".join(f"{h:>8}" for h in heads) + "   seconds (cpu)")
    for f in report["files"] + [{"file": "total", "counts": report["totals"],
                                 "seconds": report["seconds"], "cpu_seconds": None}]:
        c = f["counts"]
        cpu = f" ({f['cpu_seconds']:.0f})" if f.get("cpu_seconds") else ""
        print(f"{f['file']:<{w}} " + " ".join(f"{c.get(k, 0):>8}" for k in cols)
              + f"   {f['seconds']:.0f}{cpu}")
    for f in report["failed"]:
        print(f"DEFECT  {f['test']}: {f['message'][:300]} (CPU twin: {f['cpu']})")
    for f in report["timed_out"]:
        print(f"TIMEOUT {f['file']}: while running {f['test']}")
    for f in report["not_importable"]:
        print(f"NOT RUN {f['file']}: does not import on this torch, with or without the "
              f"backend: {f['reason']}")
    for f in report["flaky"]:
        print(f"FLAKY   {f['test']}: {f['message'][:200]}")
    for tests in report["unused_expectations"]:
        print(f"note: no failure matched the expectation for {', '.join(tests)}")
    print(f"pytorch-suite: {report['conclusion']}: {report['totals'].get('passed', 0)} passed, "
          f"{report['totals'].get('failed', 0)} defects, {report['totals'].get('excused', 0)} "
          f"excused (fail on the CPU too), {report['totals'].get('expected', 0)} expected, "
          f"{report['totals'].get('flaky', 0)} flaky, {len(report['timed_out'])} timed out, "
          f"{report['totals'].get('skipped_run_on_cpu', 0)} skipped on the device that run on "
          f"the CPU, {len(report['not_importable'])} file(s) that do not import on this torch",
          flush=True)


def _backend(python: str) -> tuple[str, str]:
    """The PrivateUse1 backend's name and torch's version, from ``python``."""
    code = ("import torch; print(torch._C._get_privateuse1_backend_name()); "
            "print(torch.__version__)")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=600,
                       env=_env({}))
    if r.returncode != 0:
        raise SystemExit(f"pytorch-suite: {python} cannot import torch with its backend:\n"
                         f"{r.stderr[-2000:]}")
    name, version = r.stdout.split()[-2:]
    if name == "privateuseone":
        raise SystemExit(f"pytorch-suite: no PrivateUse1 backend is registered when {python} "
                         f"imports torch (is its autoload entry point installed?)")
    return name, version


def run(tests_dir: pathlib.Path, python: str, out: pathlib.Path, *, files: list[str] | None,
        timeout: float, expectations_path: pathlib.Path | None, select: list[str] | None = None,
        jobs: int = 1, cpu_timing: bool = False, run_all: bool = False) -> dict:
    tests_dir = tests_dir.resolve()
    # Absolute, but not resolved: a venv's python is a symlink to the base one.
    python = os.path.abspath(python) if os.sep in python else python
    if not tests_dir.is_dir():
        raise SystemExit(f"pytorch-suite: {tests_dir} is not a directory of PyTorch's test files")
    expectations = load_expectations(expectations_path, tests_dir)
    environment = load_environment(expectations_path)
    device, version = _backend(python)
    if files is None:
        files = sorted(p.name for p in tests_dir.glob("test_*.py")
                       if "instantiate_device_type_tests" in p.read_text(errors="replace"))
    missing = [f for f in files if not (tests_dir / f).is_file()]
    if missing:
        raise SystemExit(f"pytorch-suite: not in {tests_dir}: {', '.join(missing)}")
    out.mkdir(parents=True, exist_ok=True)
    by_file: dict[str, list[str]] = {}
    for s in select or []:
        by_file.setdefault(s.split("::")[0], []).append(s)
    if select:
        files = [f for f in files if f in by_file]
    t0 = time.monotonic()

    def one(file: str) -> FileReport:
        r = run_file(python, tests_dir, file, out, device=device, timeout=timeout,
                     expectations=expectations, select=by_file.get(file),
                     cpu_timing=cpu_timing, run_all=run_all, env=environment)
        print(f"pytorch-suite: {file}: {r.counts['passed']} passed, {r.counts['failed']} "
              f"defects, {r.counts['excused']} excused, {r.counts['skipped']} skipped "
              f"in {r.seconds:.0f} s", flush=True)
        return r

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        reports = list(pool.map(one, files))
    report = build_report(reports, device=device, tests_dir=tests_dir, torch_version=version,
                          expectations_path=expectations_path, expectations=expectations,
                          seconds=time.monotonic() - t0)
    _junit(reports, out / "junit.xml")
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    print_table(report)
    print(f"pytorch-suite: report {out / 'report.json'}, JUnit {out / 'junit.xml'}")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/pytorch_suite.py",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run the files, triage, write OUT/report.json")
    p.add_argument("--tests", required=True, type=pathlib.Path,
                   help="a PyTorch test tree at the release's tag (its test/ folder)")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter with torch and the backend installed")
    p.add_argument("--out", default=pathlib.Path("build/pytorch-suite"), type=pathlib.Path)
    p.add_argument("--files", nargs="+", help="these files of --tests (default: every "
                   "test_*.py there that calls instantiate_device_type_tests)")
    p.add_argument("--select", nargs="+", metavar="NODEID",
                   help="only these tests (node ids relative to --tests)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds per file and step (default {DEFAULT_TIMEOUT})")
    p.add_argument("--expectations", type=pathlib.Path, default=EXPECTATIONS,
                   help="the expectations file (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=1, help="files run at once (default 1)")
    p.add_argument("--run-all", action="store_true",
                   help="also run the tests that resource entries of the expectations file "
                        "leave out (\"run\": false)")
    p.add_argument("--cpu-timing", action="store_true",
                   help="also run each whole file on the CPU, for the wall-time ratio")
    p = sub.add_parser("twin", help="print the CPU twin of a device test's node id")
    p.add_argument("nodeid")
    p.add_argument("--device", default="openreg")
    p = sub.add_parser("check-expectations", help="check an expectations file's entries")
    p.add_argument("file", nargs="?", type=pathlib.Path, default=EXPECTATIONS)
    p.add_argument("--tests", type=pathlib.Path, help="the test tree its citations point into")
    args = ap.parse_args(argv)

    if args.command == "twin":
        print(twin(args.nodeid, args.device))
        return 0
    try:
        if args.command == "check-expectations":
            entries = load_expectations(args.file, args.tests)
            environment = load_environment(args.file)
            print(f"{args.file}: {len(entries)} entries and {len(environment)} variables, valid")
            return 0
        report = run(args.tests, args.python, args.out.resolve(), files=args.files,
                     timeout=args.timeout, expectations_path=args.expectations,
                     select=args.select, jobs=args.jobs, cpu_timing=args.cpu_timing,
                     run_all=args.run_all)
    except ExpectationsError as e:
        print(f"pytorch-suite: {e}", file=sys.stderr)
        return 2
    return 0 if report["conclusion"] == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
