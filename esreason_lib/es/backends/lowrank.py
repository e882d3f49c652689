"""The low-rank population backend: the batched backend with EGGROLL's A B^T / sqrt(r) noise (`es.lowrank`)."""

from __future__ import annotations


import torch

from esreason_lib.es.backends.batched import BatchedBackend
from esreason_lib.es.lowrank import lowrank_weights


class LowRankBackend(BatchedBackend):
    """`BatchedBackend` scoring each member at theta + sign * sigma * E(seed), E the low-rank direction: the
    population decodes greedily in one batched forward with the low-rank term (module docstring)."""

    def __init__(self, task, tokenizer, *, sigma: float, rank: int, max_new_tokens: int | None = None,
                 batch_size: int = 512):
        super().__init__(task, tokenizer, sigma=sigma, max_new_tokens=max_new_tokens, batch_size=batch_size)
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"LowRankBackend: rank must be a positive int, got {rank!r}")
        self.rank = rank

    @classmethod
    def from_config(cls, config, task, tokenizer) -> "LowRankBackend":
        """The backend an `ESConfig` with noise="lowrank" describes (it must decode greedily)."""
        if not config.greedy:
            raise ValueError("LowRankBackend: ESConfig.greedy must be True (the batched decode is greedy only)")
        return cls(task, tokenizer, sigma=config.sigma, rank=config.rank, max_new_tokens=config.max_new_tokens)

    def stacked_weights(self, params: dict[str, torch.Tensor], population) -> dict:
        return lowrank_weights(params, population.seeds.tolist(), population.signs.tolist(), self.sigma, self.rank)
