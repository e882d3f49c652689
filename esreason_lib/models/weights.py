"""A model's weights (`esreason_lib.params.named_params`): their bitwise
checksum (`weights_checksum`, on the host), a cheap fingerprint computed where they live (`weights_fingerprint`,
what the remote backends compare in their hot path), and their drift from a start (`relative_drift`), shared by the ES
backends and loop, the vLLM engine, the noise control and the run store's guards; and a copy of a model built from
its tensors alone (`module_state` -> `materialise`, what a Ray replica is): on the meta device first, so no random
initialisation runs and no host copy of random weights is made (eight fp32 7B models at once were ~240 GB)."""

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


_ODD_MIX = 0x9E3779B97F4A7C15 - 2**64
"""An odd 64-bit constant (2^64 / golden ratio) as a signed int64: element i of a tensor weighs (2i + 1) * this."""

FINGERPRINT_CHUNK = 1 << 22
"""Elements per chunk of `weights_fingerprint` (bounds its temporary int64 tensors to 3 x 32 MiB)."""


@torch.no_grad()
def weights_fingerprint(model_or_params, *, chunk: int = FINGERPRINT_CHUNK) -> str:
    """A 128-bit hex fingerprint of the parameters, computed on their device: per tensor, the sum over elements of
    bits_i * (2i + 1) * `_ODD_MIX` modulo 2^64 (bits_i the element's bits as a signed integer), hashed with its
    name, dtype and shape. Only 8 bytes per tensor reach the host, instead of every byte (`weights_checksum`).

    Modular integer sums are exact in any order, so the value does not depend on the device or on `chunk`. Any
    single changed element changes it (its weight is odd, so a nonzero change times it is nonzero mod 2^64);
    several changes collide only by chance (about 2^-64 per tensor). Not a cryptographic hash: it guards against
    drift and lost updates, not against an adversary."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in sorted(named_params(model_or_params).items()):
        bits = t.detach().reshape(-1).contiguous()
        bits = bits.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[bits.element_size()])
        acc = torch.zeros((), dtype=torch.int64, device=t.device)
        for s in range(0, bits.numel(), chunk):
            part = bits[s:s + chunk].to(torch.int64)  # [c]
            odd = torch.arange(s, s + part.numel(), dtype=torch.int64, device=t.device).mul_(2).add_(1)  # [c]
            acc += part.mul_(odd.mul_(_ODD_MIX)).sum()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(int(acc).to_bytes(8, "little", signed=True))
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


def module_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor `model` holds, as CPU tensors by name: its state dict, plus the buffers no state dict carries
    (non-persistent ones, e.g. the rotary frequencies), which a model built on the meta device would lack."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return {**state, **{k: b.detach().cpu() for k, b in model.named_buffers() if k not in state}}


def load_module_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy `state` (`module_state` of a model of the same architecture) into `model`: its state dict as
    `load_state_dict` does (strict), its other buffers replaced by name (device and dtype as given, moved to the
    model's device)."""
    keys = set(model.state_dict())
    extra = {k: v for k, v in state.items() if k not in keys}
    model.load_state_dict({k: v for k, v in state.items() if k in keys})
    buffers = dict(model.named_buffers())
    for name, value in extra.items():
        if name not in buffers:
            raise KeyError(f"load_module_state: {name!r} is neither in the model's state dict nor one of its buffers")
        owner, _, leaf = name.rpartition(".")
        model.get_submodule(owner)._buffers[leaf] = value.to(next(model.parameters()).device)


def materialise(model_class, config, state: Mapping[str, torch.Tensor], *, dtype: torch.dtype,
                device: str | torch.device) -> torch.nn.Module:
    """`model_class(config)` holding `state` (`module_state`) on `device` in `dtype`, in eval mode: built on the
    meta device (no memory, no random initialisation of real tensors), given uninitialised storage on `device`
    (`to_empty`), its tied weights tied again, then filled from `state` (`load_module_state`). KeyError when
    `state` lacks a buffer (a plain state dict has no non-persistent ones)."""
    with torch.device("meta"):
        model = model_class(config)
    model = model.to(dtype=dtype).to_empty(device=device)
    if hasattr(model, "tie_weights"):  # to_empty gives each tied parameter storage of its own
        model.tie_weights()
    missing = sorted(k for k, _ in model.named_buffers() if k not in state)
    if missing:  # to_empty left them uninitialised, and a state dict does not carry them
        raise KeyError(f"materialise: state lacks the buffers {missing}; give it `module_state(model)`")
    load_module_state(model, state)
    return model.eval()
