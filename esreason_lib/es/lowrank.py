"""Low-rank ES populations (EGGROLL: Sarkar et al. 2025, "Evolution Strategies at the Hyperscale"), selected by
`ESConfig.noise = "lowrank"` with rank `ESConfig.rank`.

Noise. Member (seed, sign) perturbs each 2-D weight W [out, in] by sign * sigma * E with
E = A B^T / sqrt(r), A [out, r] and B [in, r] standard normal, regenerated from (seed, tensor name)
(`lowrank_factors`); every entry of E has variance 1, as full-rank noise does. Every other tensor (the 1-D
norm weights and biases of Qwen2) gets the full-rank Gaussian noise `es.noise.noise(seed, name)`, the very
draw of the full-rank path: they are few (576 of `qwen2-s-habit`'s 129,728 weights) and leaving them unperturbed
would freeze them, since ES moves only what it perturbs.

Update. `ES.tell` calls `apply_lowrank_update`: theta <- theta + alpha/N * sum_i z_i sign_i E_i (E_i the
member's low-rank direction for 2-D tensors, its Gaussian noise for the others), the paper convention of
`es.core` (alpha absorbs 1/sigma), through `es.noise.apply_update`'s kernel.

Speed (`benchmarks/bench_es.py lowrank`, default base `qwen2-s-habit`, N=32, 128 prompts, one thread, on the
2-core machine at load ~12): a low-rank step (evaluation + update) takes about the full-rank batched step's time
(full / low-rank 0.96x at r=1, 0.99x at r=4). At this width (64-256 features) N copies of the weights are cheap,
so the low-rank term's extra passes over the activations offset the saved copies; what it saves (held weights
|W| + N r (in + out) instead of N |W|, noise draws likewise) grows with the matrices.

Deviations from EGGROLL: no integer/low-precision arithmetic and no noise reuse across steps; the rank is one
value for every matrix; the 1-D tensors get full-rank noise (see above).
"""

from __future__ import annotations

import math

import torch

from esreason_lib.es.noise import apply_update, noise, standard_normal
from esreason_lib.seeding import derive_seed

NOISES = ("full", "lowrank")
"""Values of `ESConfig.noise`: "full" (eps ~ N(0, I) on every weight) or "lowrank" (this module)."""


def lowrank_factors(seed: int, name: str, like: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(A [out, r], B [in, r]) standard normal float32 factors of member `seed` for the 2-D tensor `name`,
    placed like `like` [out, in]; one generator stream per (seed, name), A drawn first."""
    if like.dim() != 2:
        raise ValueError(f"lowrank_factors: {name!r} must be a 2-D weight, got shape {tuple(like.shape)}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"lowrank_factors: rank must be a positive int, got {rank!r}")
    key, out = derive_seed(int(seed), name, "lowrank"), like.shape[0] * rank
    a = standard_normal(key, (like.shape[0], rank), like.device)  # [out, r]
    b = standard_normal(key, (like.shape[1], rank), like.device, start=out)  # [in, r]: the stream after A
    return a, b


def lowrank_direction(seed: int, name: str, like: torch.Tensor, rank: int) -> torch.Tensor:
    """Member `seed`'s unit-scale direction E for tensor `name` (float32, shaped like `like`): A B^T / sqrt(r)
    for a 2-D tensor, `es.noise.noise` for any other."""
    if like.dim() != 2:
        return noise(seed, name, like)
    a, b = lowrank_factors(seed, name, like, rank)
    return (a @ b.T) / math.sqrt(rank)  # [out, in]


def apply_lowrank_update(model_or_params, seeds, coefs, scale: float, rank: int) -> float:
    """theta <- theta + scale * sum_k coefs[k] * E(seeds[k]) with E = `lowrank_direction`, in place; returns
    the L2 norm of the applied float32 step (`es.noise.apply_update` with the low-rank direction)."""
    return apply_update(model_or_params, seeds, coefs, scale,
                        draw=lambda s, name, p: lowrank_direction(s, name, p, rank))
