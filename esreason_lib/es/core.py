"""Evolution Strategies for LLM fine-tuning, in evosax's ask/tell shape (Qiu et al. 2025's ES, the paper's
Algorithm 1).

One iteration is `es_step`: draw the step's prompts, score the centre, `ask()` draws N member seeds; a backend
(`es.backends`) scores each member theta + sigma * eps_i on those prompts; `tell(population, rewards)` shapes the
rewards into z_i and updates, in place,

    theta <- theta + (alpha / N) * sum_i z_i * eps_i        (eps_i regenerated from seed i, never stored)

This is the paper's convention: the learning rate alpha absorbs the 1/sigma of the textbook ES gradient
estimator g = 1/(N sigma) sum_i z_i eps_i (so alpha here = lr * sigma). With z-scored fitness the sum of N
roughly independent unit-variance terms has per-coordinate size ~ sqrt(N), so each coordinate moves by about
alpha / sqrt(N) per iteration. With `antithetic`, members come in pairs (seed, +1), (seed, -1) sharing one
noise draw; a member's perturbation is sign * sigma * eps(seed) and its term in the update is z_i * sign_i * eps.
With `noise="lowrank"`, eps of each 2-D weight is EGGROLL's A B^T / sqrt(rank) instead (`es.lowrank`).

Noise, the update kernel and the bit-exact perturb/restore live in `es.noise`; seeds of every stream derive
from `ESConfig.seed` by name: ("es", "ask", it) for member seeds, ("es", "prompts", it) or ("es", "epoch", e)
for the step's prompts (`training.prompt_indices`), ("es", "sample", it) for sampling. So a run resumed from a
checkpoint ends bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from esreason_lib.es.backends.base import BACKENDS, EXACT_BACKENDS
from esreason_lib.es.backends.placement import check_gpus_per_worker, check_memory_share
from esreason_lib.es.lowrank import NOISES, apply_lowrank_update
from esreason_lib.es.noise import apply_update
from esreason_lib.models.weights import named_params
from esreason_lib.store.identity import ADDED_OPTION, execution
from esreason_lib.seeding import numpy_rng
from esreason_lib.guards import NonFiniteError
from esreason_lib.training import RunSettings
from esreason_lib.validation import (check, check_bool, check_choice, check_positive_float, check_positive_int,
                                     check_step_size)
from esreason_lib.es.shaping import FITNESS_SHAPING


@dataclass(frozen=True)
class ESConfig(RunSettings):
    """Everything that defines an ES run (its hash names the run directory). Defaults are Qiu et al.'s
    (N=30, sigma=1e-3, alpha=5e-4, z-scored fitness, greedy decoding); tiny CPU models want larger sigma/alpha."""

    population_size: int = 30
    """N: members per iteration (pairs of members share a seed when `antithetic`)."""
    sigma: float = 1e-3
    """Perturbation scale: member i is evaluated at theta + sign_i * sigma * eps_i, eps_i ~ N(0, I)."""
    alpha: float = 5e-4
    """Learning rate in the paper's convention theta += alpha/N * sum_i z_i eps_i (alpha absorbs 1/sigma)."""
    iterations: int = 100
    """Number of ask-evaluate-tell iterations (one `step` in the metrics log each)."""
    prompts_per_step: int = 8
    """P: train prompts every member is scored on per iteration (drawn without replacement when possible)."""
    normalization: str = "zscore"
    """Fitness shaping, a key of `FITNESS_SHAPING`: "zscore", "rank" (centered ranks) or "none" (raw)."""
    antithetic: bool = False
    """Mirrored sampling: members (seed, +1) and (seed, -1) share noise; requires an even population_size."""
    matched_step: bool = field(default=False, metadata=ADDED_OPTION)
    """Rescale each iteration's per-seed coefficients c (`tell`) to the norm sqrt(N) that z-scored fitness has
    under plain sampling, so that the update's expected norm alpha * sqrt(D / N) (D parameters) is the same for
    every fitness shaping and sampling (all-zero coefficients stay zero); False applies them as shaped."""
    greedy: bool = True
    """Greedy decoding (the paper's ES setting); False samples at `temperature`."""
    temperature: float = 1.0
    """Sampling temperature when not `greedy`."""
    backend: str = field(default="auto", metadata=execution(exact=EXACT_BACKENDS))
    """Population evaluator (`es.backends.BACKENDS`): "batched", "fast" (batched with fused float ops: not
    bit-identical, see `es.backends.fast`), "native" ("fast" with a compiled attention kernel), "sequential",
    "ray" (`workers` actors), "vllm" (one vLLM engine, extra `vllm`), "ray-vllm" (`workers` actors with one vLLM
    engine each), or "auto" (batched when greedy in float32, where its rewards equal the sequential path's bit for
    bit)."""
    workers: int = field(default=2, metadata=execution())
    """Ray actors (one model replica each) when `backend` is "ray" or "ray-vllm"; ignored by the others."""
    noise: str = field(default="full", metadata=ADDED_OPTION)
    """Perturbation family (`es.lowrank.NOISES`): "full" (eps ~ N(0, I) on every weight) or "lowrank" (EGGROLL:
    each 2-D weight moves along A B^T / sqrt(rank), other tensors full-rank; scored by `es.lowrank.LowRankBackend`,
    so it needs greedy=True and backend "auto" or "batched"; `tell` moves along the same directions)."""
    rank: int = field(default=1, metadata=ADDED_OPTION)
    """r of the "lowrank" noise (ignored by "full")."""
    gpus_per_worker: float | None = field(default=None, metadata=execution())
    """Ray GPUs per actor ("ray", "ray-vllm" with the model on CUDA): a fraction shares a GPU (0.125: eight actors
    and their engines on one), a whole number > 1 gives an actor several; None picks the largest share with which
    every worker fits (`es.backends.placement`). Placement only: the rewards do not depend on it."""
    gpu_memory_utilization: float | None = field(default=None, metadata=execution())
    """Share of its GPU's memory one vLLM engine takes ("vllm", "ray-vllm"); None: 0.5 split among the engines on
    one GPU. Placement only: the rewards do not depend on it."""
    drift_every: int = field(default=1, metadata=execution())
    """Log es/drift_rel (||theta - theta_0|| / ||theta_0||, computed on the model's device) every this many
    iterations and at the last; a diagnostic only, so skipping it changes no weights."""
    check_every: int = field(default=1, metadata=execution())
    """Compare the replicas' / engines' weight checksums with the driver's every this many iterations ("ray",
    "vllm", "ray-vllm"; a 1.5B model hashes ~3 GB per check); a replica that differs is reloaded."""

    def __post_init__(self):
        super().__post_init__()
        check_positive_int(self, "population_size", "iterations", "prompts_per_step")
        check(self, "population_size", self.population_size >= 2,
              "must be >= 2 (fitness is relative within the population)")
        check(self, "population_size", not (self.antithetic and self.population_size % 2),
              "must be even when antithetic=True (members come in +/- pairs)")
        check_positive_float(self, "temperature")
        check_step_size(self, "sigma", "alpha")
        check_choice(self, "normalization", FITNESS_SHAPING)
        check_bool(self, "antithetic", "greedy", "matched_step")
        check_choice(self, "backend", BACKENDS)
        check_positive_int(self, "workers")
        check(self, "backend", self.greedy or self.backend not in ("batched", "fast", "native"),
              "'batched', 'fast' and 'native' need greedy=True")
        check_choice(self, "noise", NOISES)
        check_positive_int(self, "rank", "check_every", "drift_every")
        check_gpus_per_worker("ESConfig", self.gpus_per_worker)
        check_memory_share("ESConfig", self.gpu_memory_utilization)
        check(self, "backend", self.noise != "lowrank" or self.backend in ("auto", "batched"),
              "must be 'auto' or 'batched' with noise='lowrank' (scored by es.lowrank.LowRankBackend only)")
        check(self, "greedy", self.noise != "lowrank" or self.greedy,
              "must be True with noise='lowrank' (its batched decode is greedy)")


@dataclass(frozen=True, eq=False)
class Population:
    """One iteration's members: member i is theta + signs[i] * sigma * eps(seeds[i])."""

    seeds: np.ndarray
    """[N] int64 noise seeds; with antithetic sampling rows 2k and 2k+1 share a seed."""
    signs: np.ndarray
    """[N] int64 in {+1, -1} (all +1 without antithetic sampling)."""
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

    def __len__(self) -> int:
        return int(self.seeds.size)


class ES:
    """Ask/tell ES over named tensors (a model's parameters or a dict), updated in place by `tell`.

    `fitness_shaping` (rewards [N] -> z [N]) overrides `FITNESS_SHAPING[config.normalization]`; `iteration`
    is where the member-seed stream starts (restored from a checkpoint with `load_state_dict`)."""

    def __init__(self, config: ESConfig, params, *, fitness_shaping: Callable | None = None, iteration: int = 0):
        self.config = config
        self.params = named_params(params)
        self.shaping = fitness_shaping or FITNESS_SHAPING[config.normalization]
        self.iteration = int(iteration)

    def ask(self) -> Population:
        """This iteration's members, from the stream (seed, "es", "ask", iteration)."""
        n = self.config.population_size
        rng = numpy_rng(self.config.seed, "es", "ask", self.iteration)
        seeds = rng.integers(0, 2**63 - 1, size=n // 2 if self.config.antithetic else n, dtype=np.int64)
        if self.config.antithetic:
            return Population(np.repeat(seeds, 2), np.tile([1, -1], n // 2), self.iteration)  # [N], [N]
        return Population(seeds, np.ones(n, dtype=np.int64), self.iteration)

    def tell(self, population, rewards) -> dict[str, float]:
        """Shape `rewards` [N] and update the parameters in place; advances `iteration`. `population` is a
        `Population` or a plain array of seeds (all signs +1). Returns reward and update statistics."""
        pop = population if isinstance(population, Population) else Population(population, np.ones(len(population)))
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
