"""Notebook 01: ES vs GRPO from the same base on the same task, across a small grid of each one's step size.

The paper's claim (main results): ES raises Pass@1 over the base and keeps a higher Pass@K at large K than GRPO,
whose token entropy collapses while ES's does not.

The design (a fair comparison):
- Every arm (method, step size) of `preset.comparison` (ES alpha, GRPO lr) trains for every seed of `preset.seeds`
  from `preset.base_model` (cached runs: `methods.trainer`).
- The base and every trained model are evaluated once under `preset.eval` on its `n_problems` test problems plus
  the next `comparison.selection_problems` problems of the same draw (`split` = "test" / "selection").
- Each method's best-Pass@1 and best-Pass@K arm is chosen by its seed mean on the *selection* problems; every
  verdict is computed on the disjoint *test* problems. With `selection_problems = 0` (paper presets) the choice
  is made on the test problems and favours the chosen arms.
- Paths: every run keeps a snapshot every `snapshot_every` iterations (`training.run_entry.save_snapshot`); each
  snapshot is evaluated like the final models, at `comparison.temperature` (T = 0.6, the paper's), which is the
  evidence; the final models are also evaluated at `comparison.side_temperatures` (T = 1) and greedily, shown beside.
- The control (`controls.noise_control`): for each ES run, an "ES" with random directions and the run's own
  per-iteration update norms; it drifts as far and uses no reward.
- Evidence (`finding`; arms and matching rule there and in `ComparisonSpec`, deltas in the preset): ES's Pass@1
  above the base; ES's Pass@K above GRPO's path at ES's Pass@1 (the frontier); GRPO's eval token entropy below
  the base's and ES's above GRPO's at matched Pass@1; ES's Pass@K and entropy above its noise control's.
- Reported beside, never in the status: the control against the base, GRPO's best-Pass@1 arm against ES at K=1
  (the paper allows GRPO to win there), Maj@K, greedy accuracy and T = 1.

Deviations: the paper trains one setting per method. Training entropy (`policy/entropy`) is shown but is no check:
GRPO logs it on its T = 1 samples, ES on its centre's greedy answers, so only its trend compares. The base has no
training seed and appears with `seed = BASE_SEED`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from esreason_lib.evaluation import EvalResult, EvalSpec
from esreason_lib.methods import trainer
from esreason_lib.paper.analysis import non_dominated
from esreason_lib.paper.findings import Finding, effect_check, make_finding
from esreason_lib.paper.studies.common import evaluate_ref, model_ref
from esreason_lib.paper.studies.comparison_tables import (  # noqa: F401 (cost_table ... spread: notebook 01's)
    cost_table,
    entropy_change,
    entropy_traces,
    format_spread,
    pass_curves,
    seed_problem_values,
    seed_table,
    spread,
    with_pass,
)
from esreason_lib.paper.studies.controls import final_drift, noise_control
from esreason_lib.paper.studies.frontier import choose_matched_arm, matched
from esreason_lib.paper.studies.grids import edge_note, grid_edge
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.paper.studies.registry import make_test
from esreason_lib.store.runs import Run
from esreason_lib.tasks import get_task
from esreason_lib.training.inputs import resolve_device
from esreason_lib.training.run_entry import snapshot_refs

BASE_SEED = -1
"""The `seed` value of the base model's rows (it has no training seed)."""
STEP_FIELDS = {"es": "alpha", "grpo": "lr"}
"""The config field each method's grid varies."""


# ------------------------------------------------------------------------------------ arms, runs, evaluations
def arm_label(method: str, step_size: float) -> str:
    """"base", or e.g. "es alpha=0.0024" / "grpo lr=0.0001" (the method first: plots color by it)."""
    return "base" if method == "base" else f"{method} {STEP_FIELDS[method]}={step_size:g}"


def grid(preset: Preset) -> list[tuple[str, float]]:
    """The (method, step size) arms of `preset.comparison`: GRPO's learning rates, then ES's alphas."""
    return [("grpo", lr) for lr in preset.comparison.grpo_lrs] + [("es", a) for a in preset.comparison.es_alphas]


def preset_arms(preset: Preset) -> dict[str, str]:
    """{"es": ..., "grpo": ...}: the arm of the grid (`arm_label`) that a study's run of each method at the preset's
    own step size is (notebooks 03-05 train `preset.config(method)`: notebook 01's run of that setting), so that it
    takes that arm's colour (`plots.register_arms(..., aliases=preset_arms(preset))`)."""
    return {m: arm_label(m, getattr(getattr(preset, m), field)) for m, field in STEP_FIELDS.items()}


def training_configs(preset: Preset) -> dict[tuple[str, float, int], object]:
    """{(method, step size, seed): the config `compute` trains} for every arm of `grid(preset)` and every seed."""
    return {(m, s, seed): preset.config(m, seed=seed, **{STEP_FIELDS[m]: s})
            for m, s in grid(preset) for seed in preset.seeds}


def evaluation_spec(preset: Preset, temperature: float | None = None) -> EvalSpec:
    """`preset.eval` at `temperature` (default `comparison.temperature`, the evidence's T = 0.6), widened by the
    selection problems (the next ones of the same draw), so one cached evaluation per model scores both splits."""
    extra = preset.comparison.selection_problems
    spec = replace(preset.eval, temperature=preset.comparison.temperature if temperature is None else temperature)
    return spec if extra == 0 else replace(spec, n_problems=spec.n_problems + extra)


def evaluate_models(preset: Preset, refs: Mapping[tuple[str, int], str], *, home=None, progress: bool = True,
                    temperature: float | None = None, maj_k: int | None = None) -> pd.DataFrame:
    """Per-problem rows (`evaluation.PROBLEM_COLUMNS`) of every model in `refs` ({(arm, seed): model reference})
    under `evaluation_spec(preset, temperature)`, with arm, seed and split: "test" for `preset.eval`'s problems,
    else "selection". With `maj_k`, a column `maj@K`: the model's Maj@K on the test split (`EvalResult.maj_curve`,
    the same value on each of its rows; shown, never checked)."""
    spec, device = evaluation_spec(preset, temperature), resolve_device(preset.device)
    task = get_task(preset.task, **preset.test_task_kwargs())
    test_ids = {str(e["id"]) for e in task.examples("test", n=preset.eval.n_problems, seed=preset.eval.seed)}
    tables = []
    for (arm, seed), ref in refs.items():
        result = evaluate_ref(ref, preset.task, preset.test_task_kwargs(), spec, device=device, home=home,
                              progress=progress)
        t = result.table
        t = t.assign(arm=arm, seed=seed, split=np.where(t["problem_id"].isin(test_ids), "test", "selection"))
        if maj_k is not None and result.samples is not None:
            on_test = t["split"] == "test"
            test_only = EvalResult(table=result.table[on_test], curve=result.curve,
                                   samples=result.samples[result.samples["problem_id"].isin(test_ids)])
            t = t.assign(**{
                "maj@K": float(test_only.maj_curve([maj_k], n_boot=20, seed=spec.seed)["maj_at_k"].iloc[0])})
        tables.append(t)
    return pd.concat(tables, ignore_index=True)


def frontier(problems: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per arm: method, step_size, n_seeds, k, pass@1 / pass@K (seed means on the test split), non_dominated (on
    the test Pass@1-Pass@K plane among its method's arms), sel_pass@1 / sel_pass@K (on the split the choice is
    made on, `chosen_on`: "selection", or "test" when there is no selection split) and best_pass@1 /
    best_pass@K (the arm its method chooses by that criterion)."""
    p = with_pass(problems, (1, k)).rename(columns={f"pass@{k}": "pass@K"})
    chosen_on = "selection" if (p["split"] == "selection").any() else "test"
    keys = ["arm", "method", "step_size"]
    test = p[p["split"] == "test"].groupby(keys, sort=False, dropna=False).agg(
        n_seeds=("seed", "nunique"), **{"pass@1": ("pass@1", "mean"), "pass@K": ("pass@K", "mean")}).reset_index()
    sel = p[p["split"] == chosen_on].groupby("arm")[["pass@1", "pass@K"]].mean().add_prefix("sel_")
    out = test.join(sel, on="arm").assign(k=int(k), chosen_on=chosen_on, non_dominated=False)
    for _, idx in out.groupby("method", sort=False).groups.items():
        out.loc[idx, "non_dominated"] = non_dominated(out.loc[idx, "pass@1"], out.loc[idx, "pass@K"])
    for crit in ("pass@1", "pass@K"):
        best = out[out["method"] != "base"].groupby("method")[f"sel_{crit}"].idxmax()
        out[f"best_{crit}"] = out.index.isin(best.to_numpy())
    return out


def selected_arms(front: pd.DataFrame, criterion: str) -> dict[str, str]:
    """{method: the arm `frontier` chose for `criterion` ("pass@1" or "pass@K")} for every trained method."""
    if criterion not in ("pass@1", "pass@K"):
        raise ValueError(f"criterion must be 'pass@1' or 'pass@K', got {criterion!r}")
    chosen = front[front[f"best_{criterion}"]]
    return dict(zip(chosen["method"], chosen["arm"]))


# ------------------------------------------------------------------------------------ the study face
def noise_label(arm: str) -> str:
    """The label of an ES arm's noise-injection control: "noise es alpha=0.0024"."""
    return f"noise {arm}"


def path_table(preset: Preset, runs: Mapping[tuple[str, int], Run], final: pd.DataFrame, *, home=None,
               progress: bool = True, snapshots: Callable[[str], bool] = lambda arm: True) -> pd.DataFrame:
    """Per-problem rows of every run's path at the evidence temperature: its snapshots (`snapshot_refs`,
    evaluated here, for the arms where `snapshots(arm)` holds), its final model (the rows of `final` for the run's
    arm and seed) and the base (step 0), with a column `step`."""
    frames = [final[final["arm"] == "base"].assign(step=0)]
    for (arm, seed), run in runs.items():
        refs = snapshot_refs(run)
        last = max(refs)
        frames.append(final[(final["arm"] == arm) & (final["seed"] == seed)].assign(step=last))
        frames += [evaluate_models(preset, {(arm, seed): ref}, home=home, progress=progress).assign(step=step)
                   for step, ref in refs.items() if step != last and snapshots(arm)]
    return pd.concat(frames, ignore_index=True)


def compute(preset: Preset, *, home=None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Train every arm for every seed, build each ES run's noise-injection control (`controls.noise_control`),
    and evaluate every final model, snapshot and the base (all cached). Tidy tables: `problems` (final models and
    base per problem, both splits, at `comparison.temperature`, with `maj@K`), `paths` (the same plus every
    snapshot, with `step`), `side` (per arm, seed and temperature: `seed_table` of the final models at each
    `comparison.side_temperatures`), `cost` and `traces` (per run), `drift` (per run: final relative drift),
    `frontier` (per arm), `seeds` (per arm and seed), `summary` (per arm: seed mean, min, max), `curves` and
    `seed_curves` (Pass@K on the test split)."""
    runs = {(arm_label(m, s), seed): trainer(m)(config, home=home, progress=progress)
            for (m, s, seed), config in training_configs(preset).items()}
    controls = {(noise_label(arm), seed): noise_control(run, home=home, progress=progress)
                for (arm, seed), run in runs.items() if arm.startswith("es ")}
    arms = pd.DataFrame([{"arm": arm_label(m, s), "method": m, "step_size": s}
                         for m, s in [("base", float("nan"))] + grid(preset)]
                        + [{"arm": noise_label(arm_label("es", a)), "method": "noise", "step_size": a}
                           for a in preset.comparison.es_alphas])
    every = {**runs, **controls}
    k = max(preset.eval.ks)
    refs = {("base", BASE_SEED): preset.base_model, **{key: model_ref(run) for key, run in every.items()}}
    problems = evaluate_models(preset, refs, home=home, progress=progress, maj_k=k).merge(arms, on="arm", how="left")
    methods = dict(zip(arms["arm"], arms["method"]))
    paths = path_table(preset, every, problems, home=home, progress=progress,
                       snapshots=lambda arm: methods[arm] in preset.comparison.path_methods)
    side = pd.concat([seed_table(evaluate_models(preset, refs, home=home, progress=progress, temperature=t), k)
                      .assign(temperature=t) for t in preset.comparison.side_temperatures], ignore_index=True)
    seeds = seed_table(problems, k)
    drift = pd.DataFrame([{"arm": arm, "seed": seed, "drift_rel": final_drift(run, key)}
                          for (arm, seed), run in every.items()
                          for key in ["control/drift_rel" if arm.startswith("noise") else "es/drift_rel"]
                          if not arm.startswith("grpo")], columns=["arm", "seed", "drift_rel"])
    curves, seed_curves = pass_curves(problems, preset.eval.ks, n_boot=preset.eval.n_boot, seed=preset.eval.seed)
    return {"problems": problems, "paths": paths, "side": side, "cost": cost_table(runs).merge(arms, on="arm"),
            "traces": entropy_traces(runs), "drift": drift, "frontier": frontier(problems, k), "seeds": seeds,
            "summary": spread(seeds, seeds.columns[2:]), "curves": curves, "seed_curves": seed_curves,
            "deltas": deltas_table(preset)}


def deltas_table(preset: Preset) -> pd.DataFrame:
    """One row: the smallest effects of interest the finding uses (`ComparisonSpec.delta_*`, fixed in git before
    the runs; their reasons are in the spec's docstrings)."""
    c = preset.comparison
    return pd.DataFrame([{"pass1": c.delta_pass1, "passk": c.delta_passk, "entropy": c.delta_entropy,
                          "temperature": c.temperature}])


def primary_k(problems: pd.DataFrame, ks) -> int:
    """The K of the evidence: the largest of `ks` with K <= n / 2 (n = samples per problem), so that Pass@K is not
    the indicator "ever solved" (K = n); the largest of `ks` when none is."""
    n = int(problems["n"].max())
    fits = [int(k) for k in ks if int(k) <= n // 2]
    return max(fits) if fits else int(max(ks))


def finding(tables: Mapping[str, pd.DataFrame]) -> Finding:
    """Notebook 01's finding from `compute`'s `problems`, `paths`, `frontier`, `deltas` (and `drift`, `curves`).

    Arms: ES = its best-Pass@1 arm on the selection problems (final model); its control = that arm's
    noise-injection runs (paired by seed); GRPO (paper) = GRPO's best-Pass@1 arm on the selection problems;
    GRPO (control) = `frontier.choose_matched_arm` on the selection problems at ES's Pass@1 there. K = `primary_k`.
    The paper's test (`registry`): final ES Pass@K above the final GRPO tuned for Pass@1 and, the claim's other
    half, ES Pass@1 above the base (co-primary: `Test.also`); secondary that GRPO's entropy below the base's. The
    notes name a tuned arm at the edge of its grid (`grids.edge_note`) and say when ES's Pass@1 did not move. The
    control: ES Pass@K above GRPO's path at ES's Pass@1 (`frontier.matched`); secondaries the entropy there and ES
    against its noise control. Beside, in no test: the noise control against the base, ES Pass@1 against it, GRPO
    against ES at K=1, the matching gap."""
    front, d = tables["frontier"], tables["deltas"].iloc[0]
    chosen_on = front["chosen_on"].iloc[0]
    ks = sorted(tables["curves"]["k"].unique()) if "curves" in tables else [int(front["k"].iloc[0])]
    k = primary_k(tables["problems"], ks)
    p, paths = with_pass(tables["problems"], (1, k)), with_pass(tables["paths"], (1, k))
    b1, kk = selected_arms(front, "pass@1"), f"pass@{k}"
    es, noise, tuned = b1["es"], noise_label(b1["es"]), b1["grpo"]
    sel = paths[(paths["split"] == chosen_on) & (paths["arm"] == es) & (paths["step"] == paths.loc[
        paths["arm"] == es, "step"].max())]
    grpo = choose_matched_arm(paths, list(front.loc[front["method"] == "grpo", "arm"]), float(sel["pass@1"].mean()),
                              kk, split=chosen_on)
    es1, esk, esent = (seed_problem_values(p, c, es)[0] for c in ("pass@1", kk, "mean_entropy"))
    g, info = matched(paths, grpo, float(es1.mean()), ["pass@1", kk, "mean_entropy"], split="test")

    def check(name, column, a, b, direction="greater", delta=None, paired=False):
        return effect_check(name, *seed_problem_values(p, column, a, b), direction=direction, delta=delta,
                            paired_seeds=paired)

    at = f"GRPO ({grpo}) at ES's Pass@1"
    edges = {arm: edge_note("step size", *arm_grid(front, arm)) for arm in (es, tuned)}
    moved = check(f"ES ({es}) Pass@1 above base", "pass@1", es, "base", delta=d["pass1"])
    paper = make_test("01_passk_es_vs_grpo", "paper",
                      check(f"ES ({es}) Pass@{k} above GRPO tuned for Pass@1 ({tuned}"
                            f"{', top of its grid' if grid_edge(*arm_grid(front, tuned)) == 'top' else ''}), final",
                            kk, es, tuned, delta=d["passk"]),
                      [check(f"GRPO ({tuned}) eval token entropy below base", "mean_entropy", tuned, "base", "less",
                             delta=d["entropy"])], also=[moved])
    control = make_test("01_passk_es_vs_grpo", "control",
                        effect_check(f"ES ({es}) Pass@{k} above {at}", esk, g[kk], delta=d["passk"]),
                        [effect_check(f"ES ({es}) eval token entropy above {at}", esent, g["mean_entropy"],
                                      delta=d["entropy"]),
                         check(f"ES ({es}) Pass@{k} above its noise-injection control", kk, es, noise,
                               delta=d["passk"], paired=True),
                         check(f"ES ({es}) eval token entropy above its noise-injection control", "mean_entropy", es,
                               noise, delta=d["entropy"], paired=True)])
    beside = [check(f"noise control Pass@{k} - base", kk, noise, "base"),
              check("noise control eval token entropy - base", "mean_entropy", noise, "base"),
              check(f"ES ({es}) Pass@1 above its noise control", "pass@1", es, noise, delta=d["pass1"], paired=True),
              check(f"GRPO ({tuned}) above ES ({es}) at K=1", "pass@1", tuned, es)]
    n = p.drop_duplicates("problem_id")["split"].value_counts()
    where = (f"{n.get('selection', 0)} selection problems disjoint from the {n['test']} test problems"
             if chosen_on == "selection" else f"the {n['test']} test problems themselves, which favours them")
    match = (f"GRPO matched at Pass@1 {es1.mean():.3f} between its steps "
             + ", ".join(f"{r.step_lo}-{r.step_hi} (w {r.w:.2f}, gap {r.gap:+.3f})" for r in info.itertuples()))
    main = front[front["method"] != "noise"]
    points = "; ".join(f"{r.arm} {r['pass@1']:.3f}/{r['pass@K']:.3f}" for _, r in main.iterrows())
    sanity = [f"Pass@{front['k'].iloc[0]} >= Pass@1 for every arm: "
              f"{bool((front['pass@K'] >= front['pass@1'] - 1e-12).all())}",
              f"GRPO at matched Pass@1 {g['pass@1'].mean():.3f} vs ES {es1.mean():.3f}"]
    if "drift" in tables and not tables["drift"].empty:
        dr = tables["drift"].groupby("arm")["drift_rel"].mean()
        if es in dr and noise in dr:
            sanity.append(f"relative drift: ES {dr[es]:.2%}, its noise control {dr[noise]:.2%}")
    notes = [f"{label} tuned for Pass@1 is {arm}{edges[arm]}" for label, arm in (("ES", es), ("GRPO", tuned))
             if edges[arm]]
    if moved.status != "reproduced":
        notes.append(f"ES's Pass@1 did not rise above the base's: {moved.effect:+.4f} [{moved.ci_low:+.4f}, "
                     f"{moved.ci_high:+.4f}] ({moved.status}), so the paper's test cannot hold")
    return make_finding(f"Pass@1/Pass@{front['k'].iloc[0]} (test, T={d.get('temperature', '?')}, "
                        f"seed means): {points}; evidence at K={k} (the largest K <= n/2); ES arm chosen on {where}; "
                        f"{match}; reported beside, in no test: " + "; ".join(c.describe() for c in beside), (),
                        sanity, tests=(paper, control), notes=notes)


def arm_grid(front: pd.DataFrame, arm: str) -> tuple[float, list[float]]:
    """(the step size of `arm`, every step size of its method's grid) from `frontier`'s table."""
    row = front.loc[front["arm"] == arm].iloc[0]
    return float(row["step_size"]), [float(v) for v in front.loc[front["method"] == row["method"], "step_size"]]
