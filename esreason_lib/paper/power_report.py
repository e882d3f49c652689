"""`esreason power --preset P`: variance components of every stored check, the MDE and CPU cost of candidate
designs, and the cheapest design that brings every MDE below its delta (`power.power_table`, `cheapest_design`).

Inputs are the finding records under the run store's `findings/` (`findings/powered/` for `powered`): each check
with a delta stores its `power.Components` (`findings.effect_check`); a hand-made check without them gets
components estimated from its CI (all variance put on problems: SE^2 x P, the issue's measurement that ~80% is
problem-to-problem). Cost (`power.Cost`, in completions): a seed-run is the preset's ES run
(`plan.expected_cost`), a problem evaluated by one seed costs the evaluation's samples (+1 greedy); CPU hours use
`COMPLETIONS_PER_CORE_SECOND`.

Then each check's operating characteristic (`findings.operating_characteristic`, simulated from its stored
components): at the design it ran, with the status the one status rule gives it there (`status.status_and_reason`:
the status the claims and the notebooks show), and at `SIZING_DESIGN` (the `frontier` settings' design); at both,
which interval outcomes the rule would call `undecidable at this design` there (`status.undecidable_outcomes`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from esreason_lib.paper.findings import Check, operating_characteristic
from esreason_lib.paper.mde import Z_95
from esreason_lib.paper.power import Components, Cost, cheapest_design, power_table
from esreason_lib.paper.records import read_record, records_dir, stored_check
from esreason_lib.paper.status import INTERVAL_OUTCOMES, status_and_reason, undecidable_outcomes
from esreason_lib.paths import findings_dir

COMPLETIONS_PER_CORE_SECOND = 2048.0
"""ES completions per core-second on the tiny models (`benchmarks/sweep_tiny.py`: 300 iterations x 16 members x
64 prompts in ~2.5 minutes on one core)."""
SEEDS = (3, 5, 10)
"""Candidate seeds per arm."""
PROBLEMS = (200, 500, 770, 1000, 2000, 5400)
"""Candidate problems (770 = every free Countdown test problem; 5,400 what a 1-point effect needs)."""
SIZING_DESIGN = (3, 770)
"""(seeds, problems) of the `frontier` settings (`presets`): every free Countdown test problem, 3 seeds."""


def _records(preset: str, home=None) -> list[dict]:
    """The claim records of `preset` (kind "claim"), read as `claims` reads them: a malformed record (not JSON, not
    an object, no status, time or preset) is skipped with its warning (`records.read_record`)."""
    paths = sorted(Path(records_dir(preset, home)).glob("*.json"))
    records = [read_record(path.stem, preset, home) for path in paths]
    return [r for r in records if r is not None and r["preset"] == preset and r.get("kind", "claim") == "claim"]


def stored_check_objects(preset: str, home=None) -> dict[str, Check]:
    """{"<finding>: <check>": the stored `Check`} for every stored check of a claim with a delta
    (`records.stored_check`)."""
    out = {}
    for rec in _records(preset, home):
        for c in rec.get("checks", []):
            if c.get("delta") is not None:
                out[f"{rec['id']}: {c['name']}"] = stored_check(rec, c["name"])
    return out


def oc_table(checks: dict[str, Check], design: tuple[int, int] | None = None, n_sims: int = 200) -> pd.DataFrame:
    """Per check: n_seeds, n_problems, P(rep|delta), P(rep|0), P(not rep|delta) simulated from its components at
    its own design (`design` None) or at `design` = (seeds, problems); at its own design, `status`: the status the
    one rule gives its interval with that operating characteristic (`status.status_and_reason`, what the claims
    show); and `undecidable`: the interval outcomes the rule calls `undecidable at this design` there ("all" when
    its construction fixes them, "" when every outcome counts, "no components" without an operating
    characteristic)."""
    rows = []
    for name, check in checks.items():
        at = check if design is None else replace(check, n_seeds=design[0] if check.n_seeds else None,
                                                  n_problems=design[1])
        oc = operating_characteristic(at, n_sims=n_sims)
        outcomes = undecidable_outcomes(oc, at.fixed)
        why = "all" if outcomes == INTERVAL_OUTCOMES else ", ".join(outcomes)
        status = {} if design is not None else {"status": status_and_reason(replace(check, oc=oc))[0]}
        rows.append({"check": name, "n_seeds": at.n_seeds, "n_problems": at.n_problems,
                     **dict(zip(("P(rep|delta)", "P(rep|0)", "P(not rep|delta)"), oc or (np.nan,) * 3)), **status,
                     "undecidable": why or ("no components" if oc is None and not at.fixed else "")})
    return pd.DataFrame(rows)


def stored_checks(preset: str, home=None) -> dict[str, tuple[Components, float]]:
    """{"<finding>: <check>": (components, delta)} for every stored check with a delta."""
    out = {}
    for rec in _records(preset, home):
        for c in rec.get("checks", []):
            if c.get("delta") is None or not np.isfinite([c["ci_low"], c["ci_high"]]).all():
                continue
            if c.get("components"):
                seed, problem, resid, arms = c["components"]
                comp = Components(float(seed), float(problem), float(resid), int(arms))
            else:
                se = (c["ci_high"] - c["ci_low"]) / (2 * Z_95)
                comp = Components(0.0, se ** 2 * float(c.get("n_problems") or 200), 0.0, 0)
            out[f"{rec['id']}: {c['name']}"] = (comp, float(c["delta"]))
    return out


def design_cost(preset) -> Cost:
    """Completions of one seed-run (the preset's ES run) and of one problem evaluated by one seed."""
    from esreason_lib.paper.plan import expected_cost

    return Cost(per_seed_run=expected_cost(preset.es), per_problem=float(preset.eval.n_samples + 1))


def report(preset, home=None) -> str:
    """The printed report: per check its MDE at each candidate design, and the cheapest design deciding all."""
    checks = stored_checks(preset.name, home)
    if not checks:
        return (f"no stored checks with a delta for preset {preset.name!r} under {findings_dir(home)}: "
                f"run its notebooks first")
    comps = {k: v[0] for k, v in checks.items()}
    deltas = {k: v[1] for k, v in checks.items()}
    cost = design_cost(preset)
    designs = [(r, p) for r in SEEDS for p in PROBLEMS]
    table = power_table(comps, deltas, designs, cost)
    table["cpu_h"] = table["cost"] / COMPLETIONS_PER_CORE_SECOND / 3600
    lines = [f"preset {preset.name}: {len(checks)} checks; cost per arm in completions, CPU hours at "
             f"{COMPLETIONS_PER_CORE_SECOND:g} completions/core-s"]
    wide = table.pivot_table(index="check", columns=["n_seeds", "n_problems"], values="mde", sort=False)
    lines.append(wide.round(3).to_string())
    plan = cheapest_design(comps, deltas, designs, cost)
    if plan.n_seeds is None:
        lines.append("no candidate design brings every decidable MDE below its delta at once")
    else:
        lines.append(f"cheapest design deciding every decidable check: {plan.n_seeds} seeds x {plan.n_problems} "
                     f"problems, {plan.cost:,.0f} completions per arm "
                     f"(~{plan.cost / COMPLETIONS_PER_CORE_SECOND / 3600:.2f}"
                     f" CPU h)")
    if plan.undecidable:
        lines.append("no candidate design decides (CI width >= delta everywhere; widen the task or accept): "
                     + "; ".join(plan.undecidable))
    objects = stored_check_objects(preset.name, home)
    for title, design in (("at the design each check ran", None),
                          (f"at {SIZING_DESIGN[0]} seeds x {SIZING_DESIGN[1]} problems (the frontier settings)",
                           SIZING_DESIGN)):
        table = oc_table(objects, design)
        lines += [f"operating characteristic {title} (simulated from each check's stored components; `undecidable`: "
                  "the interval outcomes the status rule would not count there, `status.undecidable_outcomes`; "
                  "`status`: what the claims show):",
                  table.round(2).to_string(index=False),
                  f"{(table['undecidable'] == '').sum()} of {len(table)} checks count every outcome there"]
    return "\n".join(lines)
