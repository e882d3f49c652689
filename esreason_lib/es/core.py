"""Evolution Strategies for LLM fine-tuning, in evosax's ask/tell shape (Qiu et al. 2025's ES, the paper's
Algorithm 1).

One iteration is `es_step`: draw the step's prompts, score the centre, `ask()` draws N member seeds (a `Population`,
which carries sigma); a backend (`es.backends`) scores each member theta + sigma * eps_i on those prompts;
`tell(population, rewards)` shapes the rewards into z_i and updates, in place,

    theta <- theta + (alpha / N) * sum_i z_i * eps_i        (eps_i regenerated from seed i, never stored)

This is the paper's convention: the learning rate alpha absorbs the 1/sigma of the textbook ES gradient
estimator g = 1/(N sigma) sum_i z_i eps_i (so alpha here = lr * sigma). With z-scored fitness the sum of N
roughly independent unit-variance terms has per-coordinate size ~ sqrt(N), so each coordinate moves by about
alpha / sqrt(N) per iteration. With `antithetic`, members come in pairs (seed, +1), (seed, -1) sharing one
noise draw; a member's perturbation is sign * sigma * eps(seed) and its term in the update is z_i * sign_i * eps.
With `noise="lowrank"`, eps of each 2-D weight is EGGROLL's A B^T / sqrt(rank) instead (`es.lowrank`).

Noise, the update kernel and the bit-exact perturb/restore live in `es.noise`; seeds of every stream derive
from `ESConfig.seed` by name: ("es", "ask", it) for member seeds, ("es", "prompts", it) or ("es", "epoch", e)
for the step's prompts (`training.settings.prompt_indices`), ("es", "sample", it) for sampling. So a run resumed
from a checkpoint ends bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from esreason_lib.es.lowrank import apply_lowrank_update
from esreason_lib.es.noise import apply_update
from esreason_lib.es.shaping import FITNESS_SHAPING
from esreason_lib.guards import NonFiniteError
from esreason_lib.params import named_params
from esreason_lib.seeding import numpy_rng
from esreason_lib.validation import check_step_size


@dataclass(frozen=True, eq=False)
class Population:
    """One iteration's members: member i is theta + signs[i] * sigma * eps(seeds[i])."""

    seeds: np.ndarray
    """[N] int64 noise seeds; with antithetic sampling rows 2k and 2k+1 share a seed."""
    signs: np.ndarray
    """[N] int64 in {+1, -1} (all +1 without antithetic sampling)."""
    sigma: float
    """The perturbation scale the strategy asked for (`ESConfig.sigma`): a backend scores the members with it, so
    no backend keeps a copy of its own."""
    iteration: int = -1
    """The ES iteration that asked for it (-1 when built by hand)."""

    def __post_init__(self):
        seeds = np.asarray(self.seeds, dtype=np.int64).reshape(-1)  # [N]
        signs = np.asarray(self.signs, dtype=np.int64).reshape(-1)  # [N]
        if seeds.shape != signs.shape or not np.isin(signs, (1, -1)).all():
            raise ValueError(f"Population: signs must be +1/-1 and match seeds, got seeds {seeds.shape}, "
                             f"signs {signs.tolist()!r:.80}")
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(self, "signs", signs)
        check_step_size(self, "sigma")

    def __len__(self) -> int:
        return int(self.seeds.size)


class ES:
    """Ask/tell ES over named tensors (a model's parameters or a dict), updated in place by `tell`; `config` is an
    `es.config.ESConfig` (or anything with its population_size, sigma, seed, antithetic, normalization, alpha,
    matched_step, noise and rank).

    `fitness_shaping` (rewards [N] -> z [N]) overrides `FITNESS_SHAPING[config.normalization]`; `iteration`
    is where the member-seed stream starts (restored from a checkpoint with `load_state_dict`)."""

    def __init__(self, config, params, *, fitness_shaping: Callable | None = None, iteration: int = 0):
        self.config = config
        self.params = named_params(params)
        self.shaping = fitness_shaping or FITNESS_SHAPING[config.normalization]
        self.iteration = int(iteration)

    def ask(self) -> Population:
        """This iteration's members, from the stream (seed, "es", "ask", iteration)."""
        n, sigma = self.config.population_size, self.config.sigma
        rng = numpy_rng(self.config.seed, "es", "ask", self.iteration)
        seeds = rng.integers(0, 2**63 - 1, size=n // 2 if self.config.antithetic else n, dtype=np.int64)
        if self.config.antithetic:
            return Population(np.repeat(seeds, 2), np.tile([1, -1], n // 2), sigma, self.iteration)  # [N], [N]
        return Population(seeds, np.ones(n, dtype=np.int64), sigma, self.iteration)

    def tell(self, population, rewards) -> dict[str, float]:
        """Shape `rewards` [N] and update the parameters in place; advances `iteration`. `population` is a
        `Population` or a plain array of seeds (all signs +1). Returns reward and update statistics."""
        pop = (population if isinstance(population, Population)
               else Population(population, np.ones(len(population)), self.config.sigma))
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)  # [N]
        if r.size != len(pop):
            raise ValueError(f"tell: got {r.size} rewards for a population of {len(pop)}")
        if not np.isfinite(r).all():
            raise NonFiniteError(f"tell: rewards must be finite, got {r.tolist()!r:.200}")
        z = np.asarray(self.shaping(r), dtype=np.float64).reshape(-1)  # [N]
        if z.shape != r.shape or not np.isfinite(z).all():
            raise ValueError(f"tell: fitness shaping must map {r.size} rewards to as many finite values, "
                             f"got {z.tolist()!r:.200}")
        coef: dict[int, float] = {}  # seed -> sum of z_i * sign_i over members sharing it (insertion order)
        for s, sign, zi in zip(pop.seeds.tolist(), pop.signs.tolist(), z.tolist()):
            coef[s] = coef.get(s, 0.0) + zi * sign
        seeds, scale = list(coef), self.config.alpha / len(pop)
        c = np.fromiter(coef.values(), dtype=np.float64, count=len(coef))  # [K] per distinct seed
        if self.config.matched_step and np.any(c):
            c *= math.sqrt(len(pop)) / np.linalg.norm(c)
        norm = (apply_lowrank_update(self.params, seeds, c, scale, self.config.rank)
                if self.config.noise == "lowrank" else apply_update(self.params, seeds, c, scale))
        self.iteration += 1
        return {"reward/mean": float(r.mean()), "reward/std": float(r.std()), "reward/max": float(r.max()),
                "reward/min": float(r.min()), "es/update_norm": norm}

    def state_dict(self) -> dict[str, Any]:
        """The optimizer state: just the iteration (every stream derives from (config.seed, iteration))."""
        return {"iteration": self.iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])
