"""Notebook 06: ES population scaling across model sizes (the paper's Table 6) and the fitness-shaping ablations.

The paper finds that larger models need a smaller ES population: the accuracy gap between a large and a small
population N shrinks as the model grows. Here every zoo size in `preset.scaling.models` is trained with ES for
`preset.scaling.iterations` iterations at every N in `preset.scaling.populations` (everything else from
`preset.es`), and each trained model is scored by greedy accuracy on held-out problems (`preset.scaling.eval`).
At equal iterations a larger N costs proportionally more generations; the tables report them.

On the base model, ES also compares fitness shaping ("zscore" vs "rank" vs "none", `ESConfig.normalization`)
and antithetic vs plain sampling, for `preset.scaling.ablation_iterations` iterations. Every training run and
evaluation is cached in the run store (`common.train`, `common.evaluate_ref`); the ablation's
z-score/antithetic run is the scaling cell of the base model at `preset.es.population_size` when that cell
exists with the same iterations, so it is trained once.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..models import load_model
from ..presets import Preset
from ..runs import Run
from ..training import resolve_device
from ..zoo import ZOO, num_parameters
from .common import evaluate_ref, model_ref, train

ABLATIONS: dict[str, dict] = {"zscore": {"normalization": "zscore"}, "rank": {"normalization": "rank"},
                              "none": {"normalization": "none"},
                              "antithetic": {"normalization": "zscore", "antithetic": True},
                              "plain": {"normalization": "zscore", "antithetic": False}}
"""Ablation label -> ES config changes on top of the preset. The three shapings keep the preset's sampling;
"antithetic"/"plain" are z-score with and without mirrored pairs, so one of them is the "zscore" run itself
(same config, trained once)."""

def check_task_kwargs(preset: Preset) -> None:
    """Raise if a zoo model of the study was pretrained on Countdown settings other than the preset's task.

    Every scaling cell trains and evaluates on `get_task(preset.task, **preset.task_kwargs)`; a zoo model that
    learnt other numbers (`ZooSpec.num_count/low/high`) would be compared on a task it never saw.
    """
    if preset.task != "countdown":
        return
    from ..tasks import get_task

    task = get_task(preset.task, **dict(preset.task_kwargs))
    want = {"num_count": task.num_count, "low": task.low, "high": task.high}
    for name in dict.fromkeys((*preset.scaling.models, preset.base_model)):
        if name in ZOO and ZOO[name].task_kwargs() != want:
            raise ValueError(f"zoo model {name!r} was pretrained on countdown {ZOO[name].task_kwargs()}, but the "
                             f"preset's task is countdown {want}; all scaling models must share the task")


# ------------------------------------------------------------------------------------------------ training
def scaling_runs(preset: Preset, *, home=None, progress: bool = True) -> dict[tuple[str, int], Run]:
    """Train (or load) ES for every (model size, N) of the study; keys (model, N) in preset order."""
    check_task_kwargs(preset)
    runs = {}
    for name in preset.scaling.models:
        for n in preset.scaling.populations:
            runs[name, n] = train(preset, "es", seed=preset.seeds[0], home=home, progress=progress, model=name,
                                  population_size=n, iterations=preset.scaling.iterations,
                                  prompts_per_step=preset.scaling.prompts_per_step)
    return runs


def ablation_runs(preset: Preset, *, home=None, progress: bool = True) -> dict[str, Run]:
    """Train (or load) the `ABLATIONS` on the base model at N = `preset.es.population_size` for
    `preset.scaling.ablation_iterations` iterations at the scaling study's prompts per step; keys are the labels."""
    check_task_kwargs(preset)
    return {label: train(preset, "es", seed=preset.seeds[0], home=home, progress=progress, model=preset.base_model,
                         population_size=preset.es.population_size, iterations=preset.scaling.ablation_iterations,
                         prompts_per_step=preset.scaling.prompts_per_step, **changes)
            for label, changes in ABLATIONS.items()}


# ------------------------------------------------------------------------------------------------ tables
def tail_mean(values, frac: float = 0.2) -> float:
    """Mean of the last ceil(frac * len) values (at least one); NaN for an empty sequence."""
    v = np.asarray(values, dtype=np.float64)  # [T]
    if v.size == 0:
        return math.nan
    return float(v[-max(1, math.ceil(frac * v.size)):].mean())


def smoothing_window(iterations: int) -> int:
    """Rolling-mean window for reward curves: about a fifth of the run, at least 1."""
    return max(1, int(iterations) // 5)


def evaluate_runs(preset: Preset, refs: dict, names: tuple[str, ...], *, home=None,
                  progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out evaluation (`preset.scaling.eval`) of every model reference in `refs` (key -> Run or name).

    Returns `(summary, problems)`: summary one row per key (key columns `names`, heldout = greedy accuracy,
    pass@1, and for runs generations = final `es/generations`, center_tail = mean `reward/center` and
    pop_tail = mean `reward/mean` over the last 20% iterations); problems one row per (key, problem) with
    greedy_correct (0/1) for paired comparisons.
    """
    spec, device = preset.scaling.eval, resolve_device(preset.device)
    rows, probs = [], []
    for key, ref in refs.items():
        key = key if isinstance(key, tuple) else (key,)
        res = evaluate_ref(model_ref(ref), preset.task, preset.test_task_kwargs(), spec, device=device, home=home,
                           progress=progress)
        greedy = res.table["greedy_correct"].astype(float)  # [problems]
        row = {**dict(zip(names, key)), "heldout": float(greedy.mean()),
               "pass@1": float(res.curve.set_index("k")["pass_at_k"].loc[1])}
        if isinstance(ref, Run):
            m = ref.metrics()
            row.update(generations=int(m["es/generations"].iloc[-1]), center_tail=tail_mean(m["reward/center"]),
                       pop_tail=tail_mean(m["reward/mean"]))
        rows.append(row)
        probs.append(pd.DataFrame({**dict(zip(names, key)), "problem_id": res.table["problem_id"],
                                   "greedy_correct": greedy.to_numpy()}))
    return pd.DataFrame(rows), pd.concat(probs, ignore_index=True)


def scaling_report(preset: Preset, runs: dict[tuple[str, int], Run], *, home=None,
                   progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`evaluate_runs` over the scaling cells plus each base model (N = 0), with a `params` column per model."""
    refs = {(name, 0): name for name in preset.scaling.models}
    refs.update(runs)
    summary, problems = evaluate_runs(preset, refs, ("model", "N"), home=home, progress=progress)
    params = {}
    for name in preset.scaling.models:
        model, _ = load_model(name, device="cpu", home=home, progress=progress)
        params[name] = num_parameters(model)
        del model
    summary.insert(1, "params", summary["model"].map(params))
    return summary.sort_values(["params", "N"], kind="stable").reset_index(drop=True), problems


def table6(summary: pd.DataFrame, value: str = "heldout") -> pd.DataFrame:
    """The paper's Table 6 shape: rows "model (params)", columns N ("base" for N = 0), cells `value`."""
    df = summary.assign(size=summary["model"] + " (" + (summary["params"] / 1e6).map("{:.2f}M".format) + ")",
                        col=summary["N"].map(lambda n: "base" if n == 0 else f"N={n}"))
    order = list(dict.fromkeys(df.sort_values("N")["col"]))
    out = df.pivot(index="size", columns="col", values=value)
    return out.loc[list(dict.fromkeys(df["size"])), [c for c in order if c in out.columns]]


def population_gaps(problems: pd.DataFrame, small: int, large: int) -> pd.DataFrame:
    """Per model (in first-seen order): gap = greedy accuracy at N=`large` minus at N=`small` on the same
    held-out problems, with its paired standard error std(d) / sqrt(P) over per-problem differences d."""
    rows = []
    for name, g in problems.groupby("model", sort=False):
        a = g[g["N"] == small].set_index("problem_id")["greedy_correct"]
        b = g[g["N"] == large].set_index("problem_id")["greedy_correct"]
        d = (b - a.reindex(b.index)).to_numpy(dtype=np.float64)  # [P]
        se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else math.nan
        rows.append({"model": name, "gap": float(d.mean()), "se": se})
    return pd.DataFrame(rows)


def gap_trend(gaps: pd.DataFrame) -> str:
    """Does the gap shrink from the first (smallest) to the last (largest) model? "yes" (never grows from one
    size to the next and ends lower), "partly" (ends lower but not monotonically), "no", or "n/a (one size)";
    " (within noise)" is appended when first and last differ by less than 2 combined standard errors."""
    g = gaps["gap"].to_numpy(dtype=np.float64)  # [sizes]
    if g.size < 2:
        return "n/a (one size)"
    verdict = "no" if g[-1] >= g[0] else ("yes" if np.all(np.diff(g) <= 0) else "partly")
    se = gaps["se"].to_numpy(dtype=np.float64)
    noise = 2 * math.sqrt(se[0] ** 2 + se[-1] ** 2)
    return verdict + (" (within noise)" if math.isfinite(noise) and abs(g[-1] - g[0]) < noise else "")


def describe_scaling(summary: pd.DataFrame, problems: pd.DataFrame, ablation: pd.DataFrame,
                     iterations: int, ablation_iters: int | None = None) -> str:
    """The finding line for notebook 06, computed from the scaling and ablation tables."""
    ns = sorted(n for n in summary["N"].unique() if n > 0)
    small, large = ns[0], ns[-1]
    gaps = population_gaps(problems[problems["N"] > 0], small, large)
    parts = ", ".join(f"{r.model} {r.gap:+.2f}±{r.se:.2f}" for r in gaps.itertuples())
    gen = summary.set_index(["model", "N"])["generations"]
    first = summary["model"].iloc[0]
    ratio = gen.loc[(first, large)] / gen.loc[(first, small)]
    abl = ablation.set_index("ablation")["heldout"]
    base = summary[summary["N"] == 0]  # the untrained sizes: is the larger model also the more capable one?
    bases = " / ".join(f"{r.model} {r.heldout:.2f}" for r in base.itertuples())
    return (f"held-out greedy accuracy after {iterations} ES iterations, gap N={large} - N={small}: {parts} "
            f"(shrinks with size: {gap_trend(gaps)}; N={large} used {ratio:.0f}x the generations of N={small}"
            + (f"; base accuracy {bases}" if bases else "") + "); "
            f"after {ablation_iters or iterations} iterations on the base, "
            f"normalization zscore {abl['zscore']:.2f} / rank {abl['rank']:.2f} / none {abl['none']:.2f}; "
            f"antithetic {abl['antithetic']:.2f} vs plain {abl['plain']:.2f}")
