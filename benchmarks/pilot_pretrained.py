"""The pilot behind papers/preregistration-pretrained.md: the base's sampling variance components of Pass@1
on the chosen task, and the floor of each Pass@1 check's operating characteristic they imply (a script, not a test).

    .venv/bin/python benchmarks/pilot_pretrained.py --sweep benchmarks/pretrained_sweep.jsonl --cell multistep-3x2 \\
        --groups 2 --designs 3x500 3x2000 --samples 64 --delta 0.01
    .venv/bin/python benchmarks/pilot_pretrained.py --training benchmarks/pilot_pretrained_training.jsonl \\
        --designs 3x200 --json-out papers/pretrained-oc.json   # the design's OC file (`paper.pilot_oc`)

The sweep's record of the cell holds each sample's verdict (problems x n samples, `sweep_pretrained_task.py`).
Samples of one problem are independent draws given the problem, so splitting a problem's n samples into `--groups`
groups of n / groups is the same as evaluating it under that many sampling seeds: `seed_split` gives the [R, P]
Pass@1 matrix and `power.estimate_components` its components (seed: a sampling seed's mean shift; problem: how
problems differ; resid: the sampling noise of one group's Pass@1 on one problem).

The floor (`floor_components`) is a check of mean(a) - mean(b) over two unpaired arms evaluated as the base is, with
`--samples` samples per problem and seed, when training adds no variance of its own: each arm's seed and residual
components are the base's scaled from n / groups samples to `--samples` (a binomial mean's variance falls as
1 / samples), and no problem component (the arms differ by a constant). A real design adds training's seed and
problem components, so its operating characteristic is at most this floor's: a check that misses the registration's
bar here cannot be a primary at that design. `status_rates` simulates it (`power.simulated_arms`, then
`findings.effect_check`'s interval and `findings.interval_status`) at a true effect of +delta, 0 and -delta.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from esreason_lib.metrics import pass_at_k
from esreason_lib.paper.findings import OC_SIMS, effect_check, interval_status
from esreason_lib.paper.power import Components, estimate_components, simulated_arms
from esreason_lib.seeding import numpy_rng


def seed_split(correct, groups: int) -> np.ndarray:
    """[groups, P] Pass@1 of each group of consecutive samples: `correct` is problems x samples of 0/1 verdicts,
    and the samples split into `groups` equal groups (a ValueError naming `groups` when they do not divide)."""
    correct = np.asarray(correct, dtype=np.float64)
    if correct.ndim != 2:
        raise ValueError(f"correct must be problems x samples, got shape {correct.shape}")
    n = correct.shape[1]
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 2 or n % groups:
        raise ValueError(f"groups must be an int >= 2 that divides the {n} samples, got {groups!r}")
    return correct.reshape(correct.shape[0], groups, n // groups).mean(axis=2).T


def floor_components(base: Components, measured_samples: int, design_samples: int) -> Components:
    """The components of a two-arm difference when training adds no variance (module docstring): twice the base's
    seed and residual components scaled by `measured_samples` / `design_samples`, no problem component."""
    for field, value in (("measured_samples", measured_samples), ("design_samples", design_samples)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{field} must be an int >= 1, got {value!r}")
    scale = measured_samples / design_samples
    return Components(seed=2 * base.seed * scale, problem=0.0, resid=2 * base.resid * scale, arms=2)


def status_rates(components: Components, n_seeds: int, n_problems: int, truth: float, delta: float, *,
                 n_sims: int = OC_SIMS, seed: int = 0) -> dict[str, float]:
    """How often each status comes out of a "greater" check with `delta` at the design (`n_seeds` per arm,
    `n_problems`) when the true effect is `truth`: {status: share of `n_sims` simulated replications}."""
    rng = numpy_rng(seed, "status_rates", n_seeds, n_problems, truth)
    counts: dict[str, int] = {}
    for _ in range(n_sims):
        a, b = simulated_arms(components, n_seeds, n_problems, truth, rng)
        status = interval_status(effect_check("floor", a, b, delta=delta, oc_sims=0))[0]
        counts[status] = counts.get(status, 0) + 1
    return {status: count / n_sims for status, count in sorted(counts.items())}


TRAINING_CHECKS = (
    # (name, arm a, arm b, evaluated on, k, delta by rule B)
    ("01 paper: ES Pass@K - GRPO Pass@K", "es", "grpo", "train-task", "K", 0.02),
    ("01 co-primary: ES Pass@1 - base", "es", "base", "train-task", 1, 0.01),
    ("02 paper (restated): ES centre Pass@K - base over the run", "es", "base", "train-task", "K", 0.02),
    ("05 paper: ES - base held-out Pass@K", "es", "base", "heldout", "K", 0.01),
    ("05 control: ES - GRPO held-out Pass@K", "es", "grpo", "heldout", "K", 0.02),
)
"""The pilot's checks (`--training`): the design's primary checks that its arms measure, each with its delta. The
Pass@1 check is 01's co-primary; 02's restated paper test is the whole run's change of the centre's Pass@K, which
the pilot measures as the final model's Pass@K against the base's on the same problems."""


def where(text: str) -> tuple[str, dict[str, float]]:
    """`--where` "ARM:key=value,key=value" -> (arm, {key: value}): which pilot records stand for an arm (e.g.
    "es:alpha=0.003,iterations=20"); ValueError naming the text when it is not of that form."""
    arm, sep, pairs = text.partition(":")
    try:
        fields = {k: float(v) for k, v in (pair.split("=") for pair in pairs.split(","))} if sep else None
    except ValueError:
        fields = None
    if not arm or not fields:
        raise ValueError(f"--where must be ARM:key=value[,key=value...], got {text!r}")
    return arm, fields


def selected(records: list[dict], wheres: dict[str, dict[str, float]]) -> list[dict]:
    """The records each arm's `--where` fields admit (an arm without one: all of its records)."""
    def keep(r):
        return all(r.get(k) is not None and float(r[k]) == v for k, v in wheres.get(r["arm"], {}).items())

    return [r for r in records if keep(r)]


def arm_matrix(records: list[dict], arm: str, eval_on: str, k: int, split: str = "tuning") -> np.ndarray | None:
    """[seeds, P] per-problem Pass@k of `arm`'s pilot records evaluated on `eval_on` (for the training task: on
    `split`; a record without one is of the first evaluations, on test problems), None when there are none."""
    def on(r):
        where = r.get("eval_on", "train-task")
        return where == eval_on and (where != "train-task" or r.get("split", "test") == split)

    rows = [pass_at_k(r["samples"], np.asarray(r["correct_counts"]), k) for r in records if r["arm"] == arm and on(r)]
    return np.vstack(rows) if rows else None


def training_oc(records: list[dict], designs, big_k: int, sims: int, split: str = "tuning",
                heldout_problems: int | None = None, seed_sd_scale: float = 1.0) -> list[dict]:
    """Each `TRAINING_CHECKS` check's components from the pilot's arms (training-task evaluations on `split`) and its
    status rates at each design (seeds per arm x problems) for a true effect of +delta, 0 and -delta: the rows of a
    design's OC file (`paper.pilot_oc`, written by `--json-out`). A held-out check is simulated at
    `heldout_problems` (the held-out task's pool) instead of each design's problem count, and its row names that
    size as "registered". Each row that misses the bar at its registered size (the first design) carries a
    "reason" (`reason`; a row with an arm missing gets the registration's own line naming it).
    `seed_sd_scale` (a what-if, not a measurement): each check's seed component is simulated at
    `seed_sd_scale`**2 times the one measured (the training seeds' standard deviation times `seed_sd_scale`), its
    row saying so; the problem and residual components stay as measured."""
    if not seed_sd_scale > 0:
        raise ValueError(f"seed_sd_scale must be > 0, got {seed_sd_scale!r}")
    out = []
    for name, a_arm, b_arm, eval_on, k, delta in TRAINING_CHECKS:
        k = big_k if k == "K" else k
        a, b = arm_matrix(records, a_arm, eval_on, k, split), arm_matrix(records, b_arm, eval_on, k, split)
        if a is None or b is None:
            out.append({"check": name, "missing": [x for x, m in ((a_arm, a), (b_arm, b)) if m is None]})
            continue
        comp = estimate_components(a, b)
        row = {"check": name, "k": k, "delta": delta, "effect": float(a.mean() - b.mean()), "seeds": [len(a), len(b)],
               "components": comp.__dict__, "oc": []}
        if seed_sd_scale != 1.0:
            comp = replace(comp, seed=comp.seed * seed_sd_scale ** 2)
            row.update(seed_sd_scale=seed_sd_scale, simulated_components=comp.__dict__)
        sizes = [(s, heldout_problems if eval_on == "heldout" and heldout_problems else p) for s, p in designs]
        for n_seeds, n_problems in dict.fromkeys(sizes):
            rates = {label: status_rates(comp, n_seeds, n_problems, truth, delta, n_sims=sims)
                     for label, truth in (("+delta", delta), ("0", 0.0), ("-delta", -delta))}
            row["oc"].append({"design": f"{n_seeds}x{n_problems}",
                              "P(reproduced | +delta)": rates["+delta"].get("reproduced", 0.0),
                              "P(reproduced | 0)": rates["0"].get("reproduced", 0.0),
                              "P(not reproduced | -delta)": rates["-delta"].get("not reproduced", 0.0)})
        if sizes[0] != designs[0]:
            row["registered"] = row["oc"][0]["design"]
        if why := reason(row):
            row["reason"] = why
        out.append(row)
    return out


def reason(row: dict, bar: float = 0.5) -> str:
    """Why a row's check is not a primary ("" when its first "oc" entry, the registered size, meets `bar`): its two
    rates there, the component that dominates the estimate's variance there (seed / R, problem / P,
    resid / (R P) at R seeds per arm and P problems; the simulated components of a what-if row), and the rates at
    the other sizes simulated."""
    first, *others = row["oc"]
    up, down = first["P(reproduced | +delta)"], first["P(not reproduced | -delta)"]
    if up >= bar and down >= bar:
        return ""
    seeds, problems = _design(first["design"])
    comp = row.get("simulated_components", row["components"])
    terms = {"seed": (comp["seed"], seeds), "problem": (comp["problem"], problems),
             "resid": (comp["resid"], seeds * problems)}
    largest = max(terms, key=lambda name: terms[name][0] / terms[name][1])
    value, divisor = terms[largest]
    text = (f"at {first['design']} P(reproduced | +delta) {up:.2f} and P(not reproduced | -delta) {down:.2f} "
            f"(bar {bar}); the largest term of the estimate's variance there is the {largest} component's "
            f"({value:.3g} / {divisor} = {value / divisor:.2g})")
    more = [f"{e['design']}: {e['P(reproduced | +delta)']:.2f} / {e['P(not reproduced | -delta)']:.2f}"
            for e in others]
    return text + (f"; at {', '.join(more)}" if more else "")


def _design(text: str) -> tuple[int, int]:
    seeds, _, problems = text.partition("x")
    return int(seeds), int(problems)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, help="the sweep's JSON lines")
    parser.add_argument("--cell")
    parser.add_argument("--training", type=Path, help="the training pilot's JSON lines "
                        "(pilot_pretrained_training.py): each training check's components and operating characteristic")
    parser.add_argument("--k", type=int, default=8, help="--training: the K of the Pass@K checks")
    parser.add_argument("--split", default="tuning", help="--training: the training task's evaluations read")
    parser.add_argument("--groups", type=int, default=2, help="sampling seeds the samples split into")
    parser.add_argument("--designs", nargs="+", type=_design, default=[(3, 500), (3, 2000)],
                        help="seeds per arm x problems, e.g. 3x500")
    parser.add_argument("--samples", type=int, default=64, help="samples per problem and seed in the design")
    parser.add_argument("--delta", type=float, default=0.01, help="the checks' delta (rule B: 0.01 for Pass@1)")
    parser.add_argument("--sims", type=int, default=OC_SIMS)
    parser.add_argument("--where", type=where, action="append", default=[],
                        help="--training: the records an arm takes, ARM:key=value[,...] (e.g. es:alpha=0.003,"
                        "iterations=20); repeat per arm")
    parser.add_argument("--heldout-problems", type=int, help="--training: the held-out checks' problem count "
                        "(the held-out pool) instead of each design's")
    parser.add_argument("--seed-sd-scale", type=float, nargs="+", default=[1.0], help="--training, a what-if: "
                        "simulate each check with the training seeds' standard deviation times each of these (the "
                        "other components as measured), the rows of each in turn")
    parser.add_argument("--json-out", type=Path, help="--training: also write the rows to this file (a design's "
                        "OC file, `paper.pilot_oc`)")
    args = parser.parse_args(argv)
    if args.json_out and not args.training:
        parser.error("--json-out writes the --training rows: give --training")
    if args.training:
        records = [json.loads(line) for line in args.training.read_text().splitlines() if line.strip()]
        records = selected(records, dict(args.where))
        rows = [row for scale in args.seed_sd_scale
                for row in training_oc(records, args.designs, args.k, args.sims, args.split, args.heldout_problems,
                                       scale)]
        print(json.dumps(rows, indent=1))
        if args.json_out:
            args.json_out.write_text(json.dumps(rows, indent=1) + "\n")
        return
    if not (args.sweep and args.cell):
        parser.error("give --sweep and --cell (the base's components), or --training")
    records = [json.loads(line) for line in args.sweep.read_text().splitlines() if line.strip()]
    record = [r for r in records if r["cell"] == args.cell][-1]
    matrix = seed_split(record["correct"], args.groups)
    base = estimate_components(matrix)
    floor = floor_components(base, record["samples"] // args.groups, args.samples)
    out = {"cell": args.cell, "problems": len(record["correct"]), "samples": record["samples"],
           "groups": args.groups, "pass1": float(matrix.mean()), "base_components": base.__dict__,
           "floor_components": floor.__dict__, "delta": args.delta, "design_samples": args.samples, "oc": []}
    for n_seeds, n_problems in args.designs:
        rates = {label: status_rates(floor, n_seeds, n_problems, truth, args.delta, n_sims=args.sims)
                 for label, truth in (("+delta", args.delta), ("0", 0.0), ("-delta", -args.delta))}
        out["oc"].append({"n_seeds": n_seeds, "n_problems": n_problems,
                          "P(reproduced | +delta)": rates["+delta"].get("reproduced", 0.0),
                          "P(reproduced | 0)": rates["0"].get("reproduced", 0.0),
                          "P(not reproduced | -delta)": rates["-delta"].get("not reproduced", 0.0),
                          "rates": rates})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
