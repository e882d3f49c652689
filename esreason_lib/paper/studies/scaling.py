"""Notebook 06: ES population scaling across model sizes (the paper's Table 6) and the fitness-shaping and sampling
ablations at a matched step size.

The paper finds that larger models need a smaller ES population: the held-out accuracy gap between a large and a
small population N shrinks as the model grows. Here every size in `preset.scaling.models` (smallest first) is
trained with ES for `scaling.iterations` iterations at every N in `scaling.populations` and every training seed
in `preset.seeds` (everything else from `preset.es`); each trained model is scored by greedy accuracy on the same
held-out problems (`scaling.eval`). The check: the gap N_max - N_min is smaller on the largest model than on the
smallest (their difference < 0, hierarchical CI over seeds, then problems). At equal iterations a larger N costs
proportionally more generations; the tables report them.

The paper also finds that z-score fitness beats the alternatives. Here the base model is trained with z-score,
centered-rank and raw ("none") fitness without antithetic pairs (with mirrored pairs and a matched step, z-score and
raw fitness give bit-identical updates, so the old comparison tested one algorithm against itself), at each alpha
of `scaling.shaping_alphas` (grids scaled by each shaping's coefficient norm), for `scaling.ablation_iterations`
iterations at N = `preset.es.population_size`, every seed. Each shaping's alpha is chosen on the tuning split of
the held-out pool (`Preset.splits`); the best of each is compared on the test split (best against best). Beside
it, not claims: antithetic z-score and EGGROLL's low-rank noise at the preset's alpha against plain z-score.
Evaluation rows carry their pool index, so the verdicts read test rows only.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from esreason_lib.es.config import ESConfig
from esreason_lib.methods import trainer
from esreason_lib.models.load import load_model
from esreason_lib.models.zoo import ZOO, num_parameters
from esreason_lib.paper.findings import Check, Finding, effect_check, make_finding
from esreason_lib.paper.studies.common import evaluate_ref, model_ref
from esreason_lib.paper.studies.grids import edge_note
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.paper.studies.registry import make_test
from esreason_lib.store.runs import Run
from esreason_lib.training.inputs import resolve_device

EXTRAS: dict[str, dict] = {"antithetic": {"normalization": "zscore", "antithetic": True},
                           "lowrank": {"normalization": "zscore", "noise": "lowrank", "rank": 1, "backend": "auto"}}
"""Reported beside the shaping ablation (not claims): label -> changes on plain z-score at the preset's alpha (low-rank
noise has its own backend, `es.backends.lowrank.LowRankBackend`, whatever the preset's)."""
PLAIN = {"antithetic": False, "matched_step": False}
"""Every ablation run: no mirrored pairs, no step matching (alpha is tuned per shaping instead)."""


def shaping_label(normalization: str, alpha: float) -> str:
    """The ablation label of one shaping x alpha run, e.g. "zscore@0.0024"."""
    return f"{normalization}@{alpha:g}"
CURVE_METRICS = ("reward/mean", "reward/center", "es/generations", "es/update_norm")
"""Training metrics kept per step in the `*_curves` tables."""


def check_task_kwargs(preset: Preset) -> None:
    """Raise if a zoo model of the study was pretrained on Countdown settings other than the preset's task.

    Every scaling cell trains and evaluates on `get_task(preset.task, **preset.task_kwargs)`; a zoo model that
    learnt other numbers (`ZooSpec.num_count/low/high`) would be compared on a task it never saw.
    """
    if preset.task != "countdown":
        return
    from esreason_lib.tasks import get_task

    task = get_task(preset.task, **dict(preset.task_kwargs))
    want = {"num_count": task.num_count, "low": task.low, "high": task.high}
    for name in dict.fromkeys((*preset.scaling.models, preset.base_model)):
        if name in ZOO and ZOO[name].task_kwargs() != want:
            raise ValueError(f"zoo model {name!r} was pretrained on countdown {ZOO[name].task_kwargs()}, but the "
                             f"preset's task is countdown {want}; all scaling models must share the task")


def tail_mean(values, frac: float = 0.2) -> float:
    """Mean of the last ceil(frac * len) values (at least one); NaN for an empty sequence."""
    v = np.asarray(values, dtype=np.float64)  # [T]
    if v.size == 0:
        return math.nan
    return float(v[-max(1, math.ceil(frac * v.size)):].mean())


def smoothing_window(iterations: int) -> int:
    """Rolling-mean window for reward curves: about a fifth of the run, at least 1."""
    return max(1, int(iterations) // 5)


# ------------------------------------------------------------------------------------------------ compute
def _evaluate(preset: Preset, refs: dict, names: tuple[str, ...], *, home, progress):
    """(summary, problems, curves) of the models `refs` ({key tuple: Run or zoo name}) on `preset.scaling.eval`:
    summary one row per key (heldout = greedy accuracy, pass@1; for runs iterations, generations, center_tail /
    pop_tail = mean reward/center / reward/mean over the last 20% of iterations, update_norm = mean
    es/update_norm); problems one row per (key, problem) with greedy_correct (0/1); curves one row per (run
    key, step) with `CURVE_METRICS`."""
    spec, device = preset.scaling.eval, resolve_device(preset.device)
    rows, probs, curves = [], [], []
    for key, ref in refs.items():
        keys = dict(zip(names, key))
        res = evaluate_ref(model_ref(ref), preset.task, preset.test_task_kwargs(), spec, device=device, home=home,
                           progress=progress)
        greedy = res.table["greedy_correct"].astype(float).to_numpy()  # [problems]
        row = {**keys, "heldout": float(greedy.mean()), "pass@1": float(res.curve.set_index("k")["pass_at_k"].loc[1])}
        if isinstance(ref, Run):
            m = ref.metrics()
            row.update(iterations=int(ref.config["iterations"]), generations=int(m["es/generations"].iloc[-1]),
                       center_tail=tail_mean(m["reward/center"]), pop_tail=tail_mean(m["reward/mean"]),
                       update_norm=float(m["es/update_norm"].mean()))
            curves.append(m[["step", *CURVE_METRICS]].assign(**keys))
        rows.append(row)
        probs.append(pd.DataFrame({**keys, "problem_id": res.table["problem_id"], "index": np.arange(len(greedy)),
                                   "greedy_correct": greedy}))
    curves = pd.concat(curves, ignore_index=True)[[*names, "step", *CURVE_METRICS]] if curves else None
    return pd.DataFrame(rows), pd.concat(probs, ignore_index=True), curves


def training_configs(preset: Preset) -> dict[tuple, ESConfig]:
    """{("cell", model, N, seed) or ("ablation", label, seed): the ES config `compute` trains} for every seed."""
    spec = preset.scaling

    def config(seed: int, **changes) -> ESConfig:
        return preset.config("es", seed=seed, prompts_per_step=spec.prompts_per_step, **changes)

    cells = {("cell", m, n, s): config(s, model=m, population_size=n, iterations=spec.iterations)
             for m in spec.models for n in spec.populations for s in preset.seeds}
    labels = {shaping_label(n, a): {"normalization": n, "alpha": a}
              for n, alphas in spec.shaping_alphas for a in alphas}
    labels.update({k: {"alpha": preset.es.alpha, **v} for k, v in EXTRAS.items()})
    variants = {("ablation", label, s): config(s, model=preset.base_model, population_size=preset.es.population_size,
                                                iterations=spec.ablation_iterations, **{**PLAIN, **changes})
                for label, changes in labels.items() for s in preset.seeds}
    return {**cells, **variants}


def compute(preset: Preset, *, home=None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Train (or load) every scaling cell and ablation run for every seed, evaluate them and the base sizes.

    Returns tidy tables: `bases` (model, params, heldout, pass@1; the untrained sizes, smallest first),
    `scaling` / `scaling_problems` / `scaling_curves` (keys model, N, seed; `scaling` also has params) and
    `ablation` / `ablation_problems` / `ablation_curves` (keys variant, seed), as `_evaluate` describes.
    """
    check_task_kwargs(preset)
    spec = preset.scaling
    runs = {key: trainer("es")(config, home=home, progress=progress)
            for key, config in training_configs(preset).items()}
    cells = {key[1:]: run for key, run in runs.items() if key[0] == "cell"}
    variants = {key[1:]: run for key, run in runs.items() if key[0] == "ablation"}
    params = {}
    for name in spec.models:
        model, _ = load_model(name, device="cpu", home=home, progress=progress)
        params[name] = num_parameters(model)
        del model
    kw = dict(home=home, progress=progress)
    bases, _, _ = _evaluate(preset, {(m,): m for m in spec.models}, ("model",), **kw)
    scaling, scaling_problems, scaling_curves = _evaluate(preset, cells, ("model", "N", "seed"), **kw)
    ablation, ablation_problems, ablation_curves = _evaluate(preset, variants, ("variant", "seed"), **kw)
    for table in (bases, scaling):
        table.insert(1, "params", table["model"].map(params))
    bases = bases.sort_values("params", kind="stable").reset_index(drop=True)
    split = {name: preset.splits.of(np.arange(min(spec.eval.n_problems or preset.splits.pool,
                                                   preset.splits.pool))) for name in ("split",)}["split"]
    for table in (scaling_problems, ablation_problems):
        table["split"] = [split[i] if i < len(split) else "test" for i in table["index"]]
    settings = pd.DataFrame([{"shapings": ",".join(n for n, _ in spec.shaping_alphas), "delta_gap": spec.delta_gap,
                              "delta_shaping": spec.delta_shaping, "es_alpha": preset.es.alpha}])
    return {"bases": bases, "scaling": scaling, "scaling_problems": scaling_problems,
            "scaling_curves": scaling_curves, "ablation": ablation, "ablation_problems": ablation_problems,
            "ablation_curves": ablation_curves, "settings": settings}


# ------------------------------------------------------------------------------------------------ views
def table6(tables: dict[str, pd.DataFrame], value: str = "heldout") -> pd.DataFrame:
    """The paper's Table 6 shape: rows "model (params)" smallest first, columns "N=n" (plus "base" for
    `heldout`), cells the seed-mean of `value`."""
    bases = tables["bases"].assign(size=tables["bases"]["model"] + " ("
                                   + (tables["bases"]["params"] / 1e6).map("{:.2f}M".format) + ")")
    cells = tables["scaling"].assign(size=tables["scaling"]["model"].map(bases.set_index("model")["size"]))
    out = cells.pivot_table(index="size", columns="N", values=value, aggfunc="mean")  # seed-mean per cell
    out.columns = [f"N={n}" for n in out.columns]
    if value == "heldout":
        out.insert(0, "base", bases.set_index("size")["heldout"])
    return out.loc[list(bases["size"])]


def seed_mean_curves(curves: pd.DataFrame, label: str, prefix: str = "") -> dict[str, pd.DataFrame]:
    """{prefix + value of `label`: the per-step mean over seeds of `CURVE_METRICS`}, in first-seen order."""
    return {f"{prefix}{v}": g.groupby("step", as_index=False)[list(CURVE_METRICS)].mean()
            for v, g in curves.groupby(label, sort=False)}


def _by_seed(problems: pd.DataFrame, **where) -> np.ndarray:
    """[seeds, problems] greedy_correct of the rows matching `where` (seeds and problem ids sorted)."""
    if "split" in problems and "split" not in where:
        where = {**where, "split": "test"}
    rows = problems.loc[np.logical_and.reduce([problems[k] == v for k, v in where.items()])]
    if rows.empty:
        raise ValueError(f"no evaluated rows with {where}")
    return rows.pivot(index="seed", columns="problem_id", values="greedy_correct").sort_index().to_numpy(float)


def population_gaps(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per size (smallest first): the held-out greedy gap N_max - N_min with its hierarchical 95% CI and MDE."""
    ns = sorted(tables["scaling"]["N"].unique())
    probs = tables["scaling_problems"]
    rows = []
    for model in tables["bases"]["model"]:
        c = effect_check(model, _by_seed(probs, model=model, N=ns[-1]), _by_seed(probs, model=model, N=ns[0]))
        rows.append({"model": model, "gap": c.effect, "ci_low": c.ci_low, "ci_high": c.ci_high, "mde": c.mde})
    return pd.DataFrame(rows)


def best_alphas(tables: dict[str, pd.DataFrame]) -> dict[str, str]:
    """{shaping: label of its best run}: the highest seed-mean greedy accuracy on the tuning split (on the test
    rows when the evaluation holds no tuning row; `finding` says so); ties go to the first label."""
    probs = tables["ablation_problems"]
    tuning = probs[probs["split"] == "tuning"] if "split" in probs else probs.iloc[:0]
    scored = tuning if len(tuning) else probs
    acc = scored.groupby("variant", sort=False)["greedy_correct"].mean()
    best = {}
    for label, value in acc.items():
        shaping = label.split("@")[0]
        if "@" in label and (shaping not in best or value > acc[best[shaping]]):
            best[shaping] = label
    return best


NO_OWN_GAP = ("the smaller model's own gap N_max - N_min is not detectably above 0: there is no population gain "
              "for the larger model to need less of")
"""Why the population check is `undecidable at this design` when the smaller model gains nothing from N."""


def population_check(small_gap: np.ndarray, large_gap: np.ndarray, name: str) -> tuple[Check, Check]:
    """(the paper's check, the smaller model's own gap): gap on the larger model minus on the smaller below 0, its
    delta half the smaller model's own gap (`registry.DELTA_RULE` clause C: no absolute number borrowed from the
    paper); `undecidable at this design` (`NO_OWN_GAP`) when that gap's CI is not above 0. Each gap is [R, P]
    (per seed and problem, N_max minus N_min)."""
    own = effect_check("gap N_max - N_min on the smaller model", small_gap)
    if own.ci_low > 0:
        return effect_check(name, large_gap - small_gap, direction="less", delta=own.effect / 2), own
    return effect_check(name, large_gap - small_gap, direction="less", fixed=NO_OWN_GAP), own


def finding(tables: dict[str, pd.DataFrame]) -> Finding:
    """Held-out greedy accuracy on test rows, paired by problem, seeds independent. The paper's test: the gap
    N_max - N_min is smaller on the largest size than on the smallest (`population_check`: delta half the smaller
    model's own gap, undecidable without one); the control (the normalization ablation): z-score's best alpha above
    rank's (secondary: above raw fitness's best; delta `delta_shaping`), each alpha chosen on the tuning split; the
    notes name a chosen alpha at the edge of its shaping's grid (`grids.edge_note`)."""
    settings = tables["settings"].iloc[0] if "settings" in tables else {"delta_gap": 0.07, "delta_shaping": 0.015}
    small, large = tables["bases"]["model"].iloc[[0, -1]]
    ns = sorted(tables["scaling"]["N"].unique())
    probs, abl = tables["scaling_problems"], tables["ablation_problems"]
    gap = {m: _by_seed(probs, model=m, N=ns[-1]) - _by_seed(probs, model=m, N=ns[0]) for m in (small, large)}
    best = best_alphas(tables)
    acc = {v: _by_seed(abl, variant=v) for v in dict.fromkeys(abl["variant"])}
    population, own = population_check(gap[small], gap[large],
                                       f"gap N={ns[-1]} - N={ns[0]} on {large} minus on {small}")
    shaping = {v: effect_check(f"z-score ({best['zscore']}) above {best[v]}, best alphas", acc[best["zscore"]],
                               acc[best[v]], delta=float(settings["delta_shaping"])) for v in best if v != "zscore"}
    rival = "rank" if "rank" in shaping else next(iter(shaping))
    tests = (make_test("06_population_scaling", "paper", population, [own]),
             make_test("06_population_scaling", "control", shaping[rival],
                       [c for v, c in shaping.items() if v != rival]))
    plain = [v for v in acc if v.startswith("zscore@")]
    at = shaping_label("zscore", float(settings["es_alpha"])) if "es_alpha" in settings else ""
    ref = at if at in acc else plain[0]
    extras = [effect_check(f"{v} - plain z-score ({ref})", acc[v], acc[ref]) for v in EXTRAS if v in acc]
    gaps = ", ".join(f"{r.model} {r.gap:+.3f}" for r in population_gaps(tables).itertuples())
    bases = " / ".join(f"{r.model} {r.heldout:.2f}" for r in tables["bases"].itertuples())
    mean = tables["ablation"].groupby("variant", sort=False)[["heldout", "update_norm"]].mean()
    gens = tables["scaling"].groupby("N")["generations"].mean()
    tuned = "tuning split" if "split" in abl and (abl["split"] == "tuning").any() else "TEST rows (no tuning split)"
    sentence = (f"held-out greedy gap N={ns[-1]} - N={ns[0]} after {tables['scaling']['iterations'].iloc[0]} ES "
                f"iterations: {gaps} (base greedy {bases}); after {tables['ablation']['iterations'].iloc[0]} "
                f"iterations without antithetic pairs, alpha chosen per shaping on the {tuned}: best "
                + ", ".join(best.values()) + "; all runs: " + " / ".join(f"{v} {a:.3f}" for v, a in
                                                                        mean["heldout"].items())
                + "; not claims of the paper, not in the status: "
                + "; ".join(f"{c.name} {c.effect:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}] (MDE {c.mde:.3f})"
                            for c in extras))
    sanity = ("update norms (mean es/update_norm): "
              + ", ".join(f"{v} {u:.3g}" for v, u in mean["update_norm"].items()),
              f"equal iterations: N={ns[-1]} used {gens[ns[-1]] / gens[ns[0]]:.0f}x the generations of N={ns[0]}")
    grids: dict[str, list[float]] = {}
    for label in acc:
        if "@" in label:
            grids.setdefault(label.split("@")[0], []).append(float(label.split("@")[1]))
    edges = {v: edge_note("alpha", float(label.split("@")[1]), grids[v]) for v, label in best.items()}
    notes = [f"{v} tuned on the {tuned} is {best[v]}{edge}" for v, edge in edges.items() if edge]
    return make_finding(sentence, (), sanity, tests=tests, notes=notes)
