"""The frozen spec of each study's own parameters, nested in `presets.Preset` (one per notebook section).

Every value is explicit (no "None means another field"), so two presets compare field by field; each spec checks
its own fields and names the bad one.
"""

from __future__ import annotations

from dataclasses import dataclass

from esreason_lib.evaluation import EvalSpec


def check_deltas(spec, *names: str) -> None:
    """ValueError naming the spec and field unless every smallest effect of interest `names` of `spec` is > 0."""
    for name in names:
        if not getattr(spec, name) > 0:
            raise ValueError(f"{type(spec).__name__}.{name} must be > 0, got {getattr(spec, name)!r}")

@dataclass(frozen=True)
class LemmaSpec:
    """Notebook 02, Lemmas 1-2: independent populations of iid members at each sigma on held-out prompts."""

    sigmas: tuple[float, ...]
    """Perturbation scales at which Lemma 1 is checked."""
    prompts: int
    """Held-out prompts over which the check averages."""
    samples: int
    """Samples per member and prompt for the JS_pol estimate."""
    population: int
    """N: iid members (no mirroring) per population (the check's cost grows as N^2)."""
    repeats: int
    """Independent populations per sigma (Lemma 1 is an expectation over the draws)."""
    fisher_samples: int
    """Samples per prompt from the unperturbed model for the Fisher trace (one backward each)."""


@dataclass(frozen=True)
class Prop1Spec:
    """Notebook 02, Lemma 3 and Proposition 1 along the first iterations of the preset's ES runs."""

    seeds: int
    """How many of the preset's training seeds (`Preset.seeds[:seeds]`) have their ES run followed; below
    `status.MIN_SEEDS` the Proposition 1 checks are `not resolved`."""
    iterations: int
    """ES iterations of each followed run along which Lemma 3 and Proposition 1 are evaluated."""
    probe_prompts: int
    """Fixed held-out probe prompts."""
    samples: int
    """Center samples per probe prompt per iteration (scored under every member and the updated center)."""
    ks: tuple[int, ...]
    """The K values at which Proposition 1's condition is evaluated."""
    delta_change: float
    """Smallest effect of interest of "Pass@K rises along training" (mean per-iteration change of the plug-in
    J_K on fresh samples of theta+, at the largest K): 3e-4 = ES's Pass@64 lead over the random-direction control
    (+0.043 on the tiny preset's 3-seed runs) spread over tiny's 150 iterations; a smaller per-iteration rise would
    not add up to the gain the account is meant to explain."""
    delta_condition: float
    """Smallest effect of interest of "Proposition 1's sufficient condition holds" (mean over iterations of
    J_K(pi_w) - J_K(pi_theta) - K sqrt(eps / 2), at each K): 3e-4, the same per-iteration Pass@K scale."""
    delta_link: float
    """Smallest effect of interest of the JS-diversity-to-Pass@K link (mean over seeds and probe prompts of the
    correlation across iterations between the population's JS_succ and the fresh change of J_K): 0.1, Cohen's
    "small" correlation; a weaker association could not carry the paper's account."""
    independent_link: bool = False
    """Draw a second, independent sample set of the centre at every iteration, so that the diversity link's
    Pass@K change starts from samples JS_succ was not computed from (`diversity.link_check`); False (the tiny and
    powered runs) leaves the link on shared samples, `undecidable at this design` (regression to the mean)."""

    def __post_init__(self):
        check_deltas(self, "delta_change", "delta_condition", "delta_link")
        for name in ("seeds", "iterations", "probe_prompts", "samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"Prop1Spec.{name} must be >= 1, got {getattr(self, name)!r}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"Prop1Spec.ks must be non-empty values >= 1, got {self.ks!r}")


@dataclass(frozen=True)
class ComparisonSpec:
    """Notebook 01: the step-size grid of each method, and the held-out problems on which each method's best
    setting is chosen (disjoint from the problems the verdicts are computed on)."""

    es_alphas: tuple[float, ...]
    """ES learning rates alpha trained for every seed (list the preset's `es.alpha` so that notebooks 03-05,
    which train at `es.alpha`, reuse those runs)."""
    grpo_lrs: tuple[float, ...]
    """GRPO learning rates trained for every seed (list the preset's `grpo.lr`, as for `es_alphas`)."""
    selection_problems: int
    """Held-out test problems, disjoint from `eval`'s, on which each method's best-Pass@1 and best-Pass@K
    setting is chosen (the next ones of the same test draw); 0 chooses on the evaluation problems themselves
    (used where `eval` already takes the whole test split), which favours the chosen settings."""
    temperature: float = 0.6
    """Sampling temperature of the evidence (the paper's T = 0.6); `eval`'s other settings are kept. Every check
    is computed at this temperature along the training paths (snapshots every `es/grpo.snapshot_every`
    iterations). Arms: ES = its best-Pass@1 arm on the selection problems (final model); GRPO = the arm whose
    path reaches the highest Pass@K at ES's Pass@1 on the selection problems (among arms whose path reaches it;
    else the nearest). Matching rule (`frontier.matched`): per GRPO seed, linear interpolation of its
    path (base, snapshots, final, in training order) at ES's seed-mean Pass@1: the first segment that brackets
    it; the nearest point when none does (the Pass@1 gap left is reported)."""
    side_temperatures: tuple[float, ...] = (1.0,)
    """Temperatures at which the final models are also evaluated and reported beside the evidence (never
    checked); greedy accuracy is recorded by `eval.greedy` at every temperature."""
    path_methods: tuple[str, ...] = ("es", "grpo", "noise")
    """Methods whose training paths are evaluated at every snapshot (the others contribute their final model
    only). The checks read GRPO's path alone (the matched control; ES's final model is matched against it), so
    ("grpo",) computes every check at a fraction of the cost (ES and noise-control paths only draw figure
    01_frontier_paths' curves; without them their final models are drawn as points)."""
    delta_pass1: float = 0.01
    """Smallest Pass@1 effect of interest (ES above base; ES above the noise control at K=1): one point, a third
    of ES's Pass@1 gain at T = 0.6 on the tiny preset's runs (+0.033): less would not be a gain worth training for."""
    delta_passk: float = 0.02
    """Smallest Pass@K (K = max) effect of interest (ES above GRPO at matched Pass@1; ES above the noise
    control): two points, half of the Pass@64 gap ES opens over the noise-injection control on the tiny preset's
    runs (+0.043 [+0.002, +0.087]); the paper reports its large-K gaps as several points."""
    delta_entropy: float = 0.02
    """Smallest evaluation token-entropy effect of interest (nats; GRPO below base, ES above GRPO, ES above the
    noise control): a quarter of GRPO lr 1e-4's collapse on the tiny preset's runs (-0.074 nats)."""

    def __post_init__(self):
        if not self.temperature > 0 or not all(t > 0 for t in self.side_temperatures):
            raise ValueError(f"ComparisonSpec temperatures must be > 0, got {self.temperature!r}, "
                             f"{self.side_temperatures!r}")
        check_deltas(self, "delta_pass1", "delta_passk", "delta_entropy")
        for name in ("es_alphas", "grpo_lrs"):
            values = getattr(self, name)
            if not values or not all(v > 0 for v in values) or len(set(values)) != len(values):
                raise ValueError(f"ComparisonSpec.{name} must be distinct values > 0, got {values!r}")
        if self.selection_problems < 0:
            raise ValueError(f"ComparisonSpec.selection_problems must be >= 0, got {self.selection_problems!r}")
        if "grpo" not in self.path_methods or not set(self.path_methods) <= {"es", "grpo", "noise"}:
            raise ValueError("ComparisonSpec.path_methods must hold 'grpo' (the control matches along its path) and "
                             f"only 'es', 'grpo', 'noise', got {self.path_methods!r}")


@dataclass(frozen=True)
class SequentialSpec:
    """Notebook 03 (and `train sequence`): each method's full update budget in its own iterations; a sequence
    gives each stage the 50/50 share of its own method's budget (`sequence.sequence_stages`)."""

    es_budget: int
    """ES iterations of one full ES run."""
    grpo_budget: int
    """GRPO iterations of one full GRPO run (more than `es_budget` when a GRPO iteration is cheaper)."""
    delta_stage: float = 0.01
    """Smallest effect of interest of a sequence's second stage over its own first stage (GRPO->ES: Pass@K at
    the largest K, ES's gain; ES->GRPO: Pass@1, GRPO's gain). One point: on the tiny preset's runs the ES stage
    of GRPO->ES changed Pass@64 by -0.010 [-0.043, +0.022]; a stage that adds less than a point adds nothing that
    matters."""
    delta_pass1: float = 0.01
    """Smallest Pass@1 effect of interest of a sequence against ES-only at the full budget (notebook 01's
    `comparison.delta_pass1`, for the same reason)."""
    delta_passk: float = 0.02
    """Smallest Pass@K effect of interest of a sequence against GRPO-only at the full budget and against GRPO's
    path at the sequence's Pass@1 (notebook 01's `comparison.delta_passk`, for the same reason)."""

    def __post_init__(self):
        check_deltas(self, "delta_stage", "delta_pass1", "delta_passk")
        for name in ("es_budget", "grpo_budget"):
            if getattr(self, name) < 2:
                raise ValueError(f"SequentialSpec.{name} must be >= 2, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class ScalingSpec:
    """Notebook 06: the population-size grid per model size, and the normalization / antithetic ablations."""

    models: tuple[str, ...]
    """Model sizes of the grid, smallest first."""
    populations: tuple[int, ...]
    """Population sizes N of the grid."""
    iterations: int
    """ES iterations per grid cell."""
    ablation_iterations: int
    """ES iterations of each ablation run on the base model (fitness shaping only shows once training moved)."""
    prompts_per_step: int
    """Prompts per ES iteration in the grid and the ablations (the study trains many runs)."""
    eval: EvalSpec
    """Evaluation of every grid and ablation model (greedy accuracy on the first `n_problems` problems of the
    held-out pool; the verdicts read its test-split rows, the per-shaping alpha its tuning-split rows)."""
    shaping_alphas: tuple[tuple[str, tuple[float, ...]], ...]
    """The shaping ablation: (normalization, alphas) per fitness shaping, trained without antithetic pairs and
    without `matched_step`; each shaping's alpha is chosen on the tuning split (seed-mean greedy accuracy) and the
    best of each is compared on the test split. The grids are scaled by each shaping's coefficient norm (rank
    ~0.30x, raw rewards ~0.03x z-score's), so each brackets the same update norms."""
    delta_gap: float
    """Smallest effect of interest of the population check (gap N_max - N_min on the largest size minus on the
    smallest, held-out greedy): 0.07, the paper's difference-in-differences (-0.071, Table 6)."""
    delta_shaping: float
    """Smallest effect of interest of "z-score above rank / raw" (best against best, held-out greedy): 0.015, half
    of z-score ES's greedy gain over the base in tiny's 60-iteration ablation (0.11 -> 0.14)."""

    def __post_init__(self):
        if self.iterations < 1 or self.ablation_iterations < 1:
            raise ValueError("ScalingSpec.iterations and ablation_iterations must be >= 1")
        names = [n for n, _ in self.shaping_alphas]
        if len(set(names)) != len(names) or "zscore" not in names:
            raise ValueError(f"ScalingSpec.shaping_alphas must name distinct shapings including 'zscore', got "
                             f"{names}")
        for name, alphas in self.shaping_alphas:
            if not alphas or not all(a > 0 for a in alphas):
                raise ValueError(f"ScalingSpec.shaping_alphas[{name!r}] must be alphas > 0, got {alphas!r}")
        check_deltas(self, "delta_gap", "delta_shaping")


@dataclass(frozen=True)
class SparsitySpec:
    """Notebook 04: parameter drift, and resetting the smallest updates back to the base weights."""

    quantiles: tuple[float, ...]
    """Quantiles of |delta| used as reset thresholds tau."""
    taus: tuple[float, ...]
    """Absolute reset thresholds tau on |delta| (the paper's), swept beside `quantiles`; each random control
    resets exactly as many coordinates as its threshold. Every tau is checked by the finding."""
    check_quantiles: tuple[float, ...]
    """The quantiles (a subset of `quantiles`) at which the finding checks that the reset keeps the gain."""
    margin_fraction: float
    """Non-inferiority margin on Pass@1 as a fraction f of the gain being tested: the reset model must keep at
    least (1 - f) of the unreset model's gain over the base, tested per seed and problem on
    reset - (1 - f) * unreset - f * base > 0 (so the CI carries the gain's own uncertainty). 0.25: a reset that
    loses more than a quarter of the gain did not "keep" it; a fixed absolute margin of 0.02 would be ~75% of
    ES's whole gain on the tiny preset's runs."""
    methods: tuple[str, ...]
    """Methods whose models (every training seed) are reset-swept; the finding checks "es", the others are
    reported beside it."""
    eval: EvalSpec
    """Evaluation of each model of the sweep (1 + seeds x (1 + 2 x (len(quantiles) + len(taus))) per method)."""
    delta_pass1: float = 0.01
    """Smallest Pass@1 effect of interest of the reset against the base, against the random reset of the same
    count and against the noise-injection control (notebook 01's `comparison.delta_pass1`: one point)."""
    delta_keep: float = 0.0025
    """Smallest effect of interest of the non-inferiority check (the slack beyond the margin):
    margin_fraction x delta_pass1, the margin a one-point gain allows."""

    def __post_init__(self):
        extra = sorted(set(self.check_quantiles) - set(self.quantiles))
        if extra:
            raise ValueError(f"SparsitySpec.check_quantiles must be among quantiles {self.quantiles!r}, got {extra}")
        if not 0 <= self.margin_fraction < 1:
            raise ValueError(f"SparsitySpec.margin_fraction must lie in [0, 1), got {self.margin_fraction!r}")
        check_deltas(self, "delta_pass1", "delta_keep")


@dataclass(frozen=True)
class ForgettingSpec:
    """Notebook 05: held-out tasks, the pretraining-mixture LM loss and the per-token KL to the base."""

    eval: EvalSpec
    """Evaluation protocol on the held-out tasks."""
    margin: float
    """Absolute non-inferiority margin on held-out Pass@K (K = the largest of `eval.ks`): "no forgetting" holds on a
    task when Delta Pass@K (ES - base, per seed and problem) > -margin. 0.02: the size of the task gain being
    bought (ES's Countdown Pass@1 gain over the base in tiny is +0.018), so forgetting within the margin costs
    less than the training earns. Absolute, not a fraction of the base: 20% of sorting's base (0.975) was -0.195,
    a margin no plausible forgetting could cross."""
    delta_noninferiority: float
    """Smallest effect of interest of the margin check: 0.01 (half the margin): the design must tell a model at
    half the margin from one at the margin; the check is `not reproduced` when its CI excludes every effect at
    least that far above -margin."""
    delta_vs_grpo: float
    """Smallest effect of interest of "ES forgets less than GRPO" (held-out Pass@K of ES minus GRPO's, both at the
    preset's configuration, `Preset.es` and `Preset.grpo`): 0.02, the no-forgetting margin itself: a difference
    in forgetting smaller than what counts as no forgetting does not matter."""
    kl_prompts: int
    """Held-out prompts per task on which the per-token KL to the base model is estimated."""
    kl_samples: int
    """Completions sampled from the tuned model per prompt for the KL estimate."""
    lm_sequences: int
    """Sequences of the fixed pretraining-mixture batch scored for the LM loss (zoo bases only)."""

    def __post_init__(self):
        if not 0 <= self.margin < 1:
            raise ValueError(f"ForgettingSpec.margin must lie in [0, 1), got {self.margin!r}")
        check_deltas(self, "delta_noninferiority", "delta_vs_grpo")
