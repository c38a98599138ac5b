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
