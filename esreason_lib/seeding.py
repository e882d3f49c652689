"""Named random streams: every random number in a run derives from one integer seed and a name.

`derive_seed(seed, "es", "noise", 17)` is stable across processes, machines and Python versions (it hashes
with BLAKE2b, never Python's salted `hash`), so any stream can be regenerated from the run's seed alone.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

_MASK63 = (1 << 63) - 1


def derive_seed(seed: int, *names: object) -> int:
    """A 63-bit seed for the stream `names` under the run seed `seed` (deterministic, collision-resistant)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}")
    key = "\x1f".join([str(int(seed)), *map(str, names)]).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") & _MASK63


def numpy_rng(seed: int, *names: object) -> np.random.Generator:
    """A numpy Generator for the named stream."""
    return np.random.default_rng(derive_seed(seed, *names))


def torch_generator(seed: int, *names: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch Generator on `device` for the named stream."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, *names))
    return gen
