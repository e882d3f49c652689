"""fp32 master weights for a low-precision model: the optimiser steps fp32 copies, the model gets them rounded.

A bfloat16 weight of size ~1e-2 has a resolution of ~4e-5, so an AdamW step of lr = 1e-6 applied to it directly
rounds back to the same value and training silently stands still. Keeping an fp32 master per parameter lets such
steps accumulate; the model's bf16 weights are the masters rounded to nearest after every step. float32
parameters are their own masters (no copy), so full-precision training is unchanged.

Memory: at the step, each bf16 gradient is released as its fp32 copy is made, and the fp32 gradients are released
after the step, so a low-precision model never holds both gradient copies nor carries the fp32 ones into the next
backward pass. On CUDA the optimiser is torch's fused AdamW (no all-parameter temporaries); elsewhere torch's
default implementation.
"""

from __future__ import annotations

import math

import torch


def master_weight_adamw(model: torch.nn.Module, *, lr: float, weight_decay: float = 0.0) -> torch.optim.AdamW:
    """AdamW over the model's trainable parameters: the parameters themselves where they are float32, fp32
    master copies where they are not (bfloat16), which `optimizer_step` keeps in sync with the model."""
    masters = [p if p.dtype == torch.float32 else p.detach().float().clone()
               for p in model.parameters() if p.requires_grad]
    fused = True if masters and all(m.is_cuda for m in masters) else None  # None: torch's default elsewhere
    return torch.optim.AdamW(masters, lr=lr, weight_decay=weight_decay, fused=fused)


def optimizer_step(params: list[torch.Tensor], opt, max_grad_norm: float | None) -> float:
    """One step of `opt` from the gradients on `params` (the model's trainable parameters, in the order `opt`
    holds them), clipped to `max_grad_norm` (None: not clipped). Where `opt` holds an fp32 master instead of
    the parameter itself (`master_weight_adamw`), the gradient is moved into the master first (the parameter's
    `grad` is None afterwards) and the stepped master is copied back, rounded to the parameter's dtype, its fp32
    gradient released. Returns the global gradient norm before clipping."""
    masters = [m for group in opt.param_groups for m in group["params"]]
    if len(masters) != len(params):
        raise ValueError(f"optimizer holds {len(masters)} tensors but the model has {len(params)} trainable ones")
    for m, p in zip(masters, params):
        if m is not p:
            m.grad = None if p.grad is None else p.grad.float()
            p.grad = None  # its fp32 copy replaces it: the two are never all held at once
    norm = torch.nn.utils.clip_grad_norm_(masters, max_grad_norm or math.inf)
    opt.step()
    with torch.no_grad():
        for m, p in zip(masters, params):
            if m is not p:
                p.copy_(m)
                m.grad = None
    return float(norm)
