"""Random number generation for openreg, modelled on ``torch.cuda.random``.

Each device's default generator is a counter-based Philox4x32-10 generator
with CUDA's state: ``get_rng_state()`` is 16 bytes, a uint64 seed and an
int64 offset (little-endian), and the offset says how many stream positions
random operators have consumed (docs/rng.md has the rule).
"""

from typing import Any, Iterable, List

import torch

from .. import _C


def _generator(device: Any = None) -> torch.Generator:
    from . import _check_index, _get_device_index, _lazy_init

    _lazy_init()
    return _C._get_default_generator(_check_index(_get_device_index(device)))


def get_rng_state(device: Any = "openreg") -> torch.Tensor:
    """State of ``device``'s default generator: a 16-byte CPU ByteTensor,
    the seed (uint64) then the Philox offset (int64), as on CUDA."""
    return _generator(device).get_state()


def get_rng_state_all() -> List[torch.Tensor]:
    """:func:`get_rng_state` of every openreg device, in device order."""
    from . import device_count

    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: Any = "openreg") -> None:
    """Restore ``device``'s default generator from ``get_rng_state()`` bytes
    (16, or 8 for a seed alone with offset 0; the offset a multiple of 4).

    The bytes are read directly, with no tensor operation (as CUDA's
    initialised path does), so this works under FakeTensorMode and
    DTensor's LocalTensor mode."""
    _generator(device).set_state(new_state)


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Restore device ``i``'s generator from ``new_states[i]`` (:func:`get_rng_state_all`'s list)."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def _seed(seed: Any, func: str) -> int:
    # int() as torch.cuda does (a float seed is truncated), but inf's
    # OverflowError becomes a ValueError that names the argument.
    try:
        return int(seed)
    except OverflowError:
        raise ValueError(f"{func}: seed must be a finite number, got {seed}") from None


def manual_seed(seed: int) -> None:
    """Seed the current device's default generator."""
    _generator().manual_seed(_seed(seed, "manual_seed"))


def manual_seed_all(seed: int) -> None:
    """Seed every openreg device's default generator."""
    from . import device_count

    seed = _seed(seed, "manual_seed_all")
    for i in range(device_count()):
        _generator(i).manual_seed(seed)


def seed() -> None:
    """Seed the current device's generator with a non-deterministic number."""
    _generator().seed()


def seed_all() -> None:
    """Seed every openreg device's generator with one non-deterministic number."""
    from . import current_device, device_count

    s = _generator(current_device()).seed()
    for i in range(device_count()):
        _generator(i).manual_seed(s)


def initial_seed() -> int:
    """The seed of the current device's default generator."""
    return _generator().initial_seed()
