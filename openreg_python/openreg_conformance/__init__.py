"""The conformance suite: what PyTorch expects of any PrivateUse1 backend, as tests.

    python -m openreg_conformance --device foo [-m <classification>] [--junit FILE]

runs the suite against the backend that registers the device ``foo`` (loaded by its own
``torch.backends`` entry point, with nothing else registered) and prints a table per
classification. It is a package of its own, not ``torch_openreg.conformance``:
importing ``torch_openreg`` registers openreg, which a run against another backend
must not do. See docs/conformance.md.
"""

# Each test class carries exactly one of these (the plugin checks it).
CLASSIFICATIONS = {
    "device": "devices and the device module (torch.<device>), torch.accelerator",
    "memory": "the caching allocator's statistics and errors",
    "streams": "streams and events",
    "ops": "operators compared with the CPU, placement checks",
    "autograd": "backward passes on the device",
    "amp": "autocast",
    "rng": "random numbers: seeding, state, generators",
    "serialization": "torch.save / torch.load",
    "profiler": "device activity in torch.profiler",
    "distributed": "torch.distributed with the device's c10d backend",
    "compile": "torch.compile",
    "graphs": "torch.accelerator.Graph",
}

# The backend package whose version gates (torch_gates.py) say which
# HardwareClassification this release has. Vendor: your package's name (the
# scaffold renames it).
GATES_PACKAGE = "torch_openreg"


def gates():
    """The backend's version gates module, loaded by path: importing its package
    would register the backend, which a run against another device must not do.
    It is registered as a module of this package, not of the backend's, so that
    a run against another device loads nothing of the backend's name."""
    import importlib.util
    import os
    import sys

    name = f"{__name__}._torch_gates"
    module = sys.modules.get(name)
    if module is None:
        package = importlib.util.find_spec(GATES_PACKAGE)  # locates, does not import
        if package is None or not package.submodule_search_locations:
            raise ImportError(f"{GATES_PACKAGE} (its torch_gates.py) is not installed")
        path = os.path.join(package.submodule_search_locations[0], "torch_gates.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return module


def __getattr__(name):
    # HW: PyTorch's HardwareClassification on this release (every test class
    # of the suite declares hw_classification = HW.ACCELERATOR).
    if name == "HW":
        return gates().HardwareClassification
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
