"""Population evaluators: seeds in, rewards out. The ES update (`es.ES.tell`) never knows which one ran.

A backend is any callable `(model, population, examples, *, iteration) -> Evaluation`. `SequentialBackend`
perturbs the one model in place member by member (exact restore, see `es_noise`), generates on the step's
prompts and scores with the task. `es_batched.BatchedBackend` decodes the whole population in one batched
forward with the same rewards (bit-identical in float32, greedy). `make_backend` picks one from an `ESConfig`.

All members and the center model share one sampling seed per iteration, `derive_seed(seed, "es", "sample",
iteration)` (common random numbers): with temperature sampling, reward differences between members then come
from their weights rather than from independent sampling luck. With greedy decoding the seed is unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from esreason_lib.es.noise import named_params, perturbed
from esreason_lib.seeding import derive_seed


@dataclass
class Evaluation:
    """The scores of one population on one batch of prompts."""

    rewards: np.ndarray
    """[N] float64: each member's mean shaped reward over the step's prompts (the fitness given to `tell`)."""
    correct: np.ndarray
    """[N, P] float64: each member's fraction of correct completions per prompt (0/1 with one greedy sample)."""
    fixup_frac: float = 0.0
    """Mean over members of the fraction of weights the exact restore had to fix up (remote backends report their workers' fractions)."""
    generations: int = 0
    """Completions generated for this evaluation."""


@runtime_checkable
class PopulationEvaluator(Protocol):
    """Scores every member (seed, sign) of `population` at theta + sign * sigma * eps(seed) on `examples`.

    Must leave `model` bit-identical to how it found it and be deterministic in (population, examples,
    iteration)."""

    def __call__(self, model, population, examples: list[dict], *, iteration: int) -> Evaluation: ...


BACKENDS = ("auto", "batched", "sequential", "ray", "vllm", "ray-vllm")
"""Values of `ESConfig.backend`: "auto" is "batched" for greedy float32 runs (where it is exact and faster)
and "sequential" otherwise; "ray" scores members on `ESConfig.workers` Ray actors (`es_ray`, extra `ray`);
"vllm" scores them with one vLLM engine, perturbed in place (`es_vllm`, extra `vllm`); "ray-vllm" runs one
such engine in each of the `workers` Ray actors (one per GPU; extras `ray` and `vllm`)."""


def make_backend(config: Any, task, tokenizer) -> "PopulationEvaluator":
    """The population evaluator `config.backend` names (an `ESConfig`; "auto" resolved as `BACKENDS` says);
    `es_lowrank.LowRankBackend` whenever `config.noise` is "lowrank"."""
    from esreason_lib.es.backends.batched import BatchedBackend

    if config.noise == "lowrank":
        from esreason_lib.es.lowrank import LowRankBackend

        return LowRankBackend.from_config(config, task, tokenizer)
    name = config.backend
    if name == "auto":
        name = "batched" if config.greedy and config.dtype == "float32" else "sequential"
    if name not in BACKENDS:
        raise ValueError(f"ESConfig.backend must be one of {BACKENDS}, got {config.backend!r}")
    if name in ("ray", "ray-vllm"):
        from esreason_lib.es.backends.ray_actors import RayBackend  # here: es_ray imports es, which imports this module

        return RayBackend.from_config(config, task, tokenizer, workers=config.workers,
                                      engine="vllm" if name == "ray-vllm" else "local")
    if name == "vllm":
        from esreason_lib.es.backends.vllm_engines import VLLMBackend  # here: es_vllm imports es, which imports this module

        return VLLMBackend.from_config(config, task, tokenizer)
    return (BatchedBackend if name == "batched" else SequentialBackend).from_config(config, task, tokenizer)


def sample_seed(seed: int, iteration: int) -> int:
    """The sampling seed shared by every member (and the center) at `iteration` of the run seeded `seed`."""
    return derive_seed(int(seed), "es", "sample", int(iteration))


def score_examples(model, tokenizer, task, examples: list[dict], *, greedy: bool, temperature: float,
                   max_new_tokens: int, seed: int, with_entropy: bool = False):
    """Generate one completion per example with `model` and score it: (rewards [P], correct [P]) float64.

    With `with_entropy`, also returns the mean full-distribution token entropy (nats) over generated tokens.
    """
    from esreason_lib.models.generation import generate
    from esreason_lib.metrics import mean_token_entropy

    prompts = [task.prompt(ex, tokenizer) for ex in examples]
    ro = generate(model, tokenizer, prompts, n=1, temperature=temperature, greedy=greedy,
                  max_new_tokens=max_new_tokens, stop=task.stop, seed=seed)
    rewards = np.array([task.reward(c, ex) for c, ex in zip(ro.completions, examples)], dtype=np.float64)  # [P]
    correct = np.array([task.is_correct(c, ex) for c, ex in zip(ro.completions, examples)], dtype=np.float64)
    if with_entropy:
        return rewards, correct, mean_token_entropy(ro.entropies, ro.completion_mask)
    return rewards, correct  # [P], [P]


class SequentialBackend:
    """Evaluate members one after another on the single in-memory model (perturb, generate, score, restore)."""

    def __init__(self, task, tokenizer, *, sigma: float, greedy: bool = True, temperature: float = 1.0,
                 max_new_tokens: int | None = None, seed: int = 0):
        if not sigma > 0:
            raise ValueError(f"SequentialBackend: sigma must be > 0, got {sigma!r}")
        self.task, self.tokenizer, self.sigma = task, tokenizer, float(sigma)
        self.greedy, self.temperature, self.seed = bool(greedy), float(temperature), int(seed)
        self.max_new_tokens = int(max_new_tokens or task.max_new_tokens)

    @classmethod
    def from_config(cls, config: Any, task, tokenizer) -> "SequentialBackend":
        """The backend an `ESConfig` describes."""
        return cls(task, tokenizer, sigma=config.sigma, greedy=config.greedy, temperature=config.temperature,
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
            with perturbed(params, seed, int(sign), self.sigma) as fx:
                r, c = self.score(model, examples, iteration=iteration)  # [P], [P]
            rewards[i], correct[i], fix[i] = r.mean(), c, fx.fraction
        return Evaluation(rewards=rewards, correct=correct, fixup_frac=float(fix.mean()), generations=n * p)
