"""Run a test command under a sanitizer and fail on any report (make check-asan,
make check-tsan, make check-asan-glue; docs/sanitizer-builds.md).

    python tools/sanitizers/run.py asan|tsan|asan-glue BUILD_DIR -- CMD...

Sets the environment for CMD: the sanitizer build's torch-free modules
(OPENREG_TEST_TORCH_FREE_DIR); for asan-glue (the whole project built with
ASan + UBSan and installed into BUILD_DIR/install) also that package first on
PYTHONPATH, so that `import torch` loads the instrumented glue, in CMD and in
every child it starts (torchrun ranks included), and
OPENREG_TEST_SANITIZER_GLUE naming the install directory, for the tests that
check what got loaded; the sanitizer's runtime preloaded (the
interpreter is not instrumented) with libstdc++ (its C++ interceptors must
find it at start-up), and options that write every report of every process,
children included, to BUILD_DIR/reports. Tests capture their output, so a
report printed to stderr could be lost; a report file cannot. UBSan, inside
ASan's runtime, ignores log_path and prints to stderr: CMD's output is passed
through and scanned for reports too (run pytest with -s, so that a process
the sanitizer stops does not take its captured output with it). Exits
non-zero if CMD failed or any report was found, after printing the reports.
"""

import re

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def runtime_lib(name):
    cxx = os.environ.get("CXX", "g++")
    return subprocess.run([cxx, f"-print-file-name={name}"], capture_output=True, text=True,
                          check=True).stdout.strip()


def main(argv):
    kind, build, cmd = argv[0], os.path.abspath(argv[1]), argv[argv.index("--") + 1:]
    label = kind
    reports = os.path.join(build, "reports")
    shutil.rmtree(reports, ignore_errors=True)
    os.makedirs(reports)
    env = dict(os.environ)
    install = os.path.join(build, "install")
    env["OPENREG_TEST_TORCH_FREE_DIR"] = os.path.join(install, "torch_openreg")
    env["OPENREG_TEST_SANITIZER"] = kind
    # [docs:asan-glue-env]
    if kind == "asan-glue":
        # The instrumented package before the venv's (an environment
        # variable, so children inherit it; entry points still come from the
        # venv's dist-info and import the package by name, i.e. this one).
        env["PYTHONPATH"] = os.pathsep.join(
            [install] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["OPENREG_TEST_SANITIZER_GLUE"] = install
        kind = "asan"  # the same sanitizer: the runtime's planted bug is checked too
        env["OPENREG_TEST_SANITIZER"] = kind
    # [docs:asan-glue-env:end]
    log = f"log_path={reports}/{kind}"
    # Strict memory's faults stay SIGSEGVs (the tests that expect one check them).
    common = "halt_on_error=1:handle_segv=0:allow_user_segv_handler=1"
    if kind == "asan":
        env["LD_PRELOAD"] = f"{runtime_lib('libasan.so')} {runtime_lib('libstdc++.so')}"
        # No leak checking: the interpreter itself is not leak-clean.
        env["ASAN_OPTIONS"] = (f"{common}:detect_leaks=0:{log}:"
                               f"suppressions={HERE}/asan.supp")
        env["UBSAN_OPTIONS"] = f"halt_on_error=1:print_stacktrace=1:log_path={reports}/ubsan"
    elif kind == "tsan":
        env["LD_PRELOAD"] = f"{runtime_lib('libtsan.so')} {runtime_lib('libstdc++.so')}"
        env["TSAN_OPTIONS"] = (f"{common}:second_deadlock_stack=1:{log}:"
                               f"suppressions={HERE}/tsan.supp")
    else:
        sys.exit(f"unknown sanitizer {kind!r}: asan, tsan or asan-glue")
    pattern = re.compile(r"runtime error:|ERROR: AddressSanitizer|WARNING: ThreadSanitizer|"
                         r"ERROR: ThreadSanitizer|ERROR: LeakSanitizer")
    printed = 0
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace") as proc:
        for line in proc.stdout:
            sys.stdout.write(line)
            printed += bool(pattern.search(line))
    rc = proc.returncode
    sys.stdout.flush()
    found = sorted(os.listdir(reports))
    for name in found:
        with open(os.path.join(reports, name)) as f:
            print(f"\n===== {name} =====\n{f.read()}", flush=True)
    if found or printed:
        print(f"{label}: {len(found)} report file(s) in {reports}, {printed} report(s) printed",
              flush=True)
        return 1
    print(f"{label}: no report", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
