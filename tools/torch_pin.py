"""The torch requirement of a build, from torch-releases.txt (a dynamic-metadata
provider of pyproject.toml, docs/upgrading.md).

The C++ parts of torch_openreg are compiled against one torch release's headers
and libraries, and only that release can load them, so a wheel requires
exactly the release it was built against (``Requires-Dist: torch==2.15.0``),
as vendor backends do. The supported releases are pinned once, in
torch-releases.txt; this module reads them there instead of repeating them in
pyproject.toml:

- ``get_requires_for_dynamic_metadata``: the build requirement. In an isolated
  build (``pip wheel .``), the release named by ``TORCH`` in the environment,
  else the newest of the window.
- ``dynamic_metadata``: ``dependencies`` of the wheel: ``torch==<release>``,
  the release installed where the build runs (``make`` builds with
  ``--no-build-isolation`` against the venv of ``TORCH``). A torch outside the
  window stops the build with a message that names it and the window.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import os
import pathlib
import re

RELEASES_FILE = pathlib.Path(__file__).resolve().parent.parent / "torch-releases.txt"


class TorchReleaseError(RuntimeError):
    """The torch of a build is not one of the supported releases."""


def window(path: pathlib.Path = RELEASES_FILE) -> list[str]:
    """The supported releases, newest first (torch-releases.txt)."""
    releases = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    releases = [r for r in releases if r]
    for r in releases:
        if not re.fullmatch(r"\d+\.\d+\.\d+", r):
            raise TorchReleaseError(f"{path.name}: {r!r} is not an exact release (X.Y.Z)")
    if not releases:
        raise TorchReleaseError(f"{path.name} names no torch release")
    return releases


def check(release: str, where: str, releases: list[str]) -> str:
    """``release`` if it is in the window, else a TorchReleaseError naming ``where``
    it came from. A local version label (``2.13.0+cpu``) is not part of the release."""
    plain = release.split("+", 1)[0]
    if plain not in releases:
        raise TorchReleaseError(
            f"{where} is torch {release}, which torch_openreg does not support: "
            f"the supported releases are {', '.join(releases)} (torch-releases.txt)")
    return plain


def requested(environ=os.environ, releases: list[str] | None = None) -> str:
    """The release to build for where none is installed yet: ``TORCH`` or the newest."""
    releases = releases or window()
    if environ.get("TORCH"):
        return check(environ["TORCH"], "TORCH", releases)
    return releases[0]


#: Set to 1 by the relay job (tools/relay.py, docs/ci.md) to build against the
#: PyTorch under test, which may be outside the window (a nightly): the wheel
#: then requires exactly that torch.
UNLISTED_VAR = "OPENREG_TORCH_UNLISTED"


def installed(releases: list[str] | None = None, version=None, environ=os.environ) -> str:
    """The release of the torch the build compiles against (its distribution's
    version, read without importing torch). With OPENREG_TORCH_UNLISTED=1, any
    version, without its local label as for the window's releases
    (``torch==2.16.0.dev20261201`` is that nightly, whichever build)."""
    releases = releases or window()
    if version is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version
        try:
            version = dist_version("torch")
        except PackageNotFoundError:
            raise TorchReleaseError(
                "torch is not installed where torch_openreg is being built: install one of "
                f"{', '.join(releases)} first (make build does), or build with isolation")
    if environ.get(UNLISTED_VAR) == "1":
        return version.split("+", 1)[0]
    return check(version, "the installed torch", releases)


# The dynamic-metadata hooks (scikit-build-core, [[tool.dynamic-metadata]]).

_build_state = "wheel"


def build_state(state: str) -> None:
    global _build_state
    _build_state = state


def get_requires_for_dynamic_metadata(settings=None) -> list[str]:
    return [f"torch=={requested()}"]


def dynamic_metadata(settings, project) -> dict:
    # An sdist is built without torch and names the requested release; each
    # wheel built from it names its own (dynamic_wheel).
    if _build_state == "sdist":
        return {"dependencies": [f"torch=={requested()}"]}
    return {"dependencies": [f"torch=={installed()}"]}


def dynamic_wheel(settings) -> dict:
    return {"dependencies": True}
