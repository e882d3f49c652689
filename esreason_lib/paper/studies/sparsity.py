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

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from esreason_lib.methods import METHODS, trainer
from esreason_lib.models.load import load_model
from esreason_lib.models.zoo import quiet_transformers
from esreason_lib.paper.analysis import (
    StateDict,
    delta_quantiles,
    drift_table,
    module_summary,
    module_type,
    per_problem_pass,
    random_reset,
    reset_small_updates,
    seed_by_problem,
    update_deltas,
)
from esreason_lib.paper.findings import Check, Finding, effect_check, make_finding
from esreason_lib.paper.studies.common import evaluate_ref, model_ref
from esreason_lib.paper.studies.controls import noise_control
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.paper.studies.registry import make_test
from esreason_lib.seeding import derive_seed
from esreason_lib.store.cache import cached, stored_run
from esreason_lib.store.runs import Run
from esreason_lib.training.inputs import resolve_device

MODES = ("magnitude", "random")
"""The two resets compared: smallest-|delta| coordinates vs a uniformly random set of equal count."""
PAPER_DRIFT_RATIO = (40.0, 44.0)
"""The paper's ES / GRPO ratio of relative L2 drift."""
PAPER_MODULES = ("norm", "attention")
"""The module types of the paper's largest ES updates (LayerNorm and attention)."""


def dedupe_tied(state: StateDict) -> StateDict:
    """`state` without aliases: a key whose tensor shares storage with an earlier key (tied LM head) is dropped,
    so drift and sparsity count each weight once."""
    seen, out = set(), {}
    for name, tensor in state.items():
        ptr = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if ptr in seen:
            continue
        seen.add(ptr)
        out[name] = tensor
    return out


def load_state(ref: str, *, home=None) -> StateDict:
    """The float32 CPU state dict of model `ref` (tied aliases removed); a zoo name is pretrained into `home`."""
    model, _ = load_model(ref, device="cpu", home=home)
    return {k: v.detach().clone() for k, v in dedupe_tied(model.state_dict()).items()}


def top_update_share(base: StateDict, tuned: StateDict, top: float = 0.01) -> pd.Series:
    """Per module type: the fraction of the globally largest `top` fraction of |delta| (over changed
    coordinates) that lies in it. Index: module type; values sum to 1 (empty when tuned equals base)."""
    deltas = {k: d[d != 0].abs().flatten() for k, d in update_deltas(base, tuned).items()}
    mags = torch.cat(list(deltas.values()))  # [changed]
    if mags.numel() == 0:
        return pd.Series(dtype=float)
    count = max(1, int(round(top * mags.numel())))
    tau = torch.topk(mags, count).values.min()
    counts = pd.Series({k: int((d >= tau).sum()) for k, d in deltas.items()}, dtype=float)
    counts = counts.groupby(counts.index.map(module_type)).sum()
    return counts / counts.sum()


def drift_by_module(base: StateDict, tuned: dict[tuple[str, int], StateDict], top: float = 0.01) -> pd.DataFrame:
    """One row per (method, seed, module) plus module "all": rel_l2, update_share, frac_changed and top_share
    (share of the largest `top` fraction of updates, see `top_update_share`)."""
    frames = []
    for (method, seed), state in tuned.items():
        table = drift_table(base, state)
        mods = module_summary(table)
        mods["top_share"] = mods["module"].map(top_update_share(base, state, top)).fillna(0.0)
        total = pd.DataFrame([{"module": "all", "numel": table["numel"].sum(), "changed": table["changed"].sum(),
                               "rel_l2": float(np.sqrt((table["delta_l2"] ** 2).sum())
                                               / np.sqrt((table["base_l2"] ** 2).sum())),
                               "update_share": 1.0, "top_share": 1.0}])
        total["frac_changed"] = total["changed"] / total["numel"]
        frames.append(pd.concat([mods, total], ignore_index=True).assign(method=method, seed=seed))
    cols = ["method", "seed", "module", "numel", "changed", "frac_changed", "rel_l2", "update_share", "top_share"]
    return pd.concat(frames, ignore_index=True)[cols]


def model_drift(base_ref: str, tuned_ref: str, key: tuple[str, int], *, home=None) -> pd.DataFrame:
    """`drift_by_module` of model `tuned_ref` against `base_ref`, labelled `key` = (method, seed); cached as a
    `drift` run, so that `make figures` draws it from stored tables without the weights."""
    def compute() -> dict[str, pd.DataFrame]:
        return {"drift": drift_by_module(load_state(base_ref, home=home), {key: load_state(tuned_ref, home=home)})}

    config = {"base": base_ref, "tuned": tuned_ref, "method": key[0], "seed": int(key[1])}
    return cached("drift", config, ("drift",), compute, seed=int(key[1]), home=home)["drift"]


def _save_reset(run: Run, state: StateDict, template, tokenizer, **extra) -> dict:
    """Save the reset `state` as `run`'s model; returns the manifest fields `extra` (for `stored_run`)."""
    model = copy.deepcopy(template)
    missing, unexpected = model.load_state_dict(state, strict=False)
    aliases = set(template.state_dict()) - set(state)
    if unexpected or set(missing) - aliases:
        raise RuntimeError(f"reset state does not fit the model: missing {missing}, unexpected {unexpected}")
    with quiet_transformers():
        model.save_pretrained(run.model_dir)
        tokenizer.save_pretrained(run.model_dir)
    return extra


def reset_models(base_ref: str, tuned_ref: str, quantiles, *, taus=(), seed: int = 0, home=None,
                 dtype: torch.dtype = torch.float32) -> pd.DataFrame:
    """Build (or reload) the magnitude and random reset models of `tuned_ref` for each quantile of |delta| and
    each absolute threshold in `taus`.

    Returns one row per (mode, threshold): mode, threshold (label "q=0.9" or "tau=0.0005"), quantile, tau,
    sparsity (achieved fraction of changed coordinates reset) and ref (the saved model's directory); quantiles
    first, then taus. An absolute tau's
    quantile is its sparsity (the fraction of changed |delta| <= tau, i.e. the q of which tau is the quantile).
    The random control of a threshold resets exactly as many coordinates as its magnitude reset
    (`analysis.random_reset`). A tuned model equal to its base (no update, e.g. all rewards equal) gives
    sparsity 0. Models are saved in `dtype` (the training dtype: every reset weight is a base or a tuned
    value, so no precision is lost).
    """
    loaded: dict = {}

    def states():
        if not loaded:
            template, tokenizer = load_model(base_ref, device="cpu", dtype=dtype, home=home)
            loaded.update(template=template, tokenizer=tokenizer, base=load_state(base_ref, home=home),
                          tuned=load_state(tuned_ref, home=home))
        return loaded

    rows = []
    for key, value in [("quantile", float(q)) for q in quantiles] + [("tau", float(t)) for t in taus]:
        cfg = {"base": base_ref, "tuned": tuned_ref, key: value}
        def magnitude(run: Run, key=key, value=value) -> dict:
            s = states()
            if key == "tau":
                tau = value
            else:
                changed = any(bool((d != 0).any()) for d in update_deltas(s["base"], s["tuned"]).values())
                tau = float(delta_quantiles(s["base"], s["tuned"], [value])[0]) if changed else 0.0
            state, sparsity = reset_small_updates(s["base"], s["tuned"], tau)
            return _save_reset(run, state, s["template"], s["tokenizer"], tau=tau, sparsity=sparsity)

        mag = stored_run("masked", {**cfg, "mode": "magnitude"}, magnitude, seed=seed, home=home)
        tau, sparsity = mag.manifest()["tau"], mag.manifest()["sparsity"]

        def random_count(run: Run, key=key, value=value, sparsity=sparsity) -> dict:
            s = states()
            state, achieved = random_reset(s["base"], s["tuned"], sparsity,
                                           seed=derive_seed(seed, "sparsity", "random", key, value))
            return _save_reset(run, state, s["template"], s["tokenizer"], sparsity=achieved)

        rnd = stored_run("masked", {**cfg, "mode": "random", "count": "exact"}, random_count, seed=seed, home=home)
        quantile, label = (value, f"q={value:g}") if key == "quantile" else (float(sparsity), f"tau={value:g}")
        rows.append({"mode": "magnitude", "threshold": label, "quantile": quantile, "tau": tau, "sparsity": sparsity,
                     "ref": model_ref(mag)})
        rows.append({"mode": "random", "threshold": label, "quantile": quantile, "tau": float("nan"),
                     "sparsity": rnd.manifest()["sparsity"], "ref": model_ref(rnd)})
    return pd.DataFrame(rows)


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
