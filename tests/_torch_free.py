"""Loading the torch-free extension modules on their own (not a test module).

``torch_openreg._runtime`` (the runtime's C API) and
``torch_openreg._occl_testing`` (liboccl's) link no torch, so the runtime and
liboccl tests load them directly, without running the ``torch_openreg``
package (which imports torch and loads the glue): those tests then depend
neither on the glue building and loading nor on the torch import.

``OPENREG_TEST_TORCH_FREE_DIR`` points them at another build of the same
modules: ``make check-asan`` and ``make check-tsan`` build the runtime and
liboccl with sanitizers and run these tests against them. If the package is
already imported (whole-suite runs) and no other build is named, its modules
are used; either way there is one module object per name, registered as
``torch_openreg.<name>``.
"""

import importlib
import importlib.machinery
import importlib.util
import os
import sys

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

OVERRIDE = "OPENREG_TEST_TORCH_FREE_DIR"


def load(name: str):
    """The module ``torch_openreg.<name>`` (``_runtime``, ``_occl_testing``)."""
    full = f"torch_openreg.{name}"
    if full in sys.modules:
        return sys.modules[full]
    directory = os.environ.get(OVERRIDE)
    if not directory:
        if "torch_openreg" in sys.modules:
            return importlib.import_module(full)
        directory = importlib.util.find_spec("torch_openreg").submodule_search_locations[0]
    path = next((os.path.join(directory, f) for f in sorted(os.listdir(directory))
                 if f.startswith(name + ".") and f.endswith(".so")), None)
    if path is None:
        raise ImportError(f"no {name} extension module in {directory}")
    loader = importlib.machinery.ExtensionFileLoader(full, path)
    spec = importlib.util.spec_from_file_location(full, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    sys.modules[full] = mod
    return mod
