"""Notebook 04: where the ES and GRPO updates went, and whether the small ES updates matter (functional sparsity).

The paper (Sec. "functional sparsity"): ES moves the weights substantially, its relative L2 drift 40-44x
GRPO's, with its largest updates in LayerNorm and attention; yet resetting every coordinate whose update is
below an absolute threshold tau (2.5e-4 ... 2e-3) back to the base keeps the task gain, while resetting a random
set of the same size does not.

Drift: relative L2 of the update per module type and overall, and each module type's share of the largest
updates. Reset sweep, for every training seed of each method in `sparsity.methods`: for each quantile q of
|delta| over the changed coordinates (`sparsity.quantiles`) and each absolute threshold (`sparsity.taus`, the
paper's), every coordinate with 0 < |delta| <= tau is set back to its base value, beside a control that resets
a uniformly random set of exactly as many changed coordinates. Reset models are saved under runs of kind
`masked` (so each has a stable reference and is evaluated once by `evaluate_ref`); the numbers come from
`esreason_lib.paper.analysis`.

The finding checks ES at each checked threshold (`sparsity.check_quantiles` and every tau), per problem and
seed: the reset model above the base (some gain is left), no worse than the unreset model by more than
`sparsity.margin_fraction` of its own gain (the gain is kept), above its random control of the same count (it is
the small updates that do not matter) and above the noise-injection control (`controls.noise_control`: drifting
as far at random does not keep the gain).
The drift ratio and the module ranking are reported beside them as measurements.
Deviation: the tiny presets threshold at quantiles of |delta| (their update sizes differ from the paper's, so
absolute taus would not transfer); the paper presets use the paper's taus.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from esreason_lib.methods import METHODS, trainer
from esreason_lib.paper.analysis import (
    per_problem_pass,
    seed_by_problem,
)
from esreason_lib.paper.findings import Check, Finding, effect_check, make_finding
from esreason_lib.paper.studies.common import evaluate_ref, model_ref
from esreason_lib.paper.studies.controls import noise_control
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.paper.studies.registry import make_test
from esreason_lib.paper.studies.sparsity_weights import model_drift, reset_models
from esreason_lib.training.inputs import resolve_device

MODES = ("magnitude", "random")
"""The two resets compared: smallest-|delta| coordinates vs a uniformly random set of equal count."""
PAPER_DRIFT_RATIO = (40.0, 44.0)
"""The paper's ES / GRPO ratio of relative L2 drift."""
PAPER_MODULES = ("norm", "attention")
"""The module types of the paper's largest ES updates (LayerNorm and attention)."""


PROBLEM_COLUMNS = ["method", "seed", "mode", "threshold", "quantile", "tau", "sparsity", "problem_id", "pass@1",
                   "pass@K", "K"]
"""Columns of `SparsityTables.problems`."""


@dataclass(frozen=True)
class SparsityTables:
    """What `compute` measures: the drift and the per-problem scores of every model of the reset sweep."""

    drift: pd.DataFrame
    """Per (method, seed, module) plus module "all": numel, changed, frac_changed, rel_l2, update_share,
    top_share (`drift_by_module`)."""
    problems: pd.DataFrame
    """Per (method, seed, mode, threshold, problem): `PROBLEM_COLUMNS`. mode "base" (method "base", seed -1,
    threshold "", sparsity 1), "unreset" (the tuned model: threshold "", sparsity 0), or "magnitude" / "random"
    at a threshold label of `reset_models`, or "noise" (the ES run's noise-injection control, threshold "")."""
    checked: tuple[str, ...]
    """The threshold labels at which `finding` checks the reset (check_quantiles, then every tau)."""
    margin_fraction: float
    """`SparsitySpec.margin_fraction`: the fraction of the unreset model's gain over the base a reset may lose
    and still keep the gain."""
    delta_pass1: float = 0.01
    """`SparsitySpec.delta_pass1`: smallest Pass@1 effect of interest (reset above base / random / noise)."""
    delta_keep: float = 0.0025
    """`SparsitySpec.delta_keep`: smallest effect of interest of the non-inferiority check."""

    @property
    def sweep(self) -> pd.DataFrame:
        """Per (method, mode, threshold), means over seeds and problems: quantile, tau, sparsity, pass@1,
        pass@K, K, seeds. The unreset model (threshold "unreset", sparsity 0) and the base (threshold "base",
        sparsity 1) are added to both modes of every method so that the curves share their endpoints."""
        per_model = self.problems.groupby(["method", "seed", "mode", "threshold"], sort=False).agg(
            quantile=("quantile", "first"), tau=("tau", "first"), sparsity=("sparsity", "first"),
            **{"pass@1": ("pass@1", "mean"), "pass@K": ("pass@K", "mean")}, K=("K", "first")).reset_index()
        base = per_model[per_model["mode"] == "base"]
        frames = []
        for method, sub in per_model[per_model["method"] != "base"].groupby("method", sort=False):
            ends = pd.concat([sub[sub["mode"] == "unreset"].assign(threshold="unreset"),
                              base.assign(method=method, threshold="base")])
            frames += [sub[sub["mode"].isin(MODES)]] + [ends.assign(mode=mode) for mode in MODES]
        table = pd.concat(frames, ignore_index=True)
        out = table.groupby(["method", "mode", "threshold"], sort=False).agg(
            quantile=("quantile", "mean"), tau=("tau", "mean"), sparsity=("sparsity", "mean"),
            **{"pass@1": ("pass@1", "mean"), "pass@K": ("pass@K", "mean")}, K=("K", "first"),
            seeds=("seed", "nunique")).reset_index()
        return out.sort_values(["method", "mode", "sparsity"], ignore_index=True)


def _problem_scores(ref: str, preset: Preset, home, progress: bool, **labels) -> pd.DataFrame:
    spec = preset.sparsity.eval
    result = evaluate_ref(ref, preset.task, preset.test_task_kwargs(), spec, device=resolve_device(preset.device),
                          home=home, progress=progress)
    return per_problem_pass(result.table, max(spec.ks)).assign(**labels)


def compute(preset: Preset, *, home=None, progress: bool = True) -> SparsityTables:
    """Drift of every seed's ES and GRPO model of notebook 01 (trained here when missing, cached) and the reset
    sweep of every seed of each method in `preset.sparsity.methods`, scored per problem under
    `preset.sparsity.eval`. Drift, resets and evaluations are cached in the run store."""
    spec = preset.sparsity
    runs = {(m, s): trainer(m)(preset.config(m, seed=s), home=home, progress=progress)
            for m in METHODS for s in preset.seeds}
    drift = pd.concat([model_drift(preset.base_model, model_ref(run), key, home=home) for key, run in runs.items()],
                      ignore_index=True)
    frames = [_problem_scores(preset.base_model, preset, home, progress, method="base", seed=-1, mode="base",
                              threshold="", quantile=1.0, tau=np.nan, sparsity=1.0)]
    for method in spec.methods:
        if method not in METHODS:
            raise ValueError(f"sparsity.methods names {method!r}, not one of {METHODS}")
        for seed in preset.seeds:
            tuned = model_ref(runs[method, seed])
            frames.append(_problem_scores(tuned, preset, home, progress, method=method, seed=seed, mode="unreset",
                                          threshold="", quantile=0.0, tau=np.nan, sparsity=0.0))
            resets = reset_models(preset.base_model, tuned, spec.quantiles, taus=spec.taus, seed=seed, home=home,
                                  dtype=getattr(torch, preset.config(method).dtype))
            frames += [_problem_scores(r.pop("ref"), preset, home, progress, method=method, seed=seed, **r)
                       for r in resets.to_dict("records")]
            if method == "es":
                control = model_ref(noise_control(runs[method, seed], home=home, progress=progress))
                frames.append(_problem_scores(control, preset, home, progress, method=method, seed=seed,
                                              mode="noise", threshold="", quantile=np.nan, tau=np.nan,
                                              sparsity=np.nan))
    checked = tuple(f"q={q:g}" for q in spec.check_quantiles) + tuple(f"tau={t:g}" for t in spec.taus)
    return SparsityTables(drift=drift, problems=pd.concat(frames, ignore_index=True)[PROBLEM_COLUMNS],
                          checked=checked, margin_fraction=float(spec.margin_fraction),
                          delta_pass1=float(spec.delta_pass1), delta_keep=float(spec.delta_keep))


def reset_checks(tables: SparsityTables, method: str = "es") -> list[Check]:
    """`method`'s reset at each checked threshold, on Pass@1 per seed and problem (paired by seed where the arms
    come from one training run): reset - base > 0; reset keeps at least (1 - f) of the gain, i.e.
    reset - (1 - f) * unreset - f * base > 0 (f = `margin_fraction`); reset - random reset of the same count > 0;
    and, when the noise-injection control was scored, reset - noise control > 0 (moving as far at random does
    not give what the kept updates give). Deltas from `SparsitySpec`."""
    p = tables.problems
    problems = list(dict.fromkeys(p.loc[p["mode"] == "base", "problem_id"]))

    def scores(mode: str, threshold: str = "", who: str = method) -> np.ndarray:
        rows = p[(p["method"] == who) & (p["mode"] == mode) & (p["threshold"] == threshold)]
        return seed_by_problem(rows, "pass@1", problems)  # [seeds, problems]

    base, unreset, name, f = scores("base", who="base"), scores("unreset"), method.upper(), tables.margin_fraction
    noise = scores("noise") if ((p["method"] == method) & (p["mode"] == "noise")).any() else None
    checks = []
    for label in tables.checked:
        reset = scores("magnitude", label)
        checks += [effect_check(f"{name} reset {label} - base Pass@1", reset, base, delta=tables.delta_pass1),
                   effect_check(f"{name} reset {label} keeps >= {1 - f:.0%} of the gain, Pass@1",
                                reset - (1 - f) * unreset - f * base, delta=tables.delta_keep),
                   effect_check(f"{name} reset {label} - random reset of the same count, Pass@1",
                                reset - scores("random", label), delta=tables.delta_pass1)]
        if noise is not None:
            checks.append(effect_check(f"{name} reset {label} - noise-injection control, Pass@1", reset - noise,
                                       delta=tables.delta_pass1))
    return checks


def primary_on_reset_axis(checks: list[Check]) -> tuple[float, float, float, float]:
    """The paper test's primary check (the reset keeps >= 1 - f of the gain, `reset_checks`' second) on the reset
    sweep's axis, reset - base: (the reset's effect, its 95% interval, the line it must stay above: (1 - f) x the
    unreset gain). Both checks are means over the same seeds and problems: the line is their effects' difference,
    and the interval is the primary's, moved by it."""
    above_base, keep = checks[:2]
    line = above_base.effect - keep.effect
    return above_base.effect, keep.ci_low + line, keep.ci_high + line, line


def drift_summary(drift: pd.DataFrame) -> pd.DataFrame:
    """Per method (mean over seeds): rel_l2 of the whole model, and `modules`, the module types in decreasing
    order of their relative L2 (those that moved)."""
    per = drift.groupby(["method", "module"], sort=False)["rel_l2"].mean()
    rows = []
    for method in dict.fromkeys(drift["method"]):
        mods = per[method].drop("all")
        rows.append({"method": method, "rel_l2": float(per[method, "all"]),
                     "modules": tuple(mods[mods > 0].sort_values(ascending=False).index)})
    return pd.DataFrame(rows)


CLAIM = {"reproduced": "Resetting ES's smallest updates keeps its task gain",
         "not reproduced": "Resetting ES's smallest updates loses its task gain (contradicts the paper)"}
"""The paper's test's outcome in words, by its status (other statuses: `finding` words them)."""


def finding(tables: SparsityTables) -> Finding:
    """Notebook 04's finding from ES's `reset_checks` at the first checked threshold: the paper's test (the reset
    keeps the gain, non-inferiority; secondary: reset above base) and the control (reset above the random reset
    of the same count; secondary: above the noise-injection control); checks at further thresholds are shown;
    then ES's drift against GRPO's and the module types ES moved most, each beside the paper's value."""
    checks = reset_checks(tables, "es")
    first = tables.checked[0]
    at = {c.name.split(f" {first} ", 1)[1]: c for c in checks if f" reset {first} " in c.name}
    keep = next(c for name, c in at.items() if name.startswith("keeps"))
    noise = [c for name, c in at.items() if name.startswith("- noise")]
    tests = (make_test("04_sparsity", "paper", keep, [at["- base Pass@1"]]),
             make_test("04_sparsity", "control", at["- random reset of the same count, Pass@1"], noise))
    d = drift_summary(tables.drift).set_index("method")
    es, grpo, top = d.loc["es", "rel_l2"], d.loc["grpo", "rel_l2"], d.loc["es", "modules"][:2]
    if es == 0 or grpo == 0:
        drift = f"ES relative L2 drift {es:.2%}, GRPO's {grpo:.2%}: no ratio (a method did not move)"
    else:
        ratio = es / grpo
        side = "below" if ratio < PAPER_DRIFT_RATIO[0] else "above" if ratio > PAPER_DRIFT_RATIO[1] else "within"
        drift = (f"ES relative L2 drift {es:.2%} = {ratio:.1f}x GRPO's {grpo:.2%}, {side} the paper's "
                 f"{PAPER_DRIFT_RATIO[0]:g}-{PAPER_DRIFT_RATIO[1]:g}x")
    if top:
        same = "as" if set(top) == set(PAPER_MODULES) else "unlike"
        drift += f"; ES's largest relative updates in {' and '.join(top)}, {same} the paper (norm and attention)"
    status = tests[0].status
    lead = CLAIM.get(status, f"Whether resetting ES's smallest updates keeps its task gain: {status}")
    return make_finding(f"{lead}; {drift}", checks, tests=tests)
