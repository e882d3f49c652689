"""A finding is a test: each claim of the paper becomes `Check`s whose status is computed from data.

Every study ends in `finding(tables) -> Finding`: a status, one sentence, the evidence checks and the sanity
checks. The rules live here, once:

- A `Check` is one effect the paper predicts, with a direction: `effect > threshold` ("greater") or
  `effect < threshold` ("less"); the threshold is 0 for "A beats B" and a margin for "no worse than".
  - `reproduced`: the 95% CI lies entirely on the claimed side of the threshold, and so does every training
    seed's own point estimate;
  - `not reproduced`: the CI lies entirely on the other side;
  - `not resolved`: anything else: the CI contains the threshold, seeds disagree, or fewer than `MIN_SEEDS`
    training seeds back a check that has a seed axis.
- A `Finding` is `not reproduced` when any of its evidence checks is, `reproduced` when all are, else `not resolved`.
- Sanity checks (identities that cannot fail: AM-GM, Jensen, algebra) are reported beside the evidence and never
  enter the status.
- Uncertainty is hierarchical (`effect_check`): each bootstrap resample draws the training seeds of each arm
  with replacement and one set of problems shared by both arms (the arms were scored on the same problems, so
  the comparison is paired by problem).
- The minimum detectable effect is `MDE_FACTOR * SE`, SE = CI width / (2 * 1.96): the smallest true effect this
  design detects with 80% power in a two-sided test at the 5% level. A `not resolved` check with a small MDE says
  the effect is small; with a large MDE, that the design is weak.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from esreason_lib.seeding import numpy_rng

STATUSES = ("reproduced", "not reproduced", "not resolved")
"""The three outcomes of a check or a finding."""
MIN_SEEDS = 3
"""Training seeds a check with a seed axis needs before it can be `reproduced` or `not reproduced`."""
Z_95, Z_POWER_80 = 1.959964, 0.841621
MDE_FACTOR = Z_95 + Z_POWER_80
"""MDE = (z_0.975 + z_0.80) * SE: detected with 80% power at alpha = 0.05, two-sided."""
DIRECTIONS = ("greater", "less")


@dataclass(frozen=True)
class Check:
    """One falsifiable effect: its estimate, 95% CI, minimum detectable effect and the claimed direction."""

    name: str
    """What is tested, e.g. "ES above GRPO at K=64"."""
    effect: float
    """Point estimate (mean over seeds and problems of A, minus that of B)."""
    ci_low: float
    """Lower end of the 95% CI."""
    ci_high: float
    """Upper end of the 95% CI."""
    mde: float
    """Minimum detectable effect of this design (see the module docstring)."""
    direction: str = "greater"
    """The paper's prediction: "greater" (effect > threshold) or "less" (effect < threshold)."""
    threshold: float = 0.0
    """The value the effect must clear: 0, or a margin for a "no worse than" claim."""
    seed_effects: tuple[float, ...] = ()
    """Each training seed's own point estimate (empty when the check has no seed axis)."""
    n_seeds: int | None = None
    """Training seeds behind the check; None when it has no seed axis (a base model, a theory check)."""

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"Check.direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.ci_low > self.ci_high:  # NaN bounds pass here and are `not resolved`
            raise ValueError(f"Check {self.name!r}: ci_low {self.ci_low!r} > ci_high {self.ci_high!r}")

    def _side(self, x) -> np.ndarray:
        """+1 where x is strictly on the claimed side of the threshold, -1 strictly on the other, 0 on it."""
        sign = np.sign(np.asarray(x, dtype=np.float64) - self.threshold)
        return sign if self.direction == "greater" else -sign

    @property
    def status(self) -> str:
        """`reproduced`, `not reproduced` or `not resolved` (rules in the module docstring)."""
        return status_and_reason(self)[0]

    @property
    def reason(self) -> str:
        """Why the status is what it is, in a few words."""
        return status_and_reason(self)[1]

    def describe(self, fmt: str = "{:+.3f}") -> str:
        """"name: effect [low, high] (MDE m; status)"."""
        f = fmt.format
        seeds = f", {self.n_seeds} seeds" if self.n_seeds is not None else ""
        return (f"{self.name}: {f(self.effect)} [{f(self.ci_low)}, {f(self.ci_high)}] "
                f"(MDE {abs(self.mde):.3f}{seeds}; {self.status})")


def status_and_reason(check: Check) -> tuple[str, str]:
    """The status of `check` and the reason for it."""
    low, high = check._side([check.ci_low, check.ci_high])
    if check.n_seeds is not None and check.n_seeds < MIN_SEEDS:
        return "not resolved", f"{check.n_seeds} training seed(s) < {MIN_SEEDS}"
    if not np.isfinite([check.effect, check.ci_low, check.ci_high]).all():
        return "not resolved", "non-finite estimate"
    if low > 0 and high > 0:
        if check.seed_effects and not (check._side(check.seed_effects) > 0).all():
            return "not resolved", "seeds disagree"
        return "reproduced", "CI on the claimed side"
    if low < 0 and high < 0:
        return "not reproduced", "CI on the opposite side"
    return "not resolved", "CI contains the threshold"


@dataclass(frozen=True)
class Finding:
    """What a study concludes: a computed status, one sentence, its evidence and its sanity checks."""

    status: str
    """`combine_status(checks)`."""
    sentence: str
    """The measured result in one sentence (numbers, not adjectives)."""
    checks: tuple[Check, ...]
    """The evidence: checks that could have failed."""
    sanity: tuple[str, ...] = field(default=())
    """Identities and bookkeeping reported beside the evidence (they cannot fail and never set the status)."""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"Finding.status must be one of {STATUSES}, got {self.status!r}")

    def to_json(self) -> dict:
        """A JSON-ready dict (each check with its computed status)."""
        return {"status": self.status, "sentence": self.sentence, "sanity": list(self.sanity),
                "checks": [{**asdict(c), "seed_effects": list(c.seed_effects), "status": c.status,
                            "reason": c.reason} for c in self.checks]}


def combine_status(checks) -> str:
    """`not reproduced` if any check is, `reproduced` if all are (and there is at least one), else `not resolved`."""
    statuses = [c.status for c in checks]
    if "not reproduced" in statuses:
        return "not reproduced"
    if statuses and all(s == "reproduced" for s in statuses):
        return "reproduced"
    return "not resolved"


def make_finding(sentence: str, checks, sanity=()) -> Finding:
    """A `Finding` whose status is computed from `checks`; the sentence gets each check's description appended."""
    checks = tuple(checks)
    text = "; ".join([sentence] + [c.describe() for c in checks]) if sentence else "; ".join(
        c.describe() for c in checks)
    return Finding(status=combine_status(checks), sentence=text, checks=checks, sanity=tuple(sanity))


def mde_from_ci(low: float, high: float) -> float:
    """Minimum detectable effect from a 95% CI: MDE_FACTOR * (high - low) / (2 * 1.96)."""
    return MDE_FACTOR * (float(high) - float(low)) / (2 * Z_95)


def _paired_draws(a: np.ndarray, b: np.ndarray | None, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """[n_boot] bootstrap means of a - b (or of a): the seeds of each arm drawn with replacement, the problems
    drawn once per resample and shared by both arms (paired by problem)."""
    problems = rng.integers(0, a.shape[1], size=(n_boot, a.shape[1]))  # [B, P]

    def arm(x: np.ndarray) -> np.ndarray:
        seeds = rng.integers(0, x.shape[0], size=(n_boot, x.shape[0]))  # [B, R]
        per_problem = x[seeds].mean(axis=1)  # [B, P] seed-mean of each problem
        return np.take_along_axis(per_problem, problems, axis=1).mean(axis=1)  # [B]

    return arm(a) if b is None else arm(a) - arm(b)


def _seed_problem_array(name: str, x) -> np.ndarray:
    vals = np.asarray(x, dtype=np.float64)
    if vals.ndim != 2 or 0 in vals.shape:
        raise ValueError(f"{name} must have shape [seeds, problems] with both >= 1, got {vals.shape}")
    return vals


def effect_check(name: str, a, b=None, *, direction: str = "greater", threshold: float = 0.0,
                 n_boot: int = 2000, seed: int = 0, seed_axis: bool = True) -> Check:
    """A `Check` of mean(a) - mean(b) (or of mean(a) when `b` is None) with a hierarchical bootstrap CI.

    `a`: [R_a, P] per-seed, per-problem values (e.g. Pass@K); `b`: [R_b, P] on the same P problems, or None.
    `seed_axis=False` for values whose first axis is not training seeds (one row: a base model, a probe set); the
    check then has `n_seeds = None` and no seed agreement rule. Seed effects are each seed of `a` against the
    mean of `b` and the mean of `a` against each seed of `b`.
    """
    a = _seed_problem_array("a", a)
    b = None if b is None else _seed_problem_array("b", b)
    if b is not None and b.shape[1] != a.shape[1]:
        raise ValueError(f"a and b must be scored on the same problems, got {a.shape[1]} and {b.shape[1]}")
    draws = _paired_draws(a, b, n_boot, numpy_rng(seed, "effect_check", name))
    low, high = (float(v) for v in np.quantile(draws, [0.025, 0.975]))
    b_mean = 0.0 if b is None else float(b.mean())
    effect = float(a.mean()) - b_mean
    seed_effects: tuple[float, ...] = ()
    n_seeds = None
    if seed_axis:
        per_a = a.mean(axis=1) - b_mean  # [R_a]
        per_b = [] if b is None or b.shape[0] == 1 else float(a.mean()) - b.mean(axis=1)  # [R_b]
        seed_effects = tuple(float(x) for x in np.concatenate([per_a, per_b]))
        n_seeds = int(a.shape[0]) if b is None or b.shape[0] == 1 else int(min(a.shape[0], b.shape[0]))
    return Check(name=name, effect=effect, ci_low=low, ci_high=high, mde=mde_from_ci(low, high),
                 direction=direction, threshold=float(threshold), seed_effects=seed_effects, n_seeds=n_seeds)
