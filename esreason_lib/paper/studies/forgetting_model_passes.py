"""Notebook 05's measurements on a model (`studies.forgetting`): language-model loss on a zoo base's pretraining
mixture and the per-token KL of a tuned model to its base, each forward bounded in memory (`models.logprobs`).

Shapes: `B` rows (sampled completions), `L` / `Lc` completion positions, `V` vocabulary.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from esreason_lib.models.generation import Sampling, generate
from esreason_lib.models.logprobs import SCORING_BYTES, budget_rows, check_budget, head_vocab, shared_prompt_logprobs
from esreason_lib.models.pretrain import IGNORE_INDEX, CorpusStream, build_batch, completion_loss
from esreason_lib.models.zoo import ZOO, get_spec
from esreason_lib.seeding import derive_seed


def heldout_lm_records(base: str, n: int) -> list[tuple[str, str, str]] | None:
    """`n` fixed `(family, prompt, completion)` draws from zoo model `base`'s pretraining mixture (same mixture
    weights and habit fraction, train splits only) under a stream seed of their own, so they are not the
    pretraining batches themselves; None when `base` is not a zoo name."""
    if base not in ZOO:
        return None
    spec = get_spec(base)
    stream = CorpusStream(replace(spec, seed=derive_seed(spec.seed, "forgetting", "lm") % 2**31))
    return [(fam, prompt, completion) for fam, _, prompt, completion in stream.sample_records(n)]


@torch.no_grad()
def lm_loss_by_family(model, tokenizer, records, batch_size: int = 256,
                      budget: int = SCORING_BYTES) -> dict[str, float]:
    """Mean completion cross-entropy (nats per token) per family and over all records ("all", token-weighted).

    Records go `batch_size` at a time, each padded batch forwarded in row blocks whose [rows, T, V] logits take
    at most `budget` bytes (`models.logprobs.budget_rows`; a batch that fits goes whole)."""
    sums: dict[str, float] = {}
    tokens: dict[str, int] = {}
    for family in dict.fromkeys(r[0] for r in records):
        rows = [r for r in records if r[0] == family]
        for s in range(0, len(rows), batch_size):
            chunk = rows[s: s + batch_size]
            batch = build_batch(tokenizer, [r[1] for r in chunk], [r[2] for r in chunk])
            step = budget_rows(budget, positions=batch["input_ids"].shape[1], vocab=head_vocab(model))
            for r in range(0, len(chunk), step):
                block = {k: v[r: r + step].to(model.device) for k, v in batch.items()}
                count = int((block["labels"][:, 1:] != IGNORE_INDEX).sum())  # labelled next-token targets
                sums[family] = sums.get(family, 0.0) + float(completion_loss(model, block)) * count
                tokens[family] = tokens.get(family, 0) + count
    out = {f: sums[f] / tokens[f] for f in sums}
    out["all"] = sum(sums.values()) / sum(tokens.values())
    return out


@torch.no_grad()
def kl_k3(logp_tuned: torch.Tensor, logp_base: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over masked tokens of k3 = r - 1 - log r with log r = logp_base - logp_tuned ([B, L] each), the
    per-token KL(pi_tuned || pi_base) estimate for tokens sampled from pi_tuned."""
    log_r = (logp_base - logp_tuned).double()[mask.bool()]  # [tokens]
    if log_r.numel() == 0:
        raise ValueError("mask selects no tokens")
    return float((log_r.exp() - 1 - log_r).mean())


@torch.no_grad()
def kl_to_base(tuned, base, tokenizer, prompts: list[str], *, n: int, max_new_tokens: int, stop=None,
               seed: int = 0, budget: int = SCORING_BYTES) -> float:
    """Per-token KL(pi_tuned || pi_base) at temperature 1 on `n` completions per prompt sampled from `tuned`.

    Each model's log-probabilities come from one pass over the samples, each prompt forwarded once for its `n`
    samples and no output-head call above `budget` bytes (`models.logprobs.shared_prompt_logprobs`)."""
    check_budget(budget)  # before sampling, not after
    ro = generate(tuned, tokenizer, prompts, Sampling(temperature=1.0, max_new_tokens=max_new_tokens), n=n, stop=stop,
                  seed=seed)
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    logp_tuned = shared_prompt_logprobs(tuned, *args, budget=budget)  # [B, Lc]
    logp_base = shared_prompt_logprobs(base, *args, budget=budget)  # [B, Lc]
    return kl_k3(logp_tuned, logp_base, ro.completion_mask.cpu())
