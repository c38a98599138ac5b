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
