"""A model's weights (`esreason_lib.params.named_params`): their bitwise
checksum (`weights_checksum`) and their drift from a start (`relative_drift`), shared by the ES backends and loop,
the vLLM engine, the noise control and the run store's guards."""

from __future__ import annotations

import hashlib
import math
from typing import Mapping

import torch

from esreason_lib.params import named_params


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
