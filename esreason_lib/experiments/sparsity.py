"""Notebook 04: where the ES and GRPO updates went, and whether the small ES updates matter (functional sparsity).

Drift: relative L2 of the update per module type and overall, and each module type's share of the largest
updates. Reset sweep: for each quantile q of |delta| over the changed coordinates (`sparsity_quantiles`) and
each absolute threshold (`sparsity_taus`, the paper's), every coordinate with 0 < |delta| <= tau is set back to
its base value, and the reset model is evaluated against a control that resets a uniformly random set of
exactly as many changed coordinates. Reset
models are saved under runs of kind `masked` (so each has a stable reference and is evaluated once by
`evaluate_ref`); the numbers come from `esreason_lib.analysis`.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch

from ..analysis import (StateDict, delta_quantiles, drift_table, module_summary, module_type, random_reset,
                        reset_small_updates, update_deltas)
from ..findings import Finding, make_finding
from ..models import load_model
from ..presets import EvalSpec, Preset
from ..runs import Run
from ..seeding import derive_seed
from ..training import METHODS, resolve_device, trainer
from ..zoo import quiet_transformers
from .common import evaluate_ref, model_ref

MODES = ("magnitude", "random")
"""The two resets compared: smallest-|delta| coordinates vs a uniformly random set of equal sparsity."""


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


def _save_reset(run: Run, state: StateDict, template, tokenizer, **extra) -> None:
    model = copy.deepcopy(template)
    missing, unexpected = model.load_state_dict(state, strict=False)
    aliases = set(template.state_dict()) - set(state)
    if unexpected or set(missing) - aliases:
        raise RuntimeError(f"reset state does not fit the model: missing {missing}, unexpected {unexpected}")
    with quiet_transformers():
        model.save_pretrained(run.model_dir)
        tokenizer.save_pretrained(run.model_dir)
    run.finish(**extra)


def reset_models(base_ref: str, tuned_ref: str, quantiles, *, taus=(), seed: int = 0, home=None,
                 dtype: torch.dtype = torch.float32) -> pd.DataFrame:
    """Build (or reload) the magnitude and random reset models of `tuned_ref` for each quantile of |delta| and
    each absolute threshold in `taus`.

    Returns one row per (mode, threshold): mode, quantile, tau, sparsity (achieved fraction of changed
    coordinates reset) and ref (the saved model's directory); quantiles first, then taus. An absolute tau's
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
        mag = Run.open("masked", {**cfg, "mode": "magnitude"}, seed=seed, home=home)
        if not mag.is_complete():
            s = states()
            if key == "tau":
                tau = value
            else:
                changed = any(bool((d != 0).any()) for d in update_deltas(s["base"], s["tuned"]).values())
                tau = float(delta_quantiles(s["base"], s["tuned"], [value])[0]) if changed else 0.0
            state, sparsity = reset_small_updates(s["base"], s["tuned"], tau)
            _save_reset(mag, state, s["template"], s["tokenizer"], tau=tau, sparsity=sparsity)
        tau, sparsity = mag.manifest()["tau"], mag.manifest()["sparsity"]
        rnd = Run.open("masked", {**cfg, "mode": "random", "count": "exact"}, seed=seed, home=home)
        if not rnd.is_complete():
            s = states()
            state, achieved = random_reset(s["base"], s["tuned"], sparsity,
                                           seed=derive_seed(seed, "sparsity", "random", key, value))
            _save_reset(rnd, state, s["template"], s["tokenizer"], sparsity=achieved)
        quantile = value if key == "quantile" else float(sparsity)
        rows.append({"mode": "magnitude", "quantile": quantile, "tau": tau, "sparsity": sparsity,
                     "ref": model_ref(mag)})
        rows.append({"mode": "random", "quantile": quantile, "tau": float("nan"),
                     "sparsity": rnd.manifest()["sparsity"], "ref": model_ref(rnd)})
    return pd.DataFrame(rows)


def _scores(ref: str, preset: Preset, spec: EvalSpec, home, progress: bool) -> dict[str, float]:
    result = evaluate_ref(ref, preset.task, preset.test_task_kwargs(), spec, device=resolve_device(preset.device),
                          home=home, progress=progress)
    curve = result.curve.set_index("k")["pass_at_k"]
    return {"pass@1": float(curve.loc[1]), "pass@K": float(curve.loc[max(spec.ks)]), "K": max(spec.ks)}


def sparsity_sweep(preset: Preset, runs: dict[tuple[str, int], Run], *, home=None,
                   progress: bool = True) -> pd.DataFrame:
    """Reset sweep for seed `preset.seeds[0]` of each method in `preset.sparsity.methods`.

    One row per (method, mode, quantile) with tau, sparsity, pass@1, pass@K and K (the largest of the ks)
    under `preset.sparsity.eval` (or `preset.eval`); quantile 0 is the unreset tuned model (sparsity 0) and
    quantile 1 the base (sparsity 1), added to both modes so the curves share their endpoints.
    """
    spec = preset.sparsity.eval
    seed = preset.seeds[0]
    base = _scores(preset.base_model, preset, spec, home, progress)
    frames = []
    for method in preset.sparsity.methods:
        if (method, seed) not in runs:
            raise ValueError(f"sparsity_methods names {method!r} but runs has no ({method!r}, {seed}) entry")
        tuned_ref = model_ref(runs[(method, seed)])
        tuned = _scores(tuned_ref, preset, spec, home, progress)
        table = reset_models(preset.base_model, tuned_ref, preset.sparsity.quantiles, taus=preset.sparsity.taus,
                             seed=seed, home=home, dtype=getattr(torch, preset.config(method).dtype))
        scores = pd.DataFrame([_scores(r, preset, spec, home, progress) for r in table["ref"]])
        table = pd.concat([table.drop(columns="ref"), scores], axis=1)
        ends = [{"mode": m, "quantile": q, "tau": np.nan, "sparsity": q, **s}
                for m in MODES for q, s in ((0.0, tuned), (1.0, base))]
        frames.append(pd.concat([pd.DataFrame(ends), table], ignore_index=True).assign(method=method))
    out = pd.concat(frames, ignore_index=True)
    cols = ["method", "mode", "quantile", "tau", "sparsity", "pass@1", "pass@K", "K"]
    return out[cols].sort_values(["method", "mode", "sparsity"], ignore_index=True)


def compute(preset: Preset, *, home=None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """{"drift", "sweep"}: drift per (method, seed, module) for every seed of notebook 01's ES and GRPO runs
    (trained here when missing, cached), and the reset sweep (see `sparsity_sweep`). Drift is cheap (state dicts
    only) and not cached."""
    runs = {(m, s): trainer(m)(preset.config(m, seed=s), home=home, progress=progress)
            for m in METHODS for s in preset.seeds}
    base = load_state(preset.base_model, home=home)
    drift = pd.concat([drift_by_module(base, {key: load_state(model_ref(run), home=home)})  # one tuned model
                       for key, run in runs.items()], ignore_index=True)  # in memory at a time
    return {"drift": drift, "sweep": sparsity_sweep(preset, runs, home=home, progress=progress)}


def _closest(table: pd.DataFrame, quantile: float) -> pd.Series:
    inner = table[(table["quantile"] > 0) & (table["quantile"] < 1)]
    return inner.iloc[int(np.argmin(np.abs(inner["quantile"].to_numpy() - quantile)))]


def describe_sparsity(drift: pd.DataFrame, sweep: pd.DataFrame, quantile: float = 0.9) -> str:
    """The finding line of notebook 04: overall drift per method (mean over seeds), the magnitude vs random
    reset at the sweep quantile closest to `quantile`, and the module type with the largest relative update."""
    per_method = drift.groupby(["method", "module"], sort=False)["rel_l2"].mean()
    methods = list(dict.fromkeys(drift["method"]))
    parts = ["drift (relative L2) " + " vs ".join(f"{m.upper()} {100 * per_method[(m, 'all')]:.2f}%"
                                                  for m in methods)]
    for method, sub in sweep.groupby("method", sort=False):
        mag, rnd = (sub[sub["mode"] == mode] for mode in MODES)
        row = _closest(mag, quantile)
        ctrl = rnd[rnd["quantile"] == row["quantile"]].iloc[0]
        unreset = mag[mag["quantile"] == 0.0].iloc[0]
        base = mag[mag["quantile"] == 1.0].iloc[0]
        parts.append(f"{method.upper()}: resetting the smallest {100 * row['sparsity']:.0f}% of changed "
                     f"coordinates gives pass@1 {row['pass@1']:.2f} / pass@{int(row['K'])} {row['pass@K']:.2f} "
                     f"(unreset {unreset['pass@1']:.2f} / {unreset['pass@K']:.2f}, random "
                     f"{100 * ctrl['sparsity']:.0f}% {ctrl['pass@1']:.2f} / {ctrl['pass@K']:.2f}, "
                     f"base {base['pass@1']:.2f} / {base['pass@K']:.2f})")
    largest = [f"{m.upper()} {per_method[m].drop('all').idxmax() if per_method[m].max() > 0 else 'none (no update)'}"
               for m in methods]
    parts.append("largest relative update in: " + ", ".join(largest))
    return "; ".join(parts)


def finding(tables: dict[str, pd.DataFrame]) -> Finding:
    """The finding of notebook 04 from `compute`'s tables."""
    return make_finding(describe_sparsity(tables["drift"], tables["sweep"]), ())
