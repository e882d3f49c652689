"""The pure GRPO functions: group-relative advantages and the clipped policy loss, `(loss, metrics)`.

After DeepSeekMath (Shao et al. 2024, arXiv 2402.03300, Sec. 4.1, Eq. 3); `grpo.loop` lists every deviation from
the paper.
"""

from __future__ import annotations

import math

import numpy as np
import torch

SCALES = ("group", "none")
"""Values of `GRPOConfig.scale` (`group_advantages`)."""
AGGREGATIONS = ("seq-mean-token-mean", "token-mean")
"""Values of `GRPOConfig.aggregation` (`policy_loss`)."""


def group_advantages(rewards, group_size: int, scale: str = "group", eps: float = 1e-6) -> torch.Tensor:
    """Group-relative advantages: A_i = r_i - mean(group), divided by (std(group) + eps) when scale="group".

    `rewards` [B] (tensor, array or list), rows grouped by prompt (row i -> group i // group_size). The std is
    the population std (ddof=0). Groups whose rewards are all equal get advantage exactly 0 (no signal).
    Returns a float32 tensor [B] (float64 input stays float64).
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    r = torch.as_tensor(rewards)
    out_dtype = r.dtype if r.dtype == torch.float64 else torch.float32
    r = r.to(torch.float64).reshape(-1)  # [B]
    if r.numel() % group_size != 0:
        raise ValueError(f"len(rewards)={r.numel()} is not a multiple of group_size={group_size}")
    g = r.view(-1, group_size)  # [P, G]
    adv = g - g.mean(dim=1, keepdim=True)  # [P, G]
    if scale == "group":
        adv = adv / (g.std(dim=1, unbiased=False, keepdim=True) + eps)  # [P, G]
    flat = (g.amax(dim=1) == g.amin(dim=1)).unsqueeze(1)  # [P, 1]
    adv = adv.masked_fill(flat, 0.0)  # [P, G]
    return adv.reshape(-1).to(out_dtype)  # [B]


def policy_loss(logp, old_logp, ref_logp, adv, mask, clip_eps: float, beta: float,
                aggregation: str = "seq-mean-token-mean", weight=None) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO objective for one batch, as a loss to minimise, and detached diagnostics.

    Per token t of completion i: ratio = exp(logp - old_logp),
    l = -min(ratio * A_i, clip(ratio, 1 - clip_eps, 1 + clip_eps) * A_i) + beta * k3, with
    k3 = exp(ref - logp) - (ref - logp) - 1 >= 0 (zero exactly when the policies agree).
    Shapes: logp, old_logp, ref_logp, mask [B, T]; adv [B]; weight [B] or None: row i counts as `weight[i]`
    identical rows (None: 1 each). Gradients flow only through `logp`. `ref_logp` may be None only when
    beta == 0. Sequences with no masked-in token are ignored.
    Metrics (token means over the mask): `policy/clip_frac` (tokens where the clipped branch is active),
    `policy/kl` (mean k3; nan when ref_logp is None), `policy/ratio_mean`, `loss/policy` (the loss value).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta!r}")
    if beta > 0 and ref_logp is None:
        raise ValueError(f"ref_logp is required when beta > 0 (beta={beta!r})")
    if logp.shape != old_logp.shape or logp.shape != mask.shape or adv.shape != logp.shape[:1] or (
            weight is not None and weight.shape != adv.shape):
        raise ValueError(f"shape mismatch: logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)}, "
                         f"mask {tuple(mask.shape)}, adv {tuple(adv.shape)}, "
                         f"weight {None if weight is None else tuple(weight.shape)}")
    mask = mask.bool()  # [B, T]
    w = torch.ones_like(adv, dtype=logp.dtype) if weight is None else weight.to(logp.dtype)  # [B]
    m = mask.to(logp.dtype)  # [B, T]
    mw = m * w[:, None]  # [B, T] each token counted once per identical row
    a = adv.detach().to(logp.dtype).unsqueeze(1)  # [B, 1]
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    log_ratio = torch.where(mask, logp - old_logp.detach(), zero)  # [B, T] (0 where masked, even if inf there)
    ratio = torch.exp(log_ratio)  # [B, T]
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)  # [B, T]
    per_tok = -torch.minimum(ratio * a, clipped * a)  # [B, T]
    kl = None
    if ref_logp is not None:
        d = torch.where(mask, ref_logp.detach() - logp, zero)  # [B, T]
        kl = torch.exp(d) - d - 1.0  # [B, T] k3 estimator of KL(pi || pi_ref)
        if beta > 0:
            per_tok = per_tok + beta * kl  # [B, T]
    lens = m.sum(dim=1)  # [B]
    n_tok = mw.sum().clamp(min=1.0)  # []
    if aggregation == "seq-mean-token-mean":
        seq = (per_tok * m).sum(dim=1) / lens.clamp(min=1.0)  # [B]
        live = (lens > 0).to(logp.dtype) * w  # [B]
        loss = (seq * live).sum() / live.sum().clamp(min=1.0)  # []
    else:
        loss = (per_tok * mw).sum() / n_tok  # []
    with torch.no_grad():
        is_clipped = ((ratio > 1.0 + clip_eps) & (a > 0)) | ((ratio < 1.0 - clip_eps) & (a < 0))  # [B, T]
        metrics = {
            "policy/clip_frac": float((is_clipped.to(m.dtype) * mw).sum() / n_tok),
            "policy/kl": float((kl * mw).sum() / n_tok) if kl is not None else math.nan,
            "policy/ratio_mean": float((ratio * mw).sum() / n_tok),
            "loss/policy": float(loss),
        }
    return loss, metrics
