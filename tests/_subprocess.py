"""Child interpreters for tests (not a test module).

Several settings are read once per process (the ``OPENREG_*`` configuration,
``TORCH_DEVICE_BACKEND_AUTOLOAD``), and some tests expect a crash (a strict
memory fault kills the process): such tests run their code in a fresh
interpreter through ``run_python``.

A child inherits this process's environment. With ``clean_openreg_env=True``
it starts from the defaults instead: the OpenReg configuration variables of
the parent (for example a CI job run with ``OPENREG_DEVICE_WORKERS=1``) are
removed before ``env`` is applied, so that a test which checks a default
value, or sets one variable, sees only what it sets.
"""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every environment variable the runtime or the torch glue reads as configuration.
OPENREG_CONFIG_VARS = (
    "OPENREG_DEVICE_COUNT",
    "OPENREG_DEVICE_MEMORY",
    "OPENREG_STRICT_MEMORY",
    "OPENREG_DEVICE_WORKERS",
    "OPENREG_STREAM_SANITIZER",
)


def child_env(env: dict = None, clean_openreg_env: bool = False) -> dict:
    """This process's environment, without the OpenReg configuration if
    ``clean_openreg_env``, updated with ``env``."""
    full_env = dict(os.environ)
    if clean_openreg_env:
        for key in OPENREG_CONFIG_VARS:
            full_env.pop(key, None)
    full_env.update(env or {})
    return full_env


# What an outer `make` (CI's `make test TORCH=2.13.0`) hands down to every
# process under it: its command-line variables travel in MAKEFLAGS and would
# override the defaults of a `make` that a test runs in another tree.
MAKE_VARS = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT",
             "MAKE_TERMERR", "TORCH", "VENV", "BUILD_DIR", "PYTEST_ARGS")


def make_env() -> dict:
    """An environment for a test's own ``make``: this process's, without what
    an outer ``make`` passed down."""
    return {k: v for k, v in os.environ.items() if k not in MAKE_VARS}


def run_python(code: str, *, timeout: float, env: dict = None,
               clean_openreg_env: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` with ``python -c`` in the repository root and capture its output.

    ``timeout`` (seconds) is required: a child that hangs fails its test
    (``subprocess.TimeoutExpired``) instead of blocking the session.
    """
    return subprocess.run(
        [sys.executable, "-c", code], env=child_env(env, clean_openreg_env),
        capture_output=True, text=True, timeout=timeout, cwd=REPO,
    )


def sanitizer_reports_to_stderr(*variables):
    """The sanitizer run's options (``ASAN_OPTIONS``, ...) for a child whose
    report is expected: reports go to its stderr instead of the run's report
    directory (where they would fail the run)."""
    env = {}
    for var in variables:
        opts = [o for o in os.environ.get(var, "").split(":") if o and not o.startswith("log_path=")]
        env[var] = ":".join(opts)
    return env


# ---------------------------------------------------------------- /dev/shm
# Multi-process tests check that they leave nothing in /dev/shm (OCCL makes
# no named segment at all: its segments are memfds). Every entry counts, not
# only ours by name; but with the suite on two pytest-xdist workers, the
# other worker's live processes hold entries of their own (Python's
# multiprocessing semaphores, sem.mp-*, of Inductor's compile workers), which
# are nobody's leak. So an entry is left behind when no live process holds
# it (mapped or open), or when a process of this one's own tree does. One
# exception: a multiprocessing semaphore (sem.mp-*) that nobody maps is one
# whose process exited without unlinking it (os._exit, as pool workers do),
# which that tree's resource tracker unlinks when the tree ends: the other
# worker's are seen so while its test still runs. OCCL makes none; this
# tree's own leaks of them are its resource tracker's to report (it warns).

def shm_entries() -> set:
    """The names in /dev/shm now."""
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _processes():
    """{pid: (ppid, {names of /dev/shm entries it maps or has open})}."""
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            held = set()
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    if "/dev/shm/" in line:
                        held.add(line.rsplit("/dev/shm/", 1)[1].split()[0])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("/dev/shm/"):
                    held.add(target[len("/dev/shm/"):].split()[0])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
        procs[int(pid)] = (ppid, held)
    return procs


def shm_left_behind(before: set) -> set:
    """The entries of /dev/shm made since ``before`` that this process's
    tests left behind: held by no live process, or by one of this process's
    descendants. Entries held only by other processes (another job's, the
    other xdist worker's) are not counted."""
    new = shm_entries() - before
    if not new:
        return set()
    procs = _processes()
    tree, grew = {os.getpid()}, True
    while grew:
        grew = False
        for pid, (ppid, _) in procs.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    left = set()
    for name in new:
        holders = {pid for pid, (_, held) in procs.items() if name in held}
        if holders & tree or (not holders and not name.startswith("sem.mp-")):
            if os.path.exists(f"/dev/shm/{name}"):
                left.add(name)
    return left
