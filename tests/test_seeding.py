"""Named random streams (`esreason_lib.seeding`): stable, independent per name, reproducible from the seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from esreason_lib.seeding import derive_seed, numpy_rng, torch_generator


def test_derive_seed_is_stable_and_separates_names():
    a = derive_seed(0, "es", "noise", 17)
    assert a == derive_seed(0, "es", "noise", 17) and 0 <= a < 2 ** 63
    others = {derive_seed(1, "es", "noise", 17), derive_seed(0, "es", "noise", 18), derive_seed(0, "grpo", "noise", 17),
              derive_seed(0, "es", "noise17")}
    assert a not in others and len(others) == 4
    assert derive_seed(np.int64(3), "x") == derive_seed(3, "x")
    for bad in (True, 1.0, "3", None):
        with pytest.raises(TypeError, match="seed must be an int"):
            derive_seed(bad, "x")


def test_numpy_rng_streams_replay_and_differ():
    first = numpy_rng(5, "prompts", 0).integers(0, 1 << 30, size=8)
    assert np.array_equal(first, numpy_rng(5, "prompts", 0).integers(0, 1 << 30, size=8))
    assert not np.array_equal(first, numpy_rng(5, "prompts", 1).integers(0, 1 << 30, size=8))
    assert np.array_equal(first, np.random.default_rng(derive_seed(5, "prompts", 0)).integers(0, 1 << 30, size=8))


def test_torch_generator_streams_replay_and_differ():
    draw = lambda *names: torch.randn(6, generator=torch_generator(2, *names))  # noqa: E731
    assert torch.equal(draw("noise", 3), draw("noise", 3))
    assert not torch.equal(draw("noise", 3), draw("noise", 4))
    gen = torch_generator(2, "noise", 3)
    assert gen.device.type == "cpu" and gen.initial_seed() == derive_seed(2, "noise", 3)
