"""Named presets: every hyperparameter of every notebook, as data, each written once.

Four presets are written out in full (`_BASES`); every registered preset is one of them with a table of dotted-key
overrides (`DERIVATIONS`: name -> (base, overrides)), so what `get_preset(name)` returns is what its line says:

- `smoke`: seconds per notebook; a 50k-parameter model; for the test suite only (numbers mean nothing).
- `tiny`: the CPU default (2 cores, minutes): the base `tiny-design` (tuned from the sweep recorded in
  `papers/sweeps.md`; ES populations and evaluations on the fused float32 forward, `models.fused_qwen2`: ES
  `backend="fast"`, `EvalSpec.forward="fused"`, equal to the model's own modules up to float rounding) with
  `_FAST_PATHS` (GRPO on the fused forward too, and GRPO and the evaluations drawing with shared prefixes and the
  one-uniform sampler).
- `full`: `tiny-design` with `_FULL_OVERRIDES`: the powered study designs that do not fit tiny's budget (CPU, hours).
- `powered`: `tiny-design` with `_POWERED_OVERRIDES`: the design `esreason power` sizes (13 min after `tiny`'s runs,
  about 32 min from an empty store on this machine).
- `frontier-habit`, `frontier-clean`, `frontier-m`, `frontier-multi`: the settings of the multi-setting design
  (`DESIGNS["frontier"]`): `tiny-design` with `frontier_design.FRONTIER_OVERRIDES` (the paper's KL beta, the
  step-size frontier, snapshots every 10 iterations, K = 16 and 32 at T = 0.6 everywhere, every free test problem),
  on the default base, the clean base, the larger base and a task whose problems have several correct answers; on
  tiny's fast paths (`_FAST_PATHS`). `make reproduce-design` runs all four (3 h 6 min here, `docs/speed.md`).
- `pretrained-smollm2`: the setting of the `pretrained` design (`DESIGNS["pretrained"]`): `tiny-design` with
  `pretrained_design.PRETRAINED_OVERRIDES` (SmolLM2-135M-Instruct on two-term arithmetic; notebooks 01, 02, 04, 05).
- `tiny-exact`: `tiny-design` with `_EXACT_OVERRIDES`: the same design computed with the model's own modules and the
  bit-exact batched ES backend.
- `paper-easy`: Qwen2.5-1.5B-Instruct on GSM8K with the paper's ES and GRPO hyperparameters and the artifact's grading
  and chat prompt (`GSM8K(protocol="artifact")`: the instruction as the system turn) and generation budget (2048
  new tokens in training and evaluation; its vLLM engines' context is then the artifact's 4096,
  `models.vllm_settings.engine_max_model_len`) (GPUs).
- `paper-easy-3b`, `paper-easy-7b`: paper-easy on Qwen2.5-3B- and 7B-Instruct, GRPO on TRL's engine (`PAPER_SIZES`).
- `paper-hard`: DeepSeek-R1-Distill-Qwen-1.5B on one epoch of DeepScaleR, ES sampling at temperature 0.6,
  evaluated on MATH-500 (GPUs). This preset is this project's own design, not the artifact's: the artifact ships no
  configuration for it, and its budgets (4096 new tokens, the populations, the evaluation) were chosen here.
Both paper presets follow the paper's protocol: 32 samples per problem at T = 0.6 (Pass@K and Maj@K for
K = 1..32), train prompts drawn by epoch, GRPO minibatches of 32 of the 64 prompts, Table 6's populations and
absolute sparsity thresholds.

A `Preset` (`preset_spec`) nests one frozen spec per study (`studies.specs`; evaluations are `evaluation.EvalSpec`),
every value explicit (no "None means another field"), so two presets compare field by field (`dataclasses.asdict`).

`get_preset(name, **overrides)` returns a validated, frozen `Preset`; overrides use dotted keys for the nested
configs (`get_preset("tiny", **{"es.sigma": 0.002, "scaling.iterations": 4})`), and an unknown name or key is a
clear error.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from esreason_lib.evaluation import EvalSpec
from esreason_lib.paper.splits import COUNTDOWN, NONE, SMOKE
from esreason_lib.paper.studies.frontier_design import FRONTIER_OVERRIDES, FRONTIER_SETTINGS
from esreason_lib.paper.studies.preset_spec import Preset, build_preset, with_overrides
from esreason_lib.paper.studies.pretrained_design import PRETRAINED_NOTEBOOKS, PRETRAINED_SETTINGS
from esreason_lib.paper.studies.specs import (
    ComparisonSpec,
    ForgettingSpec,
    LemmaSpec,
    Prop1Spec,
    ScalingSpec,
    SequentialSpec,
    SparsitySpec,
)

_BINARY = dict(reward_correct=1.0, reward_formatted=0.0, reward_invalid=0.0)
_CPU = dict(device="cpu", **_BINARY)  # the smoke and tiny ES and GRPO configs
_ARTIFACT_TOKENS = 2048
"""paper-easy's generation budget, the artifact's (its vLLM engines run with max_model_len 4096: the prompt and 2048
new tokens fit)."""
_PAPER_REWARD = dict(reward_correct=1.0, reward_formatted=0.1, reward_invalid=0.0)
_PAPER_ES = dict(population_size=32, sigma=1.5e-3, alpha=2.5e-4, prompts_per_step=64, checkpoint_every=10,
                 dtype="bfloat16", prompt_order="epoch",
                 drift_every=10, check_every=10,  # host-side cost only (benchmarks/bench_host_cost.py)
                 **_PAPER_REWARD)  # the paper's ES (both paper presets)
_PAPER_GRPO = dict(group_size=8, lr=1e-6, temperature=1.0, prompts_per_step=64, clip_eps=0.2, beta=0.001,
                   checkpoint_every=10, dtype="bfloat16", minibatch_size=32, prompt_order="epoch",
                   gradient_checkpointing=True, logit_chunk=256,  # memory only (grpo.memory: fits one H200)
                   check_every=10,  # the vLLM rollout engine's check (execution only)
                   **_PAPER_REWARD)  # the paper's GRPO (both paper presets)
_SIGMAS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
_QUANTILES = (0.5, 0.7, 0.9, 0.95, 0.99)
_KS_16 = (1, 2, 4, 8, 16)
_PROP1_DELTAS = dict(delta_change=3e-4, delta_condition=3e-4, delta_link=0.1)
"""Notebook 02's smallest effects of interest (reasons in `Prop1Spec`), fixed before the runs that test them."""
_FORGETTING_MARGINS = dict(margin=0.02, delta_noninferiority=0.01, delta_vs_grpo=0.02)
"""Notebook 05's absolute margin and smallest effects of interest (reasons in `ForgettingSpec`)."""
_SCALING_DELTAS = dict(delta_gap=0.07, delta_shaping=0.015)
"""Notebook 06's smallest effects of interest (reasons in `ScalingSpec`)."""
_TINY_SHAPING_ALPHAS = (("zscore", (1.2e-3, 2.4e-3)), ("rank", (4e-3, 8e-3)), ("none", (4e-2, 8e-2)))
"""Per-shaping alpha grids (z-score's two tiny step sizes, divided by rank's ~0.30x and raw rewards' ~0.03x
coefficient norm), each chosen on the tuning split."""
_PAPER_SHAPING_ALPHAS = (("zscore", (2.5e-4,)), ("rank", (8e-4,)), ("none", (8e-3,)))
"""The paper presets: the paper's alpha for z-score, scaled by the coefficient norms for the others (no grid)."""
_GPU_STUDIES = dict(
    seeds=(0, 1, 2), device="auto",
    # the paper's own step sizes only (a grid at 1.5B costs GPU days), chosen on the evaluation problems: paper-easy
    # evaluates the whole GSM8K test split and paper-hard all of MATH-500, so none are left over for selection
    comparison=ComparisonSpec(es_alphas=(2.5e-4,), grpo_lrs=(1e-6,), selection_problems=0),
    lemma=LemmaSpec(sigmas=_SIGMAS, prompts=8, samples=32, population=8, repeats=2, fisher_samples=16),
    prop1=Prop1Spec(seeds=3, iterations=20, probe_prompts=64, samples=8, ks=(1, 4, 16), **_PROP1_DELTAS),
    sequential=SequentialSpec(es_budget=234, grpo_budget=234), splits=NONE)
"""What both paper presets share beyond the ES and GRPO hyperparameters."""
_KS_1_TO_32 = tuple(range(1, 33))
"""The paper's evaluation: Pass@K (and Maj@K) at every K from 32 samples per problem at T = 0.6."""
_PAPER_POPULATIONS = (8, 16, 32, 64)
"""Table 6's population sizes."""
_PAPER_TAUS = (2.5e-4, 5e-4, 1e-3, 1.5e-3, 2e-3)
"""The paper's absolute reset thresholds tau on |delta| (functional sparsity)."""
_DEEPSCALER_EPOCH = 630
"""One epoch of DeepScaleR-Preview (40,315 problems) at 64 prompts per iteration: ceil(40315 / 64)."""

_BASES: dict[str, Preset] = {
    "smoke": build_preset(
        "smoke", base_model="smoke", control_model=None, task="countdown", task_kwargs={},
        heldout_tasks=("addition", "sorting"),
        es=dict(population_size=4, sigma=3e-3, alpha=1e-3, iterations=3, prompts_per_step=4, antithetic=True,
                checkpoint_every=2, snapshot_every=1, **_CPU),
        grpo=dict(group_size=4, lr=2e-5, beta=0.0, prompts_per_step=2, iterations=3, checkpoint_every=2,
                  snapshot_every=1, **_CPU),
        eval=EvalSpec(n_problems=6, n_samples=4, ks=(1, 2, 4), n_boot=50),
        seeds=(0,), device="cpu",
        comparison=ComparisonSpec(es_alphas=(1e-3,), grpo_lrs=(2e-5,), selection_problems=4),
        lemma=LemmaSpec(sigmas=(1e-3, 1e-2), prompts=2, samples=4, population=3, repeats=2, fisher_samples=4),
        prop1=Prop1Spec(seeds=1, iterations=2, probe_prompts=3, samples=4, ks=(1, 2), **_PROP1_DELTAS),
        sequential=SequentialSpec(es_budget=2, grpo_budget=2),
        sparsity=SparsitySpec(quantiles=(0.5, 0.9), taus=(), methods=("es", "grpo"),
                              check_quantiles=(0.9,), margin_fraction=0.25,
                              eval=EvalSpec(n_problems=4, n_samples=4, ks=(1, 4), greedy=False, n_boot=20)),
        forgetting=ForgettingSpec(eval=EvalSpec(n_problems=4, n_samples=4, ks=(1, 4), greedy=False, n_boot=20),
                                  kl_prompts=4, kl_samples=2, lm_sequences=32, **_FORGETTING_MARGINS),
        scaling=ScalingSpec(models=("smoke",), populations=(2, 4), iterations=2, ablation_iterations=2,
                            prompts_per_step=4, eval=EvalSpec(n_problems=12, n_samples=1, ks=(1,), n_boot=20),
                            shaping_alphas=(("zscore", (1e-3, 2e-3)), ("rank", (3e-3,)), ("none", (3e-2,))),
                            **_SCALING_DELTAS),
        splits=SMOKE),
    "tiny-design": build_preset(
        "tiny-design", base_model="qwen2-s-habit", control_model="qwen2-s", task="countdown", task_kwargs={},
        heldout_tasks=("addition", "sorting"),
        es=dict(population_size=16, sigma=1e-2, alpha=2.4e-3, iterations=150, prompts_per_step=128,
                antithetic=True, checkpoint_every=25, snapshot_every=25, backend="fast", **_CPU),
        grpo=dict(group_size=8, lr=1e-4, clip_eps=0.2, beta=0.0, prompts_per_step=128, iterations=150,
                  temperature=1.0, checkpoint_every=25, snapshot_every=25, **_CPU),
        eval=EvalSpec(n_problems=200, n_samples=64, ks=(*_KS_16, 32, 64), forward="fused"),
        seeds=(0, 1, 2), device="cpu",
        comparison=ComparisonSpec(es_alphas=(1.2e-3, 2.4e-3), grpo_lrs=(2e-5, 1e-4), selection_problems=100),
        lemma=LemmaSpec(sigmas=_SIGMAS, prompts=8, samples=8, population=8, repeats=4, fisher_samples=64),
        prop1=Prop1Spec(seeds=3, iterations=10, probe_prompts=32, samples=8, ks=(1, 4, 16), **_PROP1_DELTAS),
        sequential=SequentialSpec(es_budget=150, grpo_budget=150),
        sparsity=SparsitySpec(quantiles=_QUANTILES, taus=(), methods=("es", "grpo"),
                              check_quantiles=(0.9,), margin_fraction=0.25,
                              eval=EvalSpec(n_problems=100, n_samples=16, ks=_KS_16, greedy=False, forward="fused")),
        forgetting=ForgettingSpec(eval=EvalSpec(n_problems=200, n_samples=16, ks=_KS_16, forward="fused"),
                                  kl_prompts=64, kl_samples=8, lm_sequences=512, **_FORGETTING_MARGINS),
        # the grid stays at 16 iterations here (N has no room to matter; `powered` runs 100): see _POWERED_OVERRIDES
        scaling=ScalingSpec(models=("qwen2-s", "qwen2-m"), populations=(4, 32), iterations=16,
                            ablation_iterations=60, prompts_per_step=32,
                            eval=EvalSpec(n_problems=500, n_samples=1, ks=(1,), n_boot=100, forward="fused"),
                            shaping_alphas=_TINY_SHAPING_ALPHAS, **_SCALING_DELTAS),
        splits=COUNTDOWN),
    "paper-easy": build_preset(
        "paper-easy", base_model="Qwen/Qwen2.5-1.5B-Instruct", control_model=None, task="gsm8k",
        task_kwargs={"protocol": "artifact"},
        heldout_tasks=("math", "commonsenseqa", "gpqa", "hotpotqa", "mbpp"),
        es=dict(iterations=234, greedy=True, max_new_tokens=_ARTIFACT_TOKENS, **_PAPER_ES),
        grpo=dict(iterations=234, max_new_tokens=_ARTIFACT_TOKENS, micro_batch_size=16, **_PAPER_GRPO),
        eval=EvalSpec(n_problems=None, n_samples=32, ks=_KS_1_TO_32, temperature=0.6, max_new_tokens=_ARTIFACT_TOKENS),
        sparsity=SparsitySpec(quantiles=(), taus=_PAPER_TAUS, methods=("es", "grpo"),
                              check_quantiles=(), margin_fraction=0.25,
                              eval=EvalSpec(n_problems=200, n_samples=16, ks=_KS_16, max_new_tokens=_ARTIFACT_TOKENS)),
        forgetting=ForgettingSpec(eval=EvalSpec(n_problems=500, n_samples=32, ks=_KS_1_TO_32, temperature=0.6,
                                                max_new_tokens=_ARTIFACT_TOKENS),
                                  kl_prompts=64, kl_samples=8, lm_sequences=512, **_FORGETTING_MARGINS),
        scaling=ScalingSpec(models=("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct",
                                    "Qwen/Qwen2.5-3B-Instruct"), populations=_PAPER_POPULATIONS, iterations=100,
                            ablation_iterations=100, prompts_per_step=64,
                            eval=EvalSpec(n_problems=None, n_samples=1, ks=(1,), max_new_tokens=_ARTIFACT_TOKENS),
                            shaping_alphas=_PAPER_SHAPING_ALPHAS, **_SCALING_DELTAS),
        **_GPU_STUDIES),
    "paper-hard": build_preset(
        "paper-hard", base_model="deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", control_model=None, task="math",
        task_kwargs={"dataset": "deepscaler"}, heldout_tasks=("gsm8k", "commonsenseqa", "gpqa", "hotpotqa", "mbpp"),
        es=dict(iterations=_DEEPSCALER_EPOCH, greedy=False, temperature=0.6, max_new_tokens=4096, **_PAPER_ES),
        grpo=dict(iterations=_DEEPSCALER_EPOCH, max_new_tokens=4096, micro_batch_size=8, **_PAPER_GRPO),
        eval=EvalSpec(n_problems=500, n_samples=32, ks=_KS_1_TO_32, temperature=0.6, max_new_tokens=4096),
        eval_task_kwargs={"dataset": "math500"},
        sparsity=SparsitySpec(quantiles=(), taus=_PAPER_TAUS, methods=("es", "grpo"),
                              check_quantiles=(), margin_fraction=0.25,
                              eval=EvalSpec(n_problems=100, n_samples=16, ks=_KS_16, temperature=0.6,
                                            max_new_tokens=4096)),
        forgetting=ForgettingSpec(eval=EvalSpec(n_problems=500, n_samples=32, ks=_KS_1_TO_32, temperature=0.6,
                                                max_new_tokens=2048),
                                  kl_prompts=64, kl_samples=8, lm_sequences=512, **_FORGETTING_MARGINS),
        scaling=ScalingSpec(models=(), populations=_PAPER_POPULATIONS, iterations=100, ablation_iterations=100,
                            prompts_per_step=64,
                            eval=EvalSpec(n_problems=500, n_samples=1, ks=(1,), temperature=0.6, max_new_tokens=4096),
                            shaping_alphas=_PAPER_SHAPING_ALPHAS, **_SCALING_DELTAS),
        **_GPU_STUDIES),
}
"""The presets written out in full; every registered preset derives from one (`DERIVATIONS`). `tiny-design` is not
registered itself: `tiny` and the frontier settings compute it on the fast paths, `full`, `powered` and `tiny-exact`
on the paths their stored runs used."""


_FULL_OVERRIDES: dict[str, Any] = {
    # notebook 01: each method's step size over three values (the sweep in papers/sweeps.md: GRPO lr 3e-4 gave the
    # highest Pass@1, ES alpha 4.8e-3 overshot), chosen on 200 selection problems
    "comparison.es_alphas": (1.2e-3, 2.4e-3, 4.8e-3), "comparison.grpo_lrs": (2e-5, 1e-4, 3e-4),
    "comparison.selection_problems": 200,
    # notebook 06: Table 6's whole grid (qwen2-l too), runs long enough to move, 1000 held-out problems
    "scaling.models": ("qwen2-s", "qwen2-m", "qwen2-l"), "scaling.populations": (4, 8, 16, 32),
    "scaling.iterations": 50, "scaling.ablation_iterations": 150, "scaling.eval.n_problems": 1000,
    # notebooks 04 and 05: more problems and samples behind the reset and forgetting checks (MDE not yet measured)
    "sparsity.eval.n_problems": 500, "sparsity.eval.n_samples": 32, "forgetting.eval.n_problems": 960,
}
"""`full` = `tiny-design` with these dotted-key overrides: the powered designs that do not fit tiny's CPU budget."""

_POWERED_OVERRIDES: dict[str, Any] = {
    # notebooks 05 and 06: problems, not seeds, are the lever (~80% of the variance is problem-to-problem in tiny's
    # components). Sized by `esreason power` from the tiny CIs (MDE ~ 0.016-0.024 at 3 seeds x 200 problems -> below
    # delta 0.01 needs ~4-6x the problems); held-out tasks have their own pools: 960 problems each, the whole
    # test pool of addition (2 digits). The first powered run asked for 1000 and notebook 05 failed before any
    # result of it existed (addition has only 960 test problems); tests/test_presets.py now checks the pools.
    "forgetting.eval.n_problems": 960,
    # notebook 06: the population grid long enough for N to matter (100 iterations), every free test problem of
    # the Countdown pool (the 1,070 minus selection and tuning = 770 test rows) and three alphas per shaping
    "scaling.iterations": 100, "scaling.eval.n_problems": 1070,
    "scaling.shaping_alphas": (("zscore", (1.2e-3, 2.4e-3, 4.8e-3)), ("rank", (4e-3, 8e-3, 1.6e-2)),
                               ("none", (4e-2, 8e-2, 1.6e-1))),
    # notebook 02: Proposition 1 followed along 30 iterations on 64 probes
    "prop1.iterations": 30, "prop1.probe_prompts": 64,
}
"""`powered` = `tiny-design` with these overrides: the design the power analysis asks for within this task's problem
pools (run: `make reproduce PRESET=powered`, results in papers/claims.md)."""

_EVAL_SPECS = ("eval", "sparsity.eval", "forgetting.eval", "scaling.eval")
"""The dotted names of a preset's `EvalSpec`s."""
_EXACT_OVERRIDES: dict[str, Any] = {
    "es.backend": "auto",  # `batched`: every member's rewards bit-identical to the sequential path's
    **{f"{spec}.forward": "hf" for spec in _EVAL_SPECS},
}
"""`tiny-exact` = `tiny-design` computed with the model's own modules and the bit-exact batched ES backend (what
`tiny` was before it took the fused forward): the same design, other float rounding. Measured against `tiny` as it
was before `_FAST_PATHS`: all 33 checks of its findings had the same status, effects within 0.005
(`papers/exact_vs_fused.md`)."""

DESIGNS: dict[str, tuple[str, ...]] = {"frontier": tuple(FRONTIER_SETTINGS), "pretrained": tuple(PRETRAINED_SETTINGS)}
"""Designs: name -> its settings (presets whose records live apart, `paper.records.DESIGN_SETTINGS`)."""
DESCRIPTIVE_DESIGNS: frozenset[str] = frozenset({"pretrained"})
"""The designs registered with no primary check (their registration's "How this design is read": none can decide
at a size the machine affords): the claims show each of their tests' effect and 95% interval beside its status and
name them descriptive wherever they are counted (`design_tallies`)."""
DESIGN_NOTEBOOKS: dict[str, tuple[str, ...]] = {"pretrained": PRETRAINED_NOTEBOOKS}
"""The designs that run only some notebooks: name -> the two-digit numbers of those it runs (`preset_notebooks`);
a design not named runs every notebook."""

PAPER_SIZES: dict[str, str] = {"paper-easy-3b": "Qwen/Qwen2.5-3B-Instruct", "paper-easy-7b": "Qwen/Qwen2.5-7B-Instruct"}
"""paper-easy at the paper's 3B and 7B rows: the same design, ES and GRPO hyperparameters (the paper's, as
paper-easy's: N = 32, sigma 1.5e-3, alpha 2.5e-4), on a larger base, with GRPO on TRL's `GRPOTrainer`
(`grpo.engine="trl"`: the native loop does not fit past 1.5B on 8 x 80 GB, docs/gpus.md). ES at 7B needs one whole GPU
per actor beside the driver's (`--workers 7 --gpus-per-worker 1` on 8 x 80 GiB: `models.placement` refuses the
default plan, tests/test_gpu_commitment.py)."""

_FAST_PATHS: dict[str, Any] = {
    "grpo.forward": "fused", "grpo.share_prefixes": True, "grpo.shared_prompts": True, "grpo.sampler": "inverse-cdf",
    **{f"{spec}.{field}": value for spec in _EVAL_SPECS
       for field, value in (("share_prefixes", True), ("sampler", "inverse-cdf"))},
}
"""`tiny` and the `frontier` settings run their GRPO rollouts and updates and every evaluation on the fast torch paths
(no C compiler needed): the fused forward with shared prefixes, shared-prompt log-probs, and the one-uniform sampler
(the same distribution, other draws; `docs/speed.md`). `full`, `powered` and `tiny-exact` do not take them: they
keep the model's-modules GRPO and multinomial evaluations their stored results ran with (their run identities). A
`frontier` setting takes them after its own overrides (which replace whole `EvalSpec`s)."""

DERIVATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "smoke": ("smoke", {}),
    "tiny": ("tiny-design", _FAST_PATHS),
    "paper-easy": ("paper-easy", {}),
    "paper-hard": ("paper-hard", {}),
    **{name: ("paper-easy", {"base_model": model, "grpo.engine": "trl"}) for name, model in PAPER_SIZES.items()},
    "full": ("tiny-design", _FULL_OVERRIDES),
    "powered": ("tiny-design", _POWERED_OVERRIDES),
    "tiny-exact": ("tiny-design", _EXACT_OVERRIDES),
    **{name: ("tiny-design", {**FRONTIER_OVERRIDES, **changes, **_FAST_PATHS})
       for name, changes in FRONTIER_SETTINGS.items()},
    **{name: ("tiny-design", changes) for name, changes in PRETRAINED_SETTINGS.items()},
}
"""Every registered preset: name -> (the base in `_BASES` it starts from, the dotted-key overrides applied to it in
their order)."""

PRESETS: dict[str, Preset] = {
    name: replace(with_overrides(_BASES[base], changes, f"preset {name!r}"), name=name)
    for name, (base, changes) in DERIVATIONS.items()
}
"""The registered presets, by name (`get_preset`)."""


def get_preset(name: str, **overrides) -> Preset:
    """The named preset with dotted-key `overrides` applied (e.g. `**{"es.sigma": 2e-3, "seeds": (0,)}`).

    Changing `base_model`, `task` or `task_kwargs` propagates to the ES and GRPO configs.
    """
    if name not in PRESETS:
        raise ValueError(f"preset {name!r} is not one of {sorted(PRESETS)}")
    return with_overrides(PRESETS[name], overrides, f"preset {name!r}")


def preset_notebooks(name: str) -> tuple[str, ...] | None:
    """The two-digit numbers of the notebooks preset `name` runs when it is a setting of a design that runs only
    some (`DESIGN_NOTEBOOKS`), else None (every notebook)."""
    return next((DESIGN_NOTEBOOKS[d] for d, settings in DESIGNS.items() if name in settings and d in DESIGN_NOTEBOOKS),
                None)


SMOKE_PRESETS = ("smoke",)
"""Presets that only test that the code runs: whatever they show is marked, their numbers mean nothing."""


def preset_label(name: str) -> str:
    """How a preset is named where its results show (a figure's corner, the CLI): the name, and for a smoke preset
    that it is a smoke test."""
    return f"{name} (smoke test: numbers mean nothing)" if name in SMOKE_PRESETS else name
