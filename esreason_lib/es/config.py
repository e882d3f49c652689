"""`ESConfig`: everything that defines an ES run, validated where it is built (backend names, placements and noise
families checked against the registries that define them). `es.core` (ask/tell) reads its fields and imports none of
this."""

from __future__ import annotations

from dataclasses import dataclass, field

from esreason_lib.es.backends.base import BACKENDS, EXACT_BACKENDS
from esreason_lib.es.lowrank import NOISES
from esreason_lib.es.shaping import FITNESS_SHAPING
from esreason_lib.models.placement import check_gpus_per_worker, check_memory_share
from esreason_lib.store.identity import ADDED_OPTION, execution
from esreason_lib.training.settings import RunSettings
from esreason_lib.validation import (
    check,
    check_bool,
    check_choice,
    check_optional_positive_int,
    check_positive_float,
    check_positive_int,
    check_run_size,
    check_step_size,
)


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
    """Population evaluator (`es.backends.base.BACKENDS`): "batched", "fast" (batched with fused float ops: not
    bit-identical, see `es.backends.fast`), "native" ("fast" with a compiled attention kernel), "sequential",
    "ray" (`workers` actors), "vllm" (one vLLM engine, extra `vllm`), "ray-vllm" (`workers` actors with one vLLM
    engine each), or "auto" (batched when greedy in float32, where its rewards equal the sequential path's bit for
    bit, and the model a Qwen2ForCausalLM, the architecture its forward implements; else sequential)."""
    workers: int = field(default=2, metadata=execution())
    """Ray actors (one model replica each) when `backend` is "ray" or "ray-vllm"; ignored by the others."""
    ray_address: str | None = field(default=None, metadata=execution())
    """The Ray cluster "ray" / "ray-vllm" join ("10.0.0.1:6379", "ray://head:10001", "auto"); None: $RAY_ADDRESS,
    else a new local cluster (`es.backends.ray_cluster.start_ray`). Only with those backends. Placement only."""
    noise: str = field(default="full", metadata=ADDED_OPTION)
    """Perturbation family (`es.lowrank.NOISES`): "full" (eps ~ N(0, I) on every weight) or "lowrank" (EGGROLL:
    each 2-D weight moves along A B^T / sqrt(rank), other tensors full-rank; scored by
    `es.backends.lowrank.LowRankBackend`, so it needs greedy=True and backend "auto" or "batched"; `tell` moves
    along the same directions)."""
    rank: int = field(default=1, metadata=ADDED_OPTION)
    """r of the "lowrank" noise (ignored by "full")."""
    gpus_per_worker: float | None = field(default=None, metadata=execution())
    """Ray GPUs per actor ("ray", "ray-vllm" with the model on CUDA): a fraction shares a GPU (0.125: eight actors
    and their engines on one), a whole number > 1 gives an actor several; None picks the largest share with which
    every worker fits (`models.placement`). Placement only: the rewards do not depend on it."""
    gpu_memory_utilization: float | None = field(default=None, metadata=execution())
    """Share of its GPU's memory one vLLM engine takes ("vllm", "ray-vllm"); None: 0.5 split among the engines on
    one GPU. Placement only: the rewards do not depend on it."""
    members_at_once: int | None = field(default=None, metadata=execution(added=True))
    """Members the "batched", "fast", "native" and low-rank backends stack and decode together (each holds copies of
    the weights, `paper.memory.MEMBER_COPIES`: "fast" two, ~1.1 GB per member for a 135M-parameter base in float32);
    None: the whole population. On the CPU a member's completions do not depend on it, for each of these backends
    (tests/test_es_batched.py), so it is left out of the run identity; a GPU's batched gemm may round the "fast" and
    "native" forwards differently at another part size. An even value keeps antithetic pairs in one part (one noise
    draw per pair). The other backends hold no copy per member and refuse it."""
    drift_every: int = field(default=1, metadata=execution())
    """Log es/drift_rel (||theta - theta_0|| / ||theta_0||, computed on the model's device) every this many
    iterations and at the last; a diagnostic only, so skipping it changes no weights."""
    check_every: int = field(default=1, metadata=execution())
    """Compare the replicas' / engines' weight checksums with the driver's every this many iterations ("ray",
    "vllm", "ray-vllm"; a 1.5B model hashes ~3 GB per check); a replica that differs is reloaded."""

    def __post_init__(self):
        super().__post_init__()
        check_positive_int(self, "population_size", "iterations", "prompts_per_step")
        check_run_size(self, "iterations", "population_size", "prompts_per_step")
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
        check(self, "ray_address", self.ray_address is None or (isinstance(self.ray_address, str) and
                                                                bool(self.ray_address.strip())),
              "must be None or a Ray address such as '10.0.0.1:6379'")
        check(self, "ray_address", self.ray_address is None or self.backend in ("ray", "ray-vllm"),
              f"is only used by backend 'ray' or 'ray-vllm' (backend is {self.backend!r})")
        check(self, "backend", self.greedy or self.backend not in ("batched", "fast", "native"),
              "'batched', 'fast' and 'native' need greedy=True")
        check_choice(self, "noise", NOISES)
        check_positive_int(self, "rank", "check_every", "drift_every")
        check_optional_positive_int(self, "members_at_once")
        check(self, "members_at_once", self.members_at_once is None or self.backend in ("auto", "batched", "fast",
                                                                                      "native"),
              f"is only used by backends 'auto', 'batched', 'fast' and 'native' (backend is {self.backend!r})")
        check_gpus_per_worker("ESConfig", self.gpus_per_worker)
        check_memory_share("ESConfig", self.gpu_memory_utilization)
        check(self, "backend", self.noise != "lowrank" or self.backend in ("auto", "batched"),
              "must be 'auto' or 'batched' with noise='lowrank' (scored by es.backends.lowrank.LowRankBackend only)")
        check(self, "greedy", self.noise != "lowrank" or self.greedy,
              "must be True with noise='lowrank' (its batched decode is greedy)")
