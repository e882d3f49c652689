"""The `frontier` design: the multi-setting design (`presets.DESIGNS["frontier"]`), four settings of `tiny-design`
on tiny's fast paths.

`FRONTIER_OVERRIDES` (the paper's KL beta, the step-size frontier, snapshots every 10 iterations, K = 16 and 32 at
T = 0.6 everywhere, every free test problem) applies to every setting; `FRONTIER_SETTINGS` then sets each one's base
and task: the default base, the clean base, the larger base and a task whose problems have several correct answers
(`presets.DERIVATIONS` derives them, `make reproduce-design` runs all four).
"""

from __future__ import annotations

from typing import Any

from esreason_lib.evaluation import EvalSpec
from esreason_lib.paper.splits import Splits

FRONTIER_PROBLEMS = 770
"""Test problems of every `frontier` evaluation: the whole free Countdown test pool (1,070 minus the selection and
tuning splits; `min_solutions` draws from its own pool). Sized by the operating characteristics (`esreason power`
on tiny's stored components): at 3 seeds x 200 problems the primary checks' P(reproduced | delta) is below 0.5;
at 3 x 770 it reaches 0.5 for the checks whose variance is mostly problem-to-problem."""
_FRONTIER_KS = (1, 2, 4, 8, 16, 32)
"""The paper's K = 16 and 32 from n = 64 samples (K <= n / 2: never the indicator "ever solved")."""
FRONTIER_OVERRIDES: dict[str, Any] = {
    # notebook 01: the frontier, fully: GRPO with the paper's KL beta over five learning rates, ES over three alphas,
    # a snapshot every 10 iterations so that matching never spans a whole ES Pass@1 range
    "grpo.beta": 0.001, "comparison.grpo_lrs": (5e-6, 1e-5, 2e-5, 5e-5, 1e-4),
    "comparison.es_alphas": (1.2e-3, 2.4e-3, 4.8e-3), "comparison.path_methods": ("grpo",),
    "es.snapshot_every": 10, "grpo.snapshot_every": 10,
    "es.checkpoint_every": 10, "grpo.checkpoint_every": 10,
    "eval.ks": _FRONTIER_KS, "eval.n_problems": FRONTIER_PROBLEMS,
    # notebooks 04 and 05 at the paper's T = 0.6 (05's held-out pools hold 960 problems each)
    "sparsity.eval": EvalSpec(n_problems=FRONTIER_PROBLEMS, n_samples=64, ks=_FRONTIER_KS, greedy=False,
                              temperature=0.6, forward="fused"),
    "forgetting.eval": EvalSpec(n_problems=960, n_samples=64, ks=_FRONTIER_KS, temperature=0.6, forward="fused"),
    # notebook 02: the diversity link on independent samples
    "prop1.independent_link": True, "prop1.iterations": 30, "prop1.probe_prompts": 64,
    # notebook 06 as in `powered`
    "scaling.iterations": 100, "scaling.eval.n_problems": 1070,
    # deltas by `registry.DELTA_RULE` clause B (none from this project's measurements): Pass@1 0.01, Pass@K 0.02,
    # entropy 0.02 nats, correlation 0.1; Pass@K rising 0.02 over the 30 followed iterations
    "comparison.delta_pass1": 0.01, "comparison.delta_passk": 0.02, "comparison.delta_entropy": 0.02,
    "prop1.delta_change": 0.02 / 30, "prop1.delta_link": 0.1, "sequential.delta_stage": 0.01,
    "sequential.delta_pass1": 0.01, "sequential.delta_passk": 0.02, "scaling.delta_shaping": 0.01,
}
"""Every `frontier` setting = `tiny-design` with these overrides (then its base and task, `FRONTIER_SETTINGS`, then
`presets._FAST_PATHS`)."""
MULTI_POOL = 116
"""Test problems of Countdown with at least 2 distinct correct expressions (3 numbers in 1..15, the zoo bases'
task: 116 test and 1,189 train problems; 3 or more: 30 and 351). Far below `FRONTIER_PROBLEMS`: its checks are
sized by what exists, and the operating characteristics say which of them can go either way; a 4-number zoo base
(`models/zoo.py`) would give this setting a pool of its own size."""
FRONTIER_SETTINGS: dict[str, dict[str, Any]] = {
    "frontier-habit": {"base_model": "qwen2-s-habit"},
    "frontier-clean": {"base_model": "qwen2-s", "control_model": "qwen2-s-habit"},
    "frontier-m": {"base_model": "qwen2-m", "control_model": "qwen2-s"},
    "frontier-multi": {"task_kwargs": {"min_solutions": 2, "train_size": 1100}, "eval.n_problems": MULTI_POOL - 20,
                       "comparison.selection_problems": 20, "sparsity.eval.n_problems": MULTI_POOL - 20,
                       "scaling.eval.n_problems": MULTI_POOL,
                       "splits": Splits(seed=0, pool=MULTI_POOL, selection=(60, 80), tuning=(80, MULTI_POOL))},
}
"""The settings of the `frontier` design: the default base (its designed 40% habit), the clean base, the larger
base, and Countdown restricted to problems with at least 2 distinct correct expressions (coverage can then mean
more than "solved once")."""
