"""ES noise from seeds, the in-place update, and exact perturb/restore of model weights.

Noise is never stored: member `seed` and a tensor's `name` give that tensor's Gaussian noise through
`derive_seed(seed, name)`, drawn in float32 on the tensor's device (`standard_normal`: on the CPU its own seeded
`torch.Generator`; on a GPU the counter-based `counter_normal`, whose numbers do not depend on the GPU model). Each
tensor therefore gets an independent stream (Qiu et al.'s reference code seeds every tensor with the same member seed,
which makes same-shaped layers receive *identical* noise; we do not). The numbers are a pure function of
(seed, name, shape, device type), so any process can regenerate any member's perturbation, and GPUs of different
models draw the same numbers.

Why adding then subtracting noise is not exact: floating-point addition rounds. y = fl(x + d) keeps only the
bits of x + d that fit the format, so fl(y - d) differs from x in the last bit(s) whenever the rounding of
x + d discarded information (typically when |d| and |x| differ in exponent, and far more often in bfloat16,
whose 8-bit mantissa rounds almost every sum). Over thousands of evaluations these one-ulp errors would random-
walk the weights. `perturb` therefore computes, tensor by tensor, x_hat = fl(fl(x + d) - d) exactly as
`restore` later will, and records the (few) indices where x_hat != x bitwise together with the original bits;
`restore` subtracts the regenerated noise with the identical kernel and writes those bits back. The result is
bit-identical to the original weights (verified over 1000 cycles in tests/test_es_restore.py), at the cost of
one temporary tensor copy during perturb and a sparse fix-up list (`FixUp.fraction` of the elements). The
fraction grows with sigma relative to the weights (measured on the tiny random Qwen2, weights ~0.02, in float32
and bfloat16 alike: ~1% at sigma=1e-4, ~5% at 1e-3, ~23% at 1e-2, ~67% at 0.1); a tensor whose list would
outgrow a plain copy of it keeps the copy instead, so the held memory never exceeds one copy of the weights.

`weights_checksum` fingerprints a set of named weights; the remote backends (`es.backends.ray_actors`,
`es.backends.vllm_engines`) compare their replicas with the driver's through it.
"""

from __future__ import annotations

import functools
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import torch

from esreason_lib.params import named_params
from esreason_lib.seeding import derive_seed

_INT_VIEW = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16,
             torch.float16: torch.int16}


def noise(seed: int, name: str, like: torch.Tensor) -> torch.Tensor:
    """Standard normal noise for tensor `name` of member `seed`: float32, shaped and placed like `like`
    (`standard_normal` of the key `derive_seed(seed, name)`)."""
    return standard_normal(derive_seed(int(seed), name), like.shape, like.device)  # like.shape


COUNTER_CHUNK = 1 << 22
"""Elements per chunk of `counter_normal` (bounds its temporaries to a few x 32 MiB); the draw does not depend on it."""
COUNTER_BUFFER_BYTES = 28 * COUNTER_CHUNK
"""Bytes of `counter_normal`'s temporaries beside its output, per chunk (112 MiB): the int64 counters (8 per element),
the two float32 uniforms (8) and Box-Muller's float32 intermediates (up to 3 alive: 12); what
`models.placement.GPUMemory.noise_buffers` counts per drawing process."""

_M64 = (1 << 64) - 1


def _i64(x: int) -> int:
    """The unsigned 64-bit constant `x` as the signed int64 torch stores."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 tensors (wrapping products; logical right shifts by masking)."""
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        x = x ^ ((x >> shift) & ((1 << (64 - shift)) - 1))
        x = x * _i64(mult)
    return x ^ ((x >> 31) & ((1 << 33) - 1))


def _uniforms(i: torch.Tensor, base: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two float32 uniforms in (0, 1) of counters `i` [c] (int64): SplitMix64 twice of (2i + half) ^ `base`, the
    top 24 bits, + 0.5, x 2^-24. Integer arithmetic and exact conversions only, so any compiler gives these bits."""
    u = []
    for half in (0, 1):
        bits = _splitmix64(_splitmix64((2 * i + half) ^ base))  # [c]
        u.append((((bits >> 40) & 0xFFFFFF).to(torch.float32) + 0.5) * 2.0**-24)  # (0, 1), [c]
    return u[0], u[1]


@functools.cache
def _fused_uniforms():
    """`_uniforms` as one fused kernel (torch.compile, shapes dynamic: one compilation for every chunk length;
    Triton on a GPU, C++ on the CPU), compiled at its first call in a process."""
    return torch.compile(_uniforms, dynamic=True)


def counter_normal(key: int, numel: int, device, *, start: int = 0, chunk: int = COUNTER_CHUNK,
                   fused: bool = True) -> torch.Tensor:
    """Standard normals number start .. start + numel - 1 of the counter-based stream `key`, float32 [numel].

    Number i is a pure function of (key, i): two SplitMix64 hashes of (key, 2i) and (key, 2i + 1) give two 24-bit
    uniforms u1, u2 in (0, 1), and Box-Muller sqrt(-2 ln u1) cos(2 pi u2) the normal. No generator state, no launch
    geometry: the numbers cannot depend on the GPU's SM count (as `torch.randn`'s do on CUDA, whose grid PyTorch caps
    at SMs x blocks) nor on `chunk` (tested by drawing under two chunkings).

    `fused` (the default) hashes each chunk in one compiled kernel (`_fused_uniforms`) instead of ~50 eager integer
    kernels; the Box-Muller step stays torch's own float32 kernels either way, so both give the same bits on a device
    (tests/test_noise_fused.py on the CPU; scripts/gpu_check.py on a GPU). On this CPU the fused draw runs within
    3x of `torch.randn` (benchmarks/bench_noise.py), the eager one ~90x below it."""
    out = torch.empty(numel, dtype=torch.float32, device=device)  # [numel]
    base = _i64((int(key) * 0x9E3779B97F4A7C15) & _M64)
    uniforms = _fused_uniforms() if fused else _uniforms
    for s in range(0, numel, chunk):
        i = torch.arange(start + s, start + min(s + chunk, numel), dtype=torch.int64, device=device)  # [c]
        u1, u2 = uniforms(i, base)  # [c] each
        out[s:s + i.numel()] = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2 * math.pi) * u2)
    return out


def standard_normal(key: int, shape, device, *, start: int = 0) -> torch.Tensor:
    """Float32 standard normals of shape `shape` for the stream `key` on `device`: on the CPU `torch.randn` with a
    generator seeded `key` (the draw every committed result used; `start` elements of the stream skipped first), on
    any other device `counter_normal` (independent of the GPU model; a CUDA replica therefore draws other numbers
    than a CPU one, as before)."""
    device = torch.device(device)
    numel = math.prod(shape)
    if device.type == "cpu":
        gen = torch.Generator(device=device)
        gen.manual_seed(int(key))
        if start:
            torch.randn(start, generator=gen, device=device, dtype=torch.float32)  # the numbers drawn before
        return torch.randn(tuple(shape), generator=gen, device=device, dtype=torch.float32)
    return counter_normal(key, numel, device, start=start).view(tuple(shape))


def shift_(t: torch.Tensor, eps: torch.Tensor, c: float) -> torch.Tensor:
    """t <- fl(t + c * eps) in t's dtype, in place. The one kernel used by perturb, its check, and restore."""
    return shifted(t, eps, c, out=t)


def shifted(t: torch.Tensor, eps: torch.Tensor, c: float, *, out: torch.Tensor) -> torch.Tensor:
    """out <- fl(t + c * eps) in t's dtype: `shift_`'s kernel, written elsewhere (a member's weights in a stack)."""
    return torch.add(t, eps.to(t.dtype), alpha=c, out=out)


@dataclass
class FixUp:
    """What `restore` needs besides the seeds: the member (seed, sign, sigma) and, per tensor, the flat indices
    whose round trip x -> x + d -> (x + d) - d is not bit-exact, with the original bits at those indices."""

    seed: int
    """Member noise seed."""
    coef: float
    """sign * sigma: the perturbation is theta + coef * eps."""
    fixes: dict[str, tuple[torch.Tensor | None, torch.Tensor]] = field(default_factory=dict)
    """name -> (flat indices [k] int32/int64, original bits [k] as the dtype's integer view); indices None and
    all original bits [numel] when the sparse list would take at least as much memory as a plain copy."""
    names: list[str] = field(default_factory=list)
    """The tensors perturbed so far, in order (restore undoes exactly these)."""
    n_fixed: int = 0
    """Total number of elements needing a fix-up."""
    n_total: int = 0
    """Total number of perturbed elements."""
    restored: bool = False
    """Set once `restore` has run (restoring twice would corrupt the weights)."""

    @property
    def fraction(self) -> float:
        """Fraction of all perturbed elements that the fix-up list corrects."""
        return self.n_fixed / max(self.n_total, 1)


def _int_view(t: torch.Tensor) -> torch.Tensor:
    if t.dtype not in _INT_VIEW:
        raise TypeError(f"unsupported parameter dtype {t.dtype} (supported: {sorted(map(str, _INT_VIEW))})")
    if not t.is_contiguous():
        raise ValueError(f"parameter of shape {tuple(t.shape)} is not contiguous; exact restore needs contiguous")
    return t.view(_INT_VIEW[t.dtype]).view(-1)


@torch.no_grad()
def perturb(model_or_params, seed: int, sign: int, sigma: float) -> FixUp:
    """theta <- theta + sign * sigma * eps(seed), in place; returns the `FixUp` that `restore` needs."""
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign!r}")
    fx, params = FixUp(seed=int(seed), coef=float(sign) * float(sigma)), named_params(model_or_params)
    for p in params.values():
        _int_view(p)  # check every dtype and layout before touching any tensor
    try:
        for name, p in params.items():
            _perturb_one(fx, name, p)
    except BaseException:  # e.g. out of memory midway: undo the tensors already perturbed, then re-raise
        restore(params, fx)
        raise
    return fx


def _perturb_one(fx: FixUp, name: str, p: torch.Tensor) -> None:
    x = _int_view(p).clone()  # [numel] original bits
    fx.fixes[name] = (None, x)  # until the sparse list is known, a failure restores from the plain copy
    fx.names.append(name)
    eps = noise(fx.seed, name, p)  # p.shape
    shift_(p, eps, fx.coef)
    x_hat = shift_(p.clone(), eps, -fx.coef)  # p.shape, exactly what restore will compute
    bad = (_int_view(x_hat) != x).nonzero().squeeze(1)  # [k]
    idx = bad.to(torch.int32) if p.numel() < 2**31 else bad  # [k]
    if bad.numel() * (idx.element_size() + x.element_size()) < x.numel() * x.element_size():
        fx.fixes[name] = (idx, x[bad].clone())  # sparse is smaller (otherwise keep the plain copy)
    if not bad.numel():
        del fx.fixes[name]
    fx.n_fixed += bad.numel()
    fx.n_total += p.numel()


@torch.no_grad()
def restore(model_or_params, fixup: FixUp) -> None:
    """Undo `perturb` bit-exactly: subtract the regenerated noise, then write back the recorded original bits."""
    if fixup.restored:
        raise RuntimeError(f"FixUp for seed {fixup.seed} was already restored")
    params = named_params(model_or_params)
    for name in fixup.names:
        p, (idx, bits) = params[name], fixup.fixes.get(name, (0, None))
        if idx is None:  # dense: the original bits were kept whole
            _int_view(p).copy_(bits)
            continue
        shift_(p, noise(fixup.seed, name, p), -fixup.coef)
        if bits is not None:
            _int_view(p)[idx.long()] = bits
    fixup.restored = True


@contextmanager
def perturbed(model_or_params, seed: int, sign: int, sigma: float) -> Iterator[FixUp]:
    """Context manager: weights are theta + sign * sigma * eps(seed) inside, bit-identical to before after
    (also when the body raises). Yields the `FixUp` (its `fraction` is the fix-up fraction)."""
    fx = perturb(model_or_params, seed, sign, sigma)
    try:
        yield fx
    finally:
        restore(model_or_params, fx)


@torch.no_grad()
def apply_update(model_or_params, seeds, coefs, scale: float, *, draw=noise) -> float:
    """theta <- theta + scale * sum_k coefs[k] * eps(seeds[k]), tensor by tensor, in place; eps(seed) of tensor
    `name` is `draw(seed, name, p)` (default `noise`; `es.lowrank` passes its low-rank direction).

    The sum is accumulated in float32 (one noise tensor and one accumulator alive at a time) and added to the
    parameter with a single rounding to its dtype. Returns the L2 norm of the applied float32 step.
    """
    seeds, coefs = np.asarray(seeds, dtype=np.int64), np.asarray(coefs, dtype=np.float64)  # [K], [K]
    if seeds.shape != coefs.shape or seeds.ndim != 1:
        raise ValueError(f"seeds and coefs must be matching 1-D arrays, got {seeds.shape} and {coefs.shape}")
    sq = 0.0
    for name, p in named_params(model_or_params).items():
        acc = torch.zeros(p.shape, dtype=torch.float32, device=p.device)  # p.shape
        for s, c in zip(seeds.tolist(), coefs.tolist()):
            if c != 0.0:
                acc.add_(draw(s, name, p), alpha=c)
        acc.mul_(scale)
        sq += float(acc.double().pow(2).sum())
        p.copy_((p.float() + acc).to(p.dtype))
    return sq**0.5
