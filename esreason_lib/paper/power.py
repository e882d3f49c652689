"""Power analysis for checks over training seeds x problems: variance components, MDE of a design, cheapest design.

Shapes and model are `intervals`'s: an arm is [R, P] (R training seeds, P problems), x[r, p] = mu + s_r + q_p + e_rp.
A check's `Components` are those of its estimate D (mean(a), or mean(a) - mean(b)): with R seeds per arm and P
problems,

    Var(D) = seed / R + problem / P + resid / (R P),

`seed` and `resid` summed over the arms whose seeds are independent draws (`arms` of them: 1 for one arm or for
arms that share seeds, 2 for two unpaired arms, 0 when no arm has a seed axis), `problem` the variance of the
per-problem difference that does not average out over seeds (the problem effect each arm does not share; an arm
with one row, a base model, puts its whole within-problem noise here since it has no seeds to average over).

Rules:
- `estimate_components` (method of moments, negatives clipped at 0): per arm with R_k >= 2 seeds,
  seed_k = (MS_seed_k - MS_resid_k) / P and resid_k = MS_resid_k; problem = S_d^2 - sum_k resid_k / R_k, where S_d^2
  is the variance over problems of the per-problem difference of seed means (`intervals` derives these).
- `design_mde`: the MDE of a design (R, P) is (t_{1-alpha/2, df} + t_{power, df}) * SE, SE^2 = Var(D) above and df
  the Satterthwaite df `intervals.anova_interval` would compute at the design's expected mean squares
  (E MS_seed_k = resid_k + P seed_k, E MS_resid_k = resid_k, E S_d^2 = problem + resid / R; the arms split seed
  and resid equally). With few seeds and seed variance dominating, df -> R - 1 per arm, so the t quantiles
  matter; with many, the MDE tends to (z_0.975 + z_0.80) * SE.
- A check is decided by a design when its 95% CI there is narrower than its delta (`findings.Check.delta`):
  2 t_{1-alpha/2, df} SE < delta (~3.92 SE with many df), so that the interval cannot contain both 0 and delta.
  The MDE ((t + t_power) SE, ~2.8 SE) is the smallest effect detected against 0 with 80% power, a weaker
  requirement: at MDE = delta a CI still contains both 0 and delta in about half the replications.
- `simulated_arms`: synthetic arms with a given true effect drawn from a check's `Components` (through
  `intervals.simulate`, the one simulation routine of the harness), which `findings.operating_characteristic`
  runs through the interval and status rules.
- `cheapest_design`: among candidate designs, the cheapest (`Cost.of`) that decides every check some design
  decides; the checks no candidate decides are named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from .intervals import arms, satterthwaite, seed_mean_squares, simulate, t_interval, variance_terms


@dataclass(frozen=True)
class Components:
    """Variance components of a check's estimate (module docstring): Var(D) = seed/R + problem/P + resid/(R P)."""

    seed: float
    """Seed-to-seed variance of a seed's mean effect, summed over the arms with independent seeds."""
    problem: float
    """Variance over problems of the per-problem difference that does not average out over seeds."""
    resid: float
    """Seed x problem residual variance, summed over the arms with independent seeds."""
    arms: int = 1
    """Arms whose seeds are independent draws (0, 1 or 2): sets how the df of a design is computed."""

    def __post_init__(self):
        for name in ("seed", "problem", "resid"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"Components.{name} must be a finite number >= 0, got {value!r}")
        if self.arms not in (0, 1, 2):
            raise ValueError(f"Components.arms must be 0, 1 or 2, got {self.arms!r}")

    def variance(self, n_seeds: int, n_problems: int) -> float:
        """Var(D) with `n_seeds` seeds per arm and `n_problems` problems."""
        _check_design(n_seeds, n_problems)
        return self.seed / n_seeds + self.problem / n_problems + self.resid / (n_seeds * n_problems)


@dataclass(frozen=True)
class Cost:
    """Cost model of a design: a seed-run (training one seed) and a problem evaluated by one trained seed."""

    per_seed_run: float
    """Cost of training one seed of one arm."""
    per_problem: float
    """Cost of evaluating one problem with one trained seed."""

    def __post_init__(self):
        for name in ("per_seed_run", "per_problem"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"Cost.{name} must be a finite number >= 0, got {value!r}")

    def of(self, n_seeds: int, n_problems: int) -> float:
        """Cost of one arm of the design: per_seed_run * R + per_problem * R * P (arms scale every design alike)."""
        return self.per_seed_run * n_seeds + self.per_problem * n_seeds * n_problems


@dataclass(frozen=True)
class Plan:
    """The cheapest design of a grid that decides the checks, and the checks no design in the grid decides."""

    n_seeds: int | None
    """Seeds per arm of the chosen design; None when no design decides every decidable check at once."""
    n_problems: int | None
    """Problems of the chosen design (None as above)."""
    cost: float | None
    """`Cost.of` the chosen design (None as above)."""
    undecidable: tuple[str, ...]
    """Checks whose CI is at least as wide as their delta at every design of the grid."""
    mde: Mapping[str, float]
    """Each check's MDE at the chosen design (empty when there is none)."""


def _check_design(n_seeds, n_problems) -> None:
    if isinstance(n_seeds, bool) or int(n_seeds) != n_seeds or n_seeds < 2:
        raise ValueError(f"n_seeds must be an integer >= 2, got {n_seeds!r}")
    if isinstance(n_problems, bool) or int(n_problems) != n_problems or n_problems < 2:
        raise ValueError(f"n_problems must be an integer >= 2, got {n_problems!r}")


def estimate_components(a, b=None, *, paired_seeds: bool = False) -> Components:
    """The `Components` of mean(a) - mean(b) (or of mean(a)): `a` [R_a, P], `b` [R_b, P] or None; with
    `paired_seeds` (row r of both arms is seed r, same shape) those of the difference matrix a - b."""
    a, b = arms(a, b, paired_seeds=paired_seeds)
    cols = a.mean(axis=0) - (0.0 if b is None else b.mean(axis=0))  # [P] d_p
    s2_diff = float(np.var(cols, ddof=1)) if cols.size > 1 else 0.0
    seeded = [x for x in ((a,) if b is None else (a, b)) if x.shape[0] >= 2]
    seed = resid = resid_in_diff = 0.0
    for x in seeded:
        ms_seed, ms_resid = seed_mean_squares(x)
        seed += max(0.0, (ms_seed - ms_resid) / x.shape[1])
        resid += ms_resid
        resid_in_diff += ms_resid / x.shape[0]
    return Components(seed=seed, problem=max(0.0, s2_diff - resid_in_diff), resid=resid, arms=len(seeded))


def design_se(components: Components, n_seeds: int, n_problems: int) -> tuple[float, float]:
    """(SE, df) of the check's estimate with `n_seeds` seeds per arm and `n_problems` problems (module docstring)."""
    _check_design(n_seeds, n_problems)
    c = components
    k = max(c.arms, 1)
    resid_k, seed_k = c.resid / k, c.seed / k
    seed_arms = [(n_seeds, resid_k + n_problems * seed_k, resid_k)] * c.arms
    var, df = satterthwaite(variance_terms(c.problem + c.resid / n_seeds, n_problems, seed_arms))
    return float(np.sqrt(var)), df


def simulated_arms(components: Components, n_seeds: int, n_problems: int, effect: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """Synthetic arms (a [R, P], b [R, P] or None) whose mean(a) - mean(b) has true value `effect` and the variance
    components `components` (`intervals.simulate`): two unpaired arms when `components.arms` is 2 (each with half
    the seed and residual variance), one arm otherwise (paired seeds or a base row; with no seeded arm, one row)."""
    c = components
    if c.arms == 2:
        a, b = simulate(rng, n_seeds, n_problems, np.sqrt(c.seed / 2), np.sqrt(c.problem), np.sqrt(c.resid / 2),
                        two_arms=True)
    else:
        a, b = simulate(rng, n_seeds if c.arms == 1 else 1, n_problems, np.sqrt(c.seed), np.sqrt(c.problem),
                        np.sqrt(c.resid), two_arms=False)
    return a + effect, b


def design_mde(components: Components, n_seeds: int, n_problems: int, *, alpha: float = 0.05,
               power: float = 0.8) -> float:
    """MDE of the design: (t_{1-alpha/2, df} + t_{power, df}) * SE, (SE, df) = `design_se`."""
    se, df = design_se(components, n_seeds, n_problems)
    return t_interval(0.0, se ** 2, df, alpha=alpha, power=power).mde


def power_table(components_by_check: Mapping[str, Components], deltas: Mapping[str, float],
                designs: Iterable[tuple[int, int]], cost: Cost, *, alpha: float = 0.05,
                power: float = 0.8) -> pd.DataFrame:
    """One row per design x check, cheapest design first: columns check, n_seeds, n_problems, cost, se, df, mde,
    ci_width (2 t_{1-alpha/2, df} se), delta, decided (ci_width < delta: the CI cannot hold both 0 and delta).
    `components_by_check` and `deltas` are keyed by check name (same keys); `designs`: (R seeds per arm, P problems)
    pairs."""
    if set(components_by_check) != set(deltas):
        raise ValueError(f"deltas must have the checks of components_by_check as keys, got {sorted(deltas)} "
                         f"for {sorted(components_by_check)}")
    for name, delta in deltas.items():
        if not (np.isfinite(delta) and delta > 0):
            raise ValueError(f"deltas[{name!r}] must be a finite number > 0, got {delta!r}")
    designs = sorted({(int(r), int(p)) for r, p in designs}, key=lambda d: (cost.of(*d), d))
    if not designs:
        raise ValueError("designs must hold at least one (n_seeds, n_problems) pair, got none")
    rows = []
    for r, p in designs:
        for name, comp in components_by_check.items():
            se, df = design_se(comp, r, p)
            interval = t_interval(0.0, se ** 2, df, alpha=alpha, power=power)
            width = interval.high - interval.low
            rows.append({"check": name, "n_seeds": r, "n_problems": p, "cost": cost.of(r, p), "se": se, "df": df,
                         "mde": interval.mde, "ci_width": width, "delta": float(deltas[name]),
                         "decided": bool(width < deltas[name])})
    return pd.DataFrame(rows)


def cheapest_design(components_by_check: Mapping[str, Components], deltas: Mapping[str, float],
                    designs: Iterable[tuple[int, int]], cost: Cost, *, alpha: float = 0.05,
                    power: float = 0.8) -> Plan:
    """The cheapest design of `designs` that decides (`power_table`'s `decided`) every check some design decides,
    and the checks no design decides (arguments as `power_table`; ties in cost go to fewer seeds, then
    fewer problems)."""
    table = power_table(components_by_check, deltas, designs, cost, alpha=alpha, power=power)
    decidable = table.groupby("check", sort=False)["decided"].any()
    undecidable = tuple(name for name in components_by_check if not decidable[name])
    wanted = table[table["check"].isin(decidable[decidable].index)]
    full = wanted.groupby(["n_seeds", "n_problems"], sort=False)["decided"].all()
    chosen = list(full[full].index)
    if not chosen:
        return Plan(None, None, None, undecidable, {})
    r, p = min(chosen, key=lambda d: (cost.of(*d), d))
    at = table[(table["n_seeds"] == r) & (table["n_problems"] == p)]
    return Plan(int(r), int(p), cost.of(r, p), undecidable, dict(zip(at["check"], at["mde"].astype(float))))
