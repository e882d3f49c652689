"""`esreason power --preset P`: variance components of every stored check, the MDE and CPU cost of candidate
designs, and the cheapest design that brings every MDE below its delta (`power.power_table`, `cheapest_design`).

Inputs are the finding records under the run store's `findings/` (`findings/powered/` for `powered`): each check
with a delta stores its `power.Components` (`findings.effect_check`); a hand-made check without them gets
components estimated from its CI (all variance put on problems: SE^2 x P, the issue's measurement that ~80% is
problem-to-problem). Cost (`power.Cost`, in completions): a seed-run is the preset's ES run
(`plan.expected_cost`), a problem evaluated by one seed costs the evaluation's samples (+1 greedy); CPU hours use
`COMPLETIONS_PER_CORE_SECOND`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from esreason_lib.paper.findings import Z_95
from esreason_lib.paper.claims import records_dir
from esreason_lib.paths import findings_dir
from esreason_lib.paper.power import Components, Cost, cheapest_design, power_table

COMPLETIONS_PER_CORE_SECOND = 2048.0
"""ES completions per core-second on the tiny models (`benchmarks/sweep_tiny.py`: 300 iterations x 16 members x
64 prompts in ~2.5 minutes on one core)."""
SEEDS = (3, 5, 10)
"""Candidate seeds per arm."""
PROBLEMS = (200, 500, 770, 1000, 2000, 5400)
"""Candidate problems (770 = every free Countdown test problem; 5,400 what a 1-point effect needs)."""


def stored_checks(preset: str, home=None) -> dict[str, tuple[Components, float]]:
    """{"<finding>: <check>": (components, delta)} for every stored check with a delta."""
    folder = records_dir(preset, home)
    out = {}
    for path in sorted(Path(folder).glob("*.json")):
        rec = json.loads(path.read_text())
        if rec.get("preset") != preset or rec.get("kind", "claim") != "claim":
            continue
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
                     f"problems, {plan.cost:,.0f} completions per arm (~{plan.cost / COMPLETIONS_PER_CORE_SECOND / 3600:.2f}"
                     f" CPU h)")
    if plan.undecidable:
        lines.append("no candidate design decides (MDE >= delta everywhere; widen the task or accept): "
                     + "; ".join(plan.undecidable))
    return "\n".join(lines)
