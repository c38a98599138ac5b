"""The conformance suite's pytest plugin: the device under test, its backend, the
classifications, and the PyTorch expectation each failing test names."""

from __future__ import annotations

import os

import pytest

from . import CLASSIFICATIONS


def pytest_addoption(parser):
    g = parser.getgroup("conformance")
    g.addoption("--conformance-device", default=os.environ.get("CONFORMANCE_DEVICE"),
                help="the PrivateUse1 device name to check (or CONFORMANCE_DEVICE)")
    g.addoption("--conformance-dist-backend",
                default=os.environ.get("CONFORMANCE_DIST_BACKEND"),
                help="the device's c10d backend name (the distributed tests skip without it)")
    g.addoption("--conformance-backend", default=None,
                help="the torch.backends entry point that registers it (default: the one "
                     "whose name or module contains the device name)")


def _load_backend(device: str, backend: str | None) -> None:
    import torch

    if torch._C._get_privateuse1_backend_name() == device:
        return  # already loaded (autoload, or imported by the caller)
    from importlib.metadata import entry_points

    eps = list(entry_points(group="torch.backends"))
    if backend:
        chosen = [ep for ep in eps if backend in (ep.name, ep.value.split(":")[0])]
    else:
        chosen = [ep for ep in eps if device in ep.name or device in ep.value]
    if len(chosen) != 1:
        raise pytest.UsageError(
            f"conformance: cannot tell which torch.backends entry point registers "
            f"{device!r} (candidates: {[ep.name for ep in chosen] or [ep.name for ep in eps]}); "
            "pass --conformance-backend")
    chosen[0].load()()
    got = torch._C._get_privateuse1_backend_name()
    if got != device:
        raise pytest.UsageError(f"conformance: the backend {chosen[0].name!r} registered "
                                f"{got!r}, not {device!r}")


def pytest_configure(config):
    for name, text in CLASSIFICATIONS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    device = config.getoption("--conformance-device")
    if not device:
        raise pytest.UsageError("conformance: --conformance-device (or CONFORMANCE_DEVICE) "
                                "names the device to check")
    _load_backend(device, config.getoption("--conformance-backend"))
    config._conformance_device = device


def classification(item) -> str | None:
    names = [m.name for m in item.iter_markers() if m.name in CLASSIFICATIONS]
    return names[0] if len(names) == 1 else None


def expectation(item) -> str:
    doc = getattr(item, "function", None).__doc__ or item.name
    return " ".join(doc.strip().split("\n\n")[0].split())


def pytest_collection_modifyitems(config, items):
    bad = [item.nodeid for item in items
           if len([m for m in item.iter_markers() if m.name in CLASSIFICATIONS]) != 1]
    if bad:
        raise pytest.UsageError("conformance: every test carries exactly one classification "
                                f"marker ({', '.join(CLASSIFICATIONS)}): " + ", ".join(bad[:10]))
    # PyTorch's hardware classification (torch.testing, 2.14 on; the same enum
    # from the version gates before): every class of the suite is ACCELERATOR.
    from . import HW

    bad = sorted({item.nodeid.split("::")[0] + "::" + item.cls.__name__ if item.cls else item.nodeid
                  for item in items
                  if not isinstance(getattr(item.cls, "hw_classification", None), HW)})
    if bad:
        raise pytest.UsageError("conformance: every test class declares hw_classification "
                                "(PyTorch's HardwareClassification): " + ", ".join(bad[:10]))
    for item in items:
        item.user_properties.append(("classification", classification(item)))
        item.user_properties.append(("expectation", expectation(item)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("PyTorch expectation", expectation(item)))


@pytest.fixture(scope="session")
def device(pytestconfig) -> str:
    """The device name under test."""
    return pytestconfig._conformance_device


@pytest.fixture(scope="session")
def dist_backend(pytestconfig) -> str:
    """The device's c10d backend name (--conformance-dist-backend)."""
    name = pytestconfig.getoption("--conformance-dist-backend")
    if not name:
        pytest.skip("no c10d backend named for the device (--dist-backend / "
                    "--conformance-dist-backend)")
    return name


@pytest.fixture(scope="session")
def device_module(device):
    """torch.<device>, the backend's device module (torch.cuda's counterpart)."""
    import torch

    return torch.get_device_module(device)
