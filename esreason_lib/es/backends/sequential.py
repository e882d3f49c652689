"""The sequential backend: one in-memory model, each member perturbed in place, scored, and restored bit-exactly."""

from __future__ import annotations

from typing import Any

import numpy as np

from esreason_lib.es.backends.base import Evaluation, sample_seed, score_examples
from esreason_lib.es.noise import perturbed
from esreason_lib.params import named_params


class SequentialBackend:
    """Evaluate members one after another on the single in-memory model (perturb by the population's sigma,
    generate, score, restore)."""

    def __init__(self, task, tokenizer, *, greedy: bool = True, temperature: float = 1.0,
                 max_new_tokens: int | None = None, seed: int = 0):
        self.task, self.tokenizer = task, tokenizer
        self.greedy, self.temperature, self.seed = bool(greedy), float(temperature), int(seed)
        self.max_new_tokens = int(max_new_tokens or task.max_new_tokens)

    @classmethod
    def from_config(cls, config: Any, task, tokenizer) -> "SequentialBackend":
        """The backend an `ESConfig` describes."""
        return cls(task, tokenizer, greedy=config.greedy, temperature=config.temperature,
                   max_new_tokens=config.max_new_tokens, seed=config.seed)

    def score(self, model, examples: list[dict], *, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        """The unperturbed model's (rewards [P], correct [P]) at `iteration`."""
        return score_examples(model, self.tokenizer, self.task, examples, greedy=self.greedy,
                              temperature=self.temperature, max_new_tokens=self.max_new_tokens,
                              seed=sample_seed(self.seed, iteration))

    def __call__(self, model, population, examples: list[dict], *, iteration: int) -> Evaluation:
        params = named_params(model)
        n, p = len(population), len(examples)
        rewards, correct, fix = np.zeros(n), np.zeros((n, p)), np.zeros(n)  # [N], [N, P], [N]
        for i, (seed, sign) in enumerate(zip(population.seeds.tolist(), population.signs.tolist())):
            with perturbed(params, seed, int(sign), population.sigma) as fx:
                r, c = self.score(model, examples, iteration=iteration)  # [P], [P]
            rewards[i], correct[i], fix[i] = r.mean(), c, fx.fraction
        return Evaluation(rewards=rewards, correct=correct, fixup_frac=float(fix.mean()), generations=n * p)
