"""The fused counter-based noise (`es.noise.counter_normal`, `fused=True`: the hash in one compiled kernel per chunk)
gives the eager reference's bits for the same key and offset under any chunking (the launch geometry of a chunk).
On the CPU here; scripts/gpu_check.py compares a GPU's draw with the CPU reference."""

from __future__ import annotations

import pytest
import torch

from esreason_lib.es.noise import counter_normal

pytestmark = pytest.mark.slow  # the first fused draw compiles its kernel (tens of seconds on a loaded CPU)


def test_fused_draw_equals_the_eager_reference_bit_for_bit():
    for key, numel, start, chunk in ((123, 10_000, 0, 1 << 22), (123, 6_000, 4_000, 333), (7, 70_001, 12, 4_096),
                                     (2**62 + 5, 5_000, 2**40, 1_000)):
        fused = counter_normal(key, numel, "cpu", start=start, chunk=chunk)
        eager = counter_normal(key, numel, "cpu", start=start, chunk=chunk, fused=False)
        assert torch.equal(fused.view(torch.int32), eager.view(torch.int32)), (key, numel, start, chunk)
    whole = counter_normal(123, 10_000, "cpu")
    assert torch.equal(whole[4000:], counter_normal(123, 6_000, "cpu", start=4_000, chunk=777))
