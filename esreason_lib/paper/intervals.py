"""Confidence intervals for a mean (or a difference of means) over training seeds x problems.

Shapes: an arm is `[R, P]`: R training seeds (rows), each scored on the same P problems (columns). A check is
one arm `a` (its mean) or two arms `a` [R_a, P], `b` [R_b, P] scored on the same problems (mean(a) - mean(b)).

Model (two-way crossed random effects, no replication): x[r, p] = mu + s_r + q_p + e_rp with independent seed
effects s (variance s2_seed), problem effects q (s2_problem) and residuals e (s2_resid). The grand mean has

    Var(mean) = s2_seed / R + s2_problem / P + s2_resid / (R P).

Method of moments: with row means m_r, column means c_p and grand mean g,
MS_seed = P sum_r (m_r - g)^2 / (R-1)                       E = s2_resid + P s2_seed        (df R-1)
MS_problem = R sum_p (c_p - g)^2 / (P-1)                    E = s2_resid + R s2_problem     (df P-1)
MS_resid = sum (x - m_r - c_p + g)^2 / ((R-1)(P-1))         E = s2_resid                    (df (R-1)(P-1))
so Var(mean) is estimated without bias by (MS_seed + MS_problem - MS_resid) / (R P), i.e. the problem-level part
MS_problem / (R P) = S_c^2 / P (S_c^2: the sample variance of the column means c_p) plus the seed component
(MS_seed - MS_resid) / P over R, clipped at 0 (a negative seed component is estimated as none).

Two unpaired arms (different seeds, same problems) share the problem effects, which cancel in the difference:
D = mean(a) - mean(b) has Var(D) = s2_seed_a / R_a + s2_seed_b / R_b + Var(q_a - q_b) / P
+ s2_resid_a / (R_a P) + s2_resid_b / (R_b P). The per-problem differences of seed means d_p = c_a,p - c_b,p
carry the seed means as a constant, so their sample variance S_d^2 estimates Var(q_a - q_b) + s2_resid_a / R_a
+ s2_resid_b / R_b, and

    Var_hat(D) = S_d^2 / P + sum over arms k of max(0, MS_seed_k - MS_resid_k) / (R_k P).

One arm is the special case b = None (S_d^2 = S_c^2, the formula above). Arms that share seeds (`paired_seeds`:
row r of both arms is training seed r) are analysed as one arm, the difference matrix a - b. An arm with one row
has no estimable seed component (a base model: nothing to resample); P = 1 leaves no problem-level term, and then
an arm's seed term is MS_seed / R (residual and seed variance are not separable). No estimable term: NaN interval.

The interval is estimate +- t_{1-alpha/2, df} SE with Satterthwaite's df for the linear combination of mean squares
sum_i c_i MS_i: df = (sum_i c_i MS_i)^2 / sum_i (c_i MS_i)^2 / df_i, floored at the smallest df of a positive term
(`satterthwaite`). When the seed terms dominate, df -> R - 1 (per arm), so 3 seeds give t_{0.975, 2} = 4.30.
The MDE is (t_{1-alpha/2, df} + t_{power, df}) SE.

One simulation routine (`simulate`, synthetic arms from variance components, with a true effect added by
`power.simulated_arms`) serves the coverage table here and every check's operating characteristic
(`findings.operating_characteristic`); one resampling routine (`crossed_resample`) serves the hierarchical
bootstrap here and notebook 02's grid bootstrap. (`metrics.bootstrap_ci` and `metrics.hierarchical_bootstrap_ci`
belong to the library, which never imports the harness; they draw the per-problem curve bands.)

`coverage` measures the 95% coverage on simulated data (`REGIMES`, R in {3, 10}, P in {100, 500});
`python -m esreason_lib.paper.intervals` prints it for this method and for the hierarchical bootstrap
(`bootstrap_interval`), which counts the residual twice (once in each seed's mean over problems, once in each
problem's mean over seeds) and, with 3 seeds, has the seed spread of 3 values and a percentile interval where a
t on 2 df belongs. Measured (3000 simulations per cell for this method, 400 with 1000 resamples for the
bootstrap): this method 0.93-0.98 in every cell; the bootstrap 0.79-0.83 with 3 seeds and dominant seed
variance, 0.99-1.00 when the residual dominates. This method's worst cells are one arm with 3 seeds whose seed
component is a few times the residual's share (0.93): there the estimated seed component is clipped to 0 in ~15%
of draws, and the SE then loses the seed term; with no seed variance at all it is conservative (~0.975), since
the seed term is kept whenever MS_seed > MS_resid by chance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

METHODS = ("anova", "bootstrap")
"""Interval methods of `findings.effect_check`: the crossed-ANOVA t interval (default) or the bootstrap."""
SHARED_PROBLEM_SD = 1.0
"""`simulate`: SD of the problem effect both arms share (it cancels in the difference)."""


@dataclass(frozen=True)
class Interval:
    """A CI of a mean (or a difference of means) and the design's minimum detectable effect."""

    estimate: float
    """Point estimate: mean(a), or mean(a) - mean(b)."""
    se: float
    """Standard error of the estimate."""
    df: float
    """Satterthwaite degrees of freedom of the SE (inf when the SE is exactly 0)."""
    low: float
    """Lower end of the CI."""
    high: float
    """Upper end of the CI."""
    mde: float
    """(t_{1-alpha/2, df} + t_{power, df}) * se."""


def seed_problem_array(name: str, x) -> np.ndarray:
    """`x` as a float [R, P] array with R, P >= 1, else a ValueError naming `name`."""
    vals = np.asarray(x, dtype=np.float64)
    if vals.ndim != 2 or 0 in vals.shape:
        raise ValueError(f"{name} must have shape [seeds, problems] with both >= 1, got {vals.shape}")
    return vals


def arms(a, b=None, *, paired_seeds: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """The validated arms of a check: (a, b), or (a - b, None) when the arms share seeds (`paired_seeds`)."""
    a = seed_problem_array("a", a)
    b = None if b is None else seed_problem_array("b", b)
    if b is not None and b.shape[1] != a.shape[1]:
        raise ValueError(f"a and b must be scored on the same problems, got {a.shape[1]} and {b.shape[1]}")
    if paired_seeds:
        if b is None or b.shape != a.shape:
            raise ValueError(f"paired_seeds needs b with a's shape {a.shape}, got {None if b is None else b.shape}")
        return a - b, None
    return a, b


def seed_mean_squares(x: np.ndarray) -> tuple[float, float]:
    """(MS_seed, MS_resid) of one arm `x` [R, P] (module docstring); a mean square with 0 df is 0."""
    n_seeds, n_problems = x.shape
    if n_seeds < 2:
        return 0.0, 0.0
    rows, cols = x.mean(axis=1), x.mean(axis=0)  # [R], [P]
    ms_seed = n_problems * float(np.sum((rows - x.mean()) ** 2)) / (n_seeds - 1)
    if n_problems < 2:
        return ms_seed, 0.0
    resid = x - rows[:, None] - cols[None, :] + x.mean()  # [R, P]
    return ms_seed, float(np.sum(resid ** 2)) / ((n_seeds - 1) * (n_problems - 1))


def variance_terms(s2_diff: float, n_problems: int, seed_arms) -> list[tuple[float, float]]:
    """The estimated Var(D) as (term, df) pairs, D's variance being their sum (module docstring).

    `s2_diff`: S_d^2, the variance (ddof 1) over problems of the per-problem difference of seed means;
    `seed_arms`: (R_k, MS_seed_k, MS_resid_k) for each arm. Terms with 0 df are left out.
    """
    terms = [(s2_diff / n_problems, n_problems - 1.0)] if n_problems >= 2 else []
    for n_seeds, ms_seed, ms_resid in seed_arms:
        if n_seeds >= 2 and ms_seed - ms_resid > 0:
            scale = n_seeds * n_problems
            terms.append((ms_seed / scale, n_seeds - 1.0))
            if n_problems >= 2:
                terms.append((-ms_resid / scale, (n_seeds - 1.0) * (n_problems - 1.0)))
    return terms


def satterthwaite(terms) -> tuple[float, float]:
    """(variance, df) of a sum of independent mean-square terms given as (term, df) pairs; NaN when there are none,
    df inf when the variance is 0. The df is floored at the smallest df of a positive term (Satterthwaite's df of
    a positive combination never falls below it; a negative term can drive it towards 0 when a component is
    barely above 0, and a t on a fraction of a degree of freedom is no interval)."""
    if not terms:
        return float("nan"), float("nan")
    var = float(sum(t for t, _ in terms))
    if var <= 0:
        return 0.0, float("inf")
    floor = min(df for t, df in terms if t > 0)
    return var, max(var ** 2 / sum(t ** 2 / df for t, df in terms), floor)


def t_interval(estimate: float, var: float, df: float, *, alpha: float = 0.05, power: float = 0.8) -> Interval:
    """estimate +- t_{1-alpha/2, df} sqrt(var), with the MDE (t_{1-alpha/2, df} + t_{power, df}) sqrt(var)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    se = float(np.sqrt(var))
    if se == 0:
        return Interval(estimate, 0.0, df, estimate, estimate, 0.0)
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    mde = half + float(stats.t.ppf(power, df)) * se
    return Interval(estimate, se, df, estimate - half, estimate + half, mde)


def anova_interval(a, b=None, *, paired_seeds: bool = False, alpha: float = 0.05,
                   power: float = 0.8) -> Interval:
    """The crossed-ANOVA t interval of mean(a) - mean(b) (or of mean(a)); `a` [R_a, P], `b` [R_b, P] or None.

    Rules and the derivation in the module docstring; `paired_seeds=True` analyses a - b (same shape) as one arm.
    """
    a, b = arms(a, b, paired_seeds=paired_seeds)
    cols = a.mean(axis=0) - (0.0 if b is None else b.mean(axis=0))  # [P] d_p
    estimate = float(a.mean()) - (0.0 if b is None else float(b.mean()))
    s2_diff = float(np.var(cols, ddof=1)) if cols.size > 1 else 0.0
    seed_arms = [(x.shape[0], *seed_mean_squares(x)) for x in ((a,) if b is None else (a, b))]
    var, df = satterthwaite(variance_terms(s2_diff, a.shape[1], seed_arms))
    if not np.isfinite(var):
        nan = float("nan")
        return Interval(estimate, nan, nan, nan, nan, nan)
    return t_interval(estimate, var, df, alpha=alpha, power=power)


def crossed_resample(rng: np.random.Generator, n_boot: int, n_rows: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The harness's one hierarchical resampling of a rows x columns design (training seeds or populations x problems
    or prompts): (rows [n_boot, n_rows], cols [n_boot, n_cols]) drawn with replacement, rows first; every row of a
    resample shares its columns (the problems each row was scored on). Used by `bootstrap_draws` and
    `studies.diversity_estimators.grid_bootstrap`."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot!r}")
    return rng.integers(0, n_rows, size=(n_boot, n_rows)), rng.integers(0, n_cols, size=(n_boot, n_cols))


def bootstrap_draws(a, b=None, *, paired_seeds: bool = False, n_boot: int = 2000,
                    rng: np.random.Generator) -> np.ndarray:
    """[n_boot] hierarchical bootstrap means of a - b (or of a): each resample draws the seeds of each arm with
    replacement (one draw for both arms when they share seeds: the mean of a - b), then one set of problems shared
    by both arms (paired by problem)."""
    a, b = arms(a, b, paired_seeds=paired_seeds)
    seeds_a, problems = crossed_resample(rng, n_boot, a.shape[0], a.shape[1])  # [B, R_a], [B, P]

    def arm(x: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        per_problem = x[seeds].mean(axis=1)  # [B, P] seed-mean of each problem
        return np.take_along_axis(per_problem, problems, axis=1).mean(axis=1)  # [B]

    if b is None:
        return arm(a, seeds_a)
    return arm(a, seeds_a) - arm(b, rng.integers(0, b.shape[0], size=(n_boot, b.shape[0])))


def bootstrap_interval(a, b=None, *, paired_seeds: bool = False, n_boot: int = 2000, rng: np.random.Generator,
                       alpha: float = 0.05) -> tuple[float, float]:
    """(low, high): the percentile interval of `bootstrap_draws`."""
    draws = bootstrap_draws(a, b, paired_seeds=paired_seeds, n_boot=n_boot, rng=rng)
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def simulate(rng: np.random.Generator, n_seeds: int, n_problems: int, sd_seed: float, sd_problem: float,
             sd_resid: float, *, two_arms: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Synthetic arms with true difference (or mean) 0: (a, b) each [R, P], or (a, None).

    Each arm: its own seed effects (sd_seed), residuals (sd_resid) and problem effects (sd_problem; with two arms,
    sd_problem / sqrt(2) each, on top of a shared problem effect of SD `SHARED_PROBLEM_SD` that cancels, so the
    difference has the components sd_seed^2 per arm, sd_problem^2 and sd_resid^2 per arm).
    """
    def arm(problem_sd: float, shared: np.ndarray) -> np.ndarray:
        return (sd_seed * rng.standard_normal((n_seeds, 1)) + shared[None]
                + problem_sd * rng.standard_normal((1, n_problems))
                + sd_resid * rng.standard_normal((n_seeds, n_problems)))  # [R, P]

    if not two_arms:
        return arm(sd_problem, np.zeros(n_problems)), None
    shared = SHARED_PROBLEM_SD * rng.standard_normal(n_problems)  # [P]
    return arm(sd_problem / np.sqrt(2), shared), arm(sd_problem / np.sqrt(2), shared)


def coverage(method: str, n_seeds: int, n_problems: int, sd_seed: float, sd_problem: float, sd_resid: float, *,
             two_arms: bool = True, n_sims: int = 400, n_boot: int = 1000, seed: int = 0) -> float:
    """Fraction of `n_sims` simulated checks (`simulate`) whose 95% interval (`method` in `METHODS`) covers 0."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(n_sims):
        a, b = simulate(rng, n_seeds, n_problems, sd_seed, sd_problem, sd_resid, two_arms=two_arms)
        if method == "anova":
            c = anova_interval(a, b)
            low, high = c.low, c.high
        else:
            low, high = bootstrap_interval(a, b, n_boot=n_boot, rng=rng)
        hits += bool(low <= 0 <= high)
    return hits / n_sims


REGIMES = {"seed-dominant": (0.1, 0.1, 0.2), "problem-dominant": (0.005, 0.3, 0.2),
           "residual-dominant": (0.0, 0.05, 0.4), "balanced": (0.03, 0.1, 0.3)}
"""Named (sd_seed, sd_problem, sd_resid) regimes for `coverage_table`."""


def coverage_table(*, n_sims: int = 400, n_boot: int = 1000, seed: int = 0, designs=((3, 100), (3, 500),
                   (10, 100), (10, 500)), two_arms: bool = True):
    """pandas.DataFrame: one row per regime x design, the 95% coverage of both methods (columns anova, bootstrap)."""
    import pandas as pd

    rows = []
    for name, sds in REGIMES.items():
        for r, p in designs:
            rows.append({"regime": name, "R": r, "P": p, **{
                m: coverage(m, r, p, *sds, two_arms=two_arms, n_sims=n_sims, n_boot=n_boot, seed=seed)
                for m in METHODS}})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    for both in (True, False):
        print("two unpaired arms" if both else "one arm (or paired arms)")
        print(coverage_table(two_arms=both).to_string(index=False))
