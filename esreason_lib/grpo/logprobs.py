"""Completion log-probabilities with the logits computed a chunk of the sequence at a time.

`generation.completion_logprobs` takes the model's logits for every completion position at once and casts them to
float32: [rows, Lc, V] in bfloat16 plus a float32 copy, ~10 bytes per token per vocabulary entry with what
backward keeps (24 GiB for 16 rows of 1,024 tokens at Qwen2.5's 151,936 tokens). `chunked_completion_logprobs`
runs the decoder once, then applies the output head and the float32 log-softmax to `chunk` positions at a time
under activation checkpointing: no chunk's logits are kept for backward (they are recomputed, one chunk at a
time), so the logits never take more than rows x chunk x V. The values equal `completion_logprobs`'s up to
float rounding (the head's matmul runs on other shapes).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from esreason_lib.models.generation import mask_positions


def _chunk_logp(hidden, targets, weight, bias, temperature: float):
    """log pi(targets) [b, c] from hidden states [b, c, d] through the output head (weight [V, d], bias or None)."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / temperature  # [b, c, V]
    return logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # [b, c]


def chunked_completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *,
                                temperature: float = 1.0, chunk: int = 256) -> torch.Tensor:
    """Per-token log pi(completion token) [B, Lc], differentiable, 0 where `completion_mask` is False: what
    `generation.completion_logprobs` returns (without entropies), `chunk` completion positions per head call.

    `model` is a causal LM with `base_model` (the decoder: last hidden states) and `get_output_embeddings()` (the
    head, applied to them as is, as Qwen2 / Llama do)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    lc = completion_ids.shape[1]
    ids = torch.cat([prompt_ids, completion_ids], dim=1).to(model.device)  # [B, Lp+Lc]
    mask = torch.cat([prompt_mask.bool(), completion_mask.bool()], dim=1).to(model.device)  # [B, Lp+Lc]
    out = model.base_model(input_ids=ids, attention_mask=mask, position_ids=mask_positions(mask), use_cache=False)
    hidden = out.last_hidden_state[:, -(lc + 1): -1]  # [B, Lc, d] the states that predict each completion token
    head = model.get_output_embeddings()
    targets = completion_ids.to(hidden.device)  # [B, Lc]
    parts = []
    for s in range(0, lc, chunk):
        args = (hidden[:, s: s + chunk], targets[:, s: s + chunk], head.weight, head.bias, float(temperature))
        parts.append(checkpoint(_chunk_logp, *args, use_reentrant=False) if torch.is_grad_enabled()
                     else _chunk_logp(*args))
    logp = torch.cat(parts, dim=1)  # [B, Lc]
    return torch.where(completion_mask.bool().to(logp.device), logp, 0.0)
