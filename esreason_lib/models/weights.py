"""A model's weights by name: the tensors a trainer or an engine changes (`named_params`), their bitwise
checksum (`weights_checksum`) and their drift from a start (`relative_drift`), shared by the ES backends and loop,
the vLLM engine, the noise control and the run store's guards."""

from __future__ import annotations

import hashlib
import math
from typing import Mapping

import torch


def named_params(model_or_params) -> dict[str, torch.Tensor]:
    """The tensors ES perturbs, by name: a module's `named_parameters()` (tied weights appear once) or a dict.

    A dict whose entries overlap in memory (e.g. a `state_dict()` with tied embeddings) is rejected, since the
    shared elements would be perturbed twice; disjoint views of one tensor are accepted (`es.backends.vllm_engines` names the q, k
    and v rows of a fused qkv weight this way).
    """
    if isinstance(model_or_params, torch.nn.Module):
        return dict(model_or_params.named_parameters())
    if not isinstance(model_or_params, Mapping):
        raise TypeError(f"expected an nn.Module or a dict of tensors, got {type(model_or_params).__name__}")
    params, spans = dict(model_or_params), []
    for name, t in params.items():
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"parameter {name!r} must be a floating-point tensor, got {t!r:.60}")
        last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))  # offset of the last element
        start = t.data_ptr()  # the byte span [start, end) the elements lie in
        spans.append((str(t.device), start, start + (last + 1) * t.element_size() if t.numel() else start, name))
    spans.sort()
    for (dev, _, end, prev), (dev2, start, _, name) in zip(spans, spans[1:]):
        if dev == dev2 and start < end:
            raise ValueError(f"parameters {prev!r} and {name!r} share storage (tied weights): their memory "
                             f"overlaps; pass each once")
    return params


def weights_checksum(model_or_params) -> str:
    """blake2b (128-bit hex) over the parameters sorted by name: each one's name, dtype and shape, then its bytes.

    Equal for bit-identical weights on any device; any changed bit, dtype or shape changes it."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in sorted(named_params(model_or_params).items()):
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy())  # [numel * itemsize] bytes
    return h.hexdigest()


def relative_drift(params: Mapping[str, torch.Tensor], theta0: Mapping[str, torch.Tensor]) -> float:
    """||theta - theta_0|| / ||theta_0|| over all of `params` (theta_0 by the same names), in float64 on the
    parameters' device (theta_0 is moved there one tensor at a time when it is elsewhere): no host copy of theta.
    nan when theta_0 is all zeros."""
    num = den = 0.0
    for k, p in params.items():
        base = theta0[k].to(p.device, non_blocking=True).double()
        num += float((p.detach().double() - base).pow(2).sum())
        den += float(base.pow(2).sum())
    return math.sqrt(num / den) if den > 0 else math.nan
