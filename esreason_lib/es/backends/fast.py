"""Faster, not bit-identical, population evaluators: `backend="fast"` and `backend="native"` (greedy, float32 Qwen2 or
Llama: what `fused_qwen2.check_fusable` accepts).

`FastBackend` runs `batched`'s decode loop (the same member weights W_i, prompts, masks, stop rule and row
compaction) with the fused forward of `models.fused_qwen2` (`FusedQwen2`), which trades bit-identity for fewer,
larger ops (that module's docstring lists them). Unlike `batched`, which groups members by running row count so
that each member's gemm has the sequential path's shape, every linear layer is one `bmm` over the whole [N, R] row
grid, padded rows included. `NativeBackend` is the same with the forward's rotary, KV-cache write and attention in
the C kernel of `models.native` (compiled at first use).

Each change rounds floats differently (by ~1e-6 relative), so a member's greedy tokens can differ from the
sequential path's where two logits nearly tie. tests/test_es_fast.py measures the agreement over several ES steps
and both antithetic signs (completions equal on >= 99.5% of rows, member rewards ranked the same, Spearman >=
0.99); `benchmarks/bench_fast.py fast` prints both figures on the Countdown benchmark for each backend. Tried
and not kept: torch.compile (inductor) of the layers (90-200 s to compile on the loaded 2-core machine for 5% per
step), bfloat16 gemms on AMX (8% faster, but completions equal on only 99.1-99.4% of rows, Spearman 0.977-0.996),
a C SiLU-times-up kernel (no faster than torch's two ops) and a float16 KV cache in the native kernel (see
`models.native`).
"""

from __future__ import annotations

import numpy as np

from esreason_lib.es.backends.batched import BatchedBackend
from esreason_lib.models.fused_qwen2 import FusedQwen2, KVBuffers, check_fusable, fused_weights


class FastBackend(BatchedBackend):
    """`BatchedBackend`'s decode with `models.fused_qwen2.FusedQwen2`'s forward (see the module docstring):
    faster, and equal to the sequential path's completions only up to float rounding. Its KV cache storage
    (`KVBuffers`) is kept from one population to the next."""

    native = False
    """Rotary, cache write and attention by the C kernel of `models.native` (`NativeBackend`) instead of torch
    ops."""

    def __init__(self, *args, **kwargs):  # `BatchedBackend`'s arguments
        super().__init__(*args, **kwargs)
        self.buffers = KVBuffers()
        """The KV cache storage every `population` forward reuses (they run one at a time)."""

    def check_model(self, model) -> None:
        """Raise unless `model` is a float32 Qwen2 or Llama (what `fused_weights` folds: `check_fusable`)."""
        check_fusable(model, "FastBackend")

    def prepare(self, model, weights: dict) -> list:
        """`fused_weights`: the folded, fused, transposed member weights."""
        return fused_weights(model, weights)

    def population(self, model, weights, fused, capacity: int) -> FusedQwen2:
        """A fresh `FusedQwen2` (empty KV cache of `capacity` positions, in this backend's `buffers`)."""
        return FusedQwen2(model, fused, capacity, buffers=self.buffers, native=self.native)


class NativeBackend(FastBackend):
    """`FastBackend` with the fused forward's rotary, cache write and attention in a C kernel compiled at first
    use (`models.native`): backend "native", its own float rounding, held to the same agreement with the
    sequential path."""

    native = True


def agreement(completions: list[list[str]], reference: list[list[str]], rewards,
              reference_rewards) -> tuple[float, float]:
    """(fraction of [N][P] completions equal to `reference`'s, Spearman rank correlation of the members' rewards
    with `reference_rewards`; 1.0 when both are constant and equal): the figures `FastBackend` is held to."""
    from scipy.stats import spearmanr

    same = [a == b for row, ref in zip(completions, reference, strict=True) for a, b in zip(row, ref, strict=True)]
    r, ref = np.asarray(rewards, dtype=np.float64), np.asarray(reference_rewards, dtype=np.float64)
    if np.ptp(r) == 0 or np.ptp(ref) == 0:
        rho = 1.0 if np.array_equal(r, ref) else 0.0
    else:
        rho = float(spearmanr(r, ref)[0])
    return float(np.mean(same)), rho
