"""torch.load placement of openreg storages.

torch.serialization already knows PrivateUse1 devices: storages are saved
with the location tag "openreg:N" and restored with ``storage.to(device)``.
Its error for a missing device, though, reads "Attempting to deserialize
object on OPENREG device 1 but torch.openreg.device_count() is 1", without
the location as the user wrote it or an example of the fix. We register a
deserializer ahead of torch's (a lower priority number runs first) that
places openreg storages itself and names both.
Tensor backend metadata is handled in C++ (csrc/runtime/OpenRegSerialization.cpp).
"""

import re

import torch

# [docs:deserialize-location]
_LOCATION = re.compile(r"openreg(?::(\d+))?")
# torch's own packages use 10 (cpu) and 20-26; the generic PrivateUse1 one is 23.
_PRIORITY = 19


def _tag(obj):
    return None  # saving: torch's tagger already writes "openreg:N"


def _deserialize(obj, location: str):
    """Restore a CPU-loaded storage saved on (or mapped to) ``location``."""
    m = _LOCATION.fullmatch(location)
    if m is None:
        return None  # not ours: the next deserializer decides
    from . import current_device, device_count

    index = int(m.group(1)) if m.group(1) is not None else current_device()
    count = device_count()
    if index >= count:
        examples = "map_location='cpu'"
        if count > 0:
            examples = (f"map_location='openreg:0', map_location={{'openreg:{index}': "
                        f"'openreg:0'}} or " + examples)
        raise RuntimeError(
            f"Cannot load a storage onto openreg:{index}: this process has {count} openreg "
            f"device(s) (set by OPENREG_DEVICE_COUNT). Pass map_location to torch.load to "
            f"place it on an existing device, e.g. {examples}."
        )
    return obj.to(device=torch.device("openreg", index))


def _register() -> None:
    if not any(d is _deserialize for _, _, d in torch.serialization._package_registry):
        torch.serialization.register_package(_PRIORITY, _tag, _deserialize)
# [docs:deserialize-location:end]
