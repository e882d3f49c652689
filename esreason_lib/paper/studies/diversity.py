"""Notebook 02: the paper's theory (Lemmas 1-3, Proposition 1) checked numerically on the tiny model.

Each measurement (`diversity_measurements`) is cached here as a run of its own and turned into tables and the finding.
Lemmas 1-2 (`compute_lemmas`): independent populations of iid members at each sigma on held-out prompts; JS_pol
by the token-level chain rule, member success probabilities by importance sampling, the Fisher trace and each
drawn population's own second-order prediction from per-sample gradients (`diversity_estimators`).
Lemma 3 and Proposition 1 (`compute_prop1`): along the first iterations of the preset's ES run, the center
samples fixed held-out probe prompts and those samples, scored under every member and the updated center theta+,
give p_theta, p_i and p_theta+ by importance sampling (common random numbers, so differences are not drowned in
sampling noise); Pass@K is the plug-in 1 - (1 - p)^K for all three policies.
"""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np
import pandas as pd
import torch

from esreason_lib.models.load import load_model
from esreason_lib.paper.findings import Check, Finding, effect_check, make_finding
from esreason_lib.paper.studies.diversity_estimators import (
    band_checks,
    condition_slack,
    diversity_link,
    fresh_change,
    grid,
    grid_bootstrap,
    loglog_slope,
    nanmedian_rows,
    prop1_slack,
    prop1_table,
)
from esreason_lib.paper.studies.diversity_measurements import lemma_cells, prop1_trajectory
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.paper.studies.registry import make_test
from esreason_lib.store.cache import cached
from esreason_lib.tasks import get_task
from esreason_lib.training.inputs import config_task, resolve_device

# ------------------------------------------------------------------------------------------ Lemmas 1 and 2


def lemma1_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per sigma: measured JS_pol (mean over populations and prompts, with its standard error over populations),
    the sequence-level Monte Carlo value, the Lemma 1 prediction (expectation over draws) and the drawn
    populations' own second-order value, with the ratios measured / predicted."""
    per_rep = cells.groupby(["sigma", "repeat"])["js_pol"].mean().groupby("sigma")
    out = cells.groupby("sigma")[["js_pol", "js_pol_mc", "prediction", "prediction_pop"]].mean()
    out["js_pol_se"] = per_rep.std(ddof=1).fillna(0.0) / np.sqrt(per_rep.size())
    out["ratio"] = out["js_pol"] / out["prediction"]
    out["ratio_pop"] = out["js_pol"] / out["prediction_pop"]
    return out.reset_index()[["sigma", "js_pol", "js_pol_se", "js_pol_mc", "prediction", "ratio", "prediction_pop",
                              "ratio_pop"]]


def compute_lemmas(preset: Preset, *, home=None, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`lemma_cells` on the preset's base model and held-out prompts; cached as a `diversity-lemmas` run. A preset
    without sigmas (`lemma.sigmas = ()`: a design that leaves the Lemma 1-2 study out) gets two empty tables and
    loads nothing."""
    if not preset.lemma.sigmas:
        return pd.DataFrame(), pd.DataFrame()
    config = {"model": preset.base_model, "task": preset.task, "task_kwargs": dict(preset.task_kwargs),
              "sigmas": list(preset.lemma.sigmas), "population": preset.lemma.population,
              "repeats": preset.lemma.repeats, "prompts": preset.lemma.prompts,
              "samples": preset.lemma.samples, "fisher_samples": preset.lemma.fisher_samples,
              "seed": preset.seeds[0], "version": 2}

    def compute() -> dict[str, pd.DataFrame]:
        model, tokenizer = load_model(preset.base_model, device=resolve_device(preset.device), home=home,
                                      progress=progress)
        task = get_task(preset.task, **preset.test_task_kwargs())
        examples = task.examples("test", n=preset.lemma.prompts, seed=preset.eval.seed)
        cells, members = lemma_cells(model, tokenizer, task, examples, sigmas=preset.lemma.sigmas,
                                     population=preset.lemma.population, repeats=preset.lemma.repeats,
                                     samples=preset.lemma.samples, fisher_samples=preset.lemma.fisher_samples,
                                     seed=preset.seeds[0], progress=progress)
        return {"cells": cells, "members": members}

    tables = cached("diversity-lemmas", config, ("cells", "members"), compute, seed=preset.seeds[0], home=home)
    return tables["cells"], tables["members"]


# ------------------------------------------------------------------------------------------ Lemma 3 and Prop 1


LATER_FIELDS = {"ray_address": None, "report_to": (), "members_at_once": None}
"""ES config fields added after the stored `diversity-prop1` runs: at these values they are left out of a run's
key (which holds every other field of its ES config), so the stored runs keep their identity."""


def followed_seeds(preset: Preset) -> tuple[int, ...]:
    """The seeds whose ES runs notebook 02 follows: `preset.seeds[:prop1.seeds]`; ValueError when the preset has
    fewer seeds."""
    if preset.prop1.seeds > len(preset.seeds):
        raise ValueError(f"Preset.prop1.seeds={preset.prop1.seeds} exceeds the preset's {len(preset.seeds)} seeds")
    return tuple(preset.seeds[:preset.prop1.seeds])


def compute_prop1(preset: Preset, *, home=None, progress: bool = True, scheme: str = "positive",
                  seeds=None) -> pd.DataFrame:
    """`prop1_trajectory` for the preset's ES runs of its `followed_seeds` (`prop1.iterations` iterations) on
    `prop1.probe_prompts` held-out prompts, each cached as a `diversity-prop1` run (checkpointed after every
    iteration: an interrupted trajectory resumes where it stopped); stacked with a `seed` column. `seeds`: only
    these followed seeds (`esreason prefill --trajectories` builds them a shard at a time); ValueError naming any
    that is not followed."""
    followed = followed_seeds(preset)
    chosen = followed if seeds is None else tuple(seeds)
    if set(chosen) - set(followed):
        raise ValueError(f"seeds {sorted(set(chosen) - set(followed))} are not among the preset's followed seeds "
                         f"{list(followed)} (Preset.seeds[:prop1.seeds])")
    probes = get_task(preset.task, **preset.test_task_kwargs()).examples("test", n=preset.prop1.probe_prompts,
                                                                         seed=preset.eval.seed)
    out = []
    for seed in chosen:
        config = replace(preset.es, iterations=preset.prop1.iterations, seed=seed)
        es = {k: v for k, v in asdict(config).items() if LATER_FIELDS.get(k, ...) != v}
        key = {"es": es, "probes": preset.prop1.probe_prompts, "samples": preset.prop1.samples,
               "scheme": scheme, "probe_seed": preset.eval.seed, "version": 3,
               # at its default, old runs keep their key
               **({"independent": True} if preset.prop1.independent_link else {})}

        def compute(run, config=config) -> dict[str, pd.DataFrame]:
            model, tokenizer = load_model(config.model, device=resolve_device(config.device),
                                          dtype=getattr(torch, config.dtype), home=home, progress=progress)
            return {"probes": prop1_trajectory(config, model, tokenizer, config_task(config), probes,
                                               samples=preset.prop1.samples, scheme=scheme, progress=progress,
                                               independent=preset.prop1.independent_link, run=run)}

        table = cached("diversity-prop1", key, ("probes",), compute, seed=seed, home=home, with_run=True)["probes"]
        out.append(table.assign(seed=seed))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


# ------------------------------------------------------------------------------------------ tables and finding


def small_sigmas(sigmas) -> list[float]:
    """The small-sigma regime of the check: the smallest half of the sigmas (at least two when available)."""
    s = sorted(set(float(x) for x in sigmas))
    return s[:max(min(2, len(s)), (len(s) + 1) // 2)]


RESOLVED = 3
"""A cell's success split is *resolved* when its samples hold at least this many successes and failures."""
SLOPE_BAND = (1.8, 2.2)
"""Lemma 1: the log-log slope of JS_pol against sigma over `small_sigmas` must lie in this band (the lemma: 2)."""
RATIO_BAND = (0.5, 2.0)
"""Lemma 1's measured / predicted JS_pol over `small_sigmas`, and Lemma 2's median gap / approximation over the
resolved small-sigma cells, must lie in this band (the lemmas: 1)."""


def lemma2_resolved(cells: pd.DataFrame) -> pd.Series:
    """Cells whose prompt had >= RESOLVED correct and >= RESOLVED incorrect samples: there the importance-sampling
    p_i are informative; with one or two failures (or successes) JS_succ's estimate is dominated by noise."""
    return (cells["n_correct"] >= RESOLVED) & (cells["n_samples"] - cells["n_correct"] >= RESOLVED)


def lemma1_plot_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Long table (sigma, estimator, js) for the log-log plot: JS_pol measured (token-level and sequence Monte
    Carlo; non-positive values dropped) and the drawn populations' second-order value sigma^2 Q / 2."""
    t = lemma1_table(cells)
    series = {"JS_pol token-level": "js_pol", "JS_pol sequence MC": "js_pol_mc",
              "sigma^2 Q / 2 (drawn populations)": "prediction_pop"}
    long = pd.concat([t[["sigma"]].assign(estimator=k, js=t[v]) for k, v in series.items()], ignore_index=True)
    return long[long["js"] > 0]


def prop1_plot_table(table: pd.DataFrame) -> pd.DataFrame:
    """Long table (iteration, k, quantity, value) from `prop1_table`, averaged over the followed seeds: the margin
    J_K(pi_w) - J_K(pi_theta), the threshold K sqrt(eps / 2) and the realised change J_K(pi_theta+) - J_K(pi_theta)
    on fresh samples."""
    parts = {"J_K(w) - J_K(theta)": "margin", "K sqrt(eps/2)": "threshold", "J_K(theta+) - J_K(theta), fresh": "change"}
    mean = table.groupby(["iteration", "k"], as_index=False)[list(parts.values())].mean()
    return pd.concat([mean[["iteration", "k"]].assign(quantity=q, value=mean[c].to_numpy()) for q, c in parts.items()],
                     ignore_index=True)


def prop1_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per K: iterations (over seeds), how often the condition held, how often Pass@K rose (fresh samples) among
    those and overall."""
    g = table.assign(rose_given_condition=table["condition"] & table["rose"]).groupby("k")
    return pd.DataFrame({"iterations": g.size(), "condition": g["condition"].sum(),
                         "rose_given_condition": g["rose_given_condition"].sum(),
                         "rose": g["rose"].sum()}).reset_index()


def lemma_checks(cells: pd.DataFrame, n_boot: int = 2000) -> list:
    """Lemma 1 (slope and measured / predicted over `small_sigmas`) and Lemma 2 (median gap / approximation over
    the resolved small-sigma cells with gap_approx > 0), each against its band as two one-sided checks, with a
    bootstrap over populations and prompts (`grid_bootstrap`)."""
    small = small_sigmas(cells["sigma"])
    sub = cells[cells["sigma"].isin(small)]
    keep = lemma2_resolved(sub) & (sub["gap_approx"] > 0)
    sub = sub.assign(gap_ratio=(sub["gap"] / sub["gap_approx"]).where(keep))  # NaN outside the resolved cells
    stats = {f"Lemma 1 slope (sigma <= {max(small):g})": (
                 SLOPE_BAND, lambda js: loglog_slope(small, js.mean(axis=(-2, -1))), ["js_pol"]),
             "Lemma 1 measured/predicted": (
                 RATIO_BAND, lambda js, pr: (js.mean(axis=(-2, -1)) / pr.mean(axis=(-2, -1))).mean(-1),
                 ["js_pol", "prediction"]),
             "Lemma 2 median gap/approximation": (RATIO_BAND, nanmedian_rows, ["gap_ratio"])}
    checks = []
    for name, (band, stat, cols) in stats.items():
        checks += band_checks(name, *grid_bootstrap([grid(sub, c) for c in cols], stat, n_boot=n_boot, name=name),
                              band)
    return checks


LEMMAS_LEFT_OUT = "Lemmas 1-2 are not in this design (`lemma.sigmas` is empty): no Taylor-limit or inequality line"
"""The sanity line of a design that leaves the Lemma 1-2 study out."""


def lemma_sanity(cells: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The Lemma 1-2 sanity lines of the finding (never evidence): the Taylor limits, then the inequalities;
    ([`LEMMAS_LEFT_OUT`], []) for empty `cells`."""
    if cells.empty:
        return [LEMMAS_LEFT_OUT], []
    res = lemma2_resolved(cells)
    return [f"Taylor limit, cannot fail: {c.describe()}" for c in lemma_checks(cells)], [
            f"P_pop >= P_same (AM-GM) in {(cells['p_pop'] >= cells['p_same'] - 1e-12).sum()}/{len(cells)} cells",
            f"JS_succ >= 0 (Jensen) in {(cells['js_succ'] >= -1e-12).sum()}/{len(cells)} cells",
            f"JS_succ <= JS_pol (data processing) in {(cells['js_succ'] <= cells['js_pol'])[res].sum()}/"
            f"{res.sum()} resolved cells"]


DELTAS = {"delta_change": 3e-4, "delta_condition": 3e-4, "delta_link": 0.1}
"""`Prop1Spec`'s smallest effects of interest (the presets' values), used when the tables carry none."""


SHARED_SAMPLES = ("JS_succ(t) and the Pass@K change share the samples of theta_t: regression to the mean makes "
                  "the correlation negative whatever the true change")
"""Why the diversity link on shared samples is `undecidable at this design` (`Check.fixed`)."""


def link_check(probes: pd.DataFrame, k: int, delta: float) -> Check:
    """The JS-diversity-to-Pass@K link: corr across iterations of JS_succ(t) and the Pass@K change, on
    independent samples (from p_fresh) when the trajectory drew them, else on shared samples and marked fixed by
    construction (`SHARED_SAMPLES`)."""
    name = f"corr(JS_succ, Pass@{k} change) across iterations"
    independent = "p_fresh" in probes
    link = diversity_link(probes, k, "p_fresh" if independent else "p_theta") if "js_succ" in probes else \
        np.empty((0, 0))
    fixed = "" if independent else SHARED_SAMPLES
    if link.shape[1] < 2:
        nan = float("nan")
        return Check(name, nan, nan, nan, nan, delta=delta, fixed=fixed)
    return effect_check(name + (", independent samples" if independent else ""), link, delta=delta, fixed=fixed)


def prop1_checks(probes: pd.DataFrame, ks, deltas=None) -> tuple[Check, Check]:
    """The evidence along training (seeds x probe prompts, means over iterations; `findings.effect_check`): Pass@K
    rising on fresh samples (`fresh_change` > 0, largest K) and the JS-diversity-to-Pass@K link (`link_check`).
    Proposition 1's sufficient condition is no check: `finding` reports how often it holds."""
    d = {**DELTAS, **(deltas or {})}
    k = max(ks)
    return (effect_check(f"Pass@{k} change per iteration, fresh samples", fresh_change(probes, k),
                         delta=d["delta_change"]), link_check(probes, k, d["delta_link"]))


def finding(tables: dict[str, pd.DataFrame]) -> Finding:
    """Notebook 02's finding from `compute`'s tables. The paper's test: Pass@K rises along ES training (fresh
    samples); the control: the JS-diversity link on independent samples (`link_check`). Proposition 1's
    sufficient condition is reported as how often it holds (a sufficient condition that does not hold contradicts
    nothing); Lemmas 1-2's band checks (Taylor limits) and the identities (AM-GM, Jensen, data processing, Lemma
    3's algebra, Proposition 1's bound, which holds for any update by Pinsker) are sanity lines, never evidence."""
    cells, probes, prop1 = tables["cells"], tables["probes"], tables["prop1"]
    deltas = tables["deltas"].iloc[0].to_dict() if "deltas" in tables else None
    ks = sorted(prop1["k"].unique())
    change, link = prop1_checks(probes, ks, deltas)
    s1, (taylor, inequalities) = prop1_summary(prop1), lemma_sanity(cells)
    held = ", ".join(f"K={r.k}: {r.condition} of {r.iterations}" for r in s1.itertuples())
    bound = [effect_check(f"Prop 1 K={k}: fresh J_K(theta+) - bound", prop1_slack(probes, k)) for k in ks]
    condition = [effect_check(f"Prop 1 K={k}: J_K(w) - J_K(theta) - K sqrt(eps/2)", condition_slack(probes, k))
                 for k in ks]
    sanity = (f"Proposition 1's sufficient condition (pooled over probes) held in {held} iterations x seeds; "
              "a sufficient condition that does not hold contradicts nothing",
              *(f"condition margin, reported: {c.describe()}" for c in condition), *taylor,
              *(f"Pinsker, holds for any update: {c.describe()}" for c in bound), *inequalities,
              f"Lemma 3 identity (algebra): max error {prop1['lemma3_err'].max():.1e}")
    return make_finding(f"Along ES's first {int(prop1['iteration'].max())} iterations; Proposition 1's condition "
                        f"held in {held} iterations x seeds (reported, never evidence)", (), sanity=sanity,
                        tests=(make_test("02_js_diversity", "paper", change),
                               make_test("02_js_diversity", "control", link)))


# ------------------------------------------------------------------------------------------ the study face


def compute(preset: Preset, *, home=None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Notebook 02's tables, from cached runs: "cells", "members" (`compute_lemmas`), "probes" (`compute_prop1`)
    and "prop1" (`prop1_table` at `prop1.ks`)."""
    cells, members = compute_lemmas(preset, home=home, progress=progress)
    probes = compute_prop1(preset, home=home, progress=progress)
    p = preset.prop1
    deltas = pd.DataFrame([{"delta_change": p.delta_change, "delta_condition": p.delta_condition,
                            "delta_link": p.delta_link}])
    return {"cells": cells, "members": members, "probes": probes, "prop1": prop1_table(probes, p.ks),
            "deltas": deltas}
