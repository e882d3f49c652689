"""A finding is a test: each claim of the paper becomes `Check`s whose status is computed from data.

Every study ends in `finding(tables) -> Finding`: a status, one sentence, the evidence checks and the sanity
checks. The rules live here, once:

- A `Check` is one effect the paper predicts, with a direction: `effect > threshold` ("greater") or
  `effect < threshold` ("less"); the threshold is 0 for "A beats B" and a margin for "no worse than". Its
  `delta` (fixed in advance, optional) is the smallest effect of interest: an effect matters when it lies at
  least `delta` beyond the threshold on the claimed side (threshold + delta for "greater", threshold - delta
  for "less").
  - `reproduced`: the 95% CI lies entirely on the claimed side of the threshold, and so does every training
    seed's own point estimate, and (with a delta) the CI still reaches an effect that matters;
  - `not reproduced`: the CI lies entirely on the other side, or (with a delta) it excludes every effect that
    matters: the claimed effect, if any, is too small to matter (this includes a CI on the claimed side that
    ends short of threshold + delta);
  - `not resolved`: anything else: the CI contains the threshold (with a delta: both the threshold and
    threshold +- delta), seeds disagree, or fewer than `MIN_SEEDS` training seeds back a check that has a seed
    axis.
- A `Finding` is `not reproduced` when any of its evidence checks is, `reproduced` when all are, else `not resolved`.
- Sanity checks (identities that cannot fail: AM-GM, Jensen, algebra) are reported beside the evidence and never
  enter the status.
- Uncertainty (`effect_check`) treats seeds and problems as crossed random factors, paired by problem (the
  arms were scored on the same problems) and, with `paired_seeds`, by seed. The default interval is the
  crossed-ANOVA t interval of `intervals` (variance components by the method of moments, Satterthwaite df);
  `method="bootstrap"` keeps the hierarchical bootstrap (seeds of each arm with replacement, then one set of
  problems shared by both arms), which counts the seed x problem residual twice and under-covers with 3 seeds.
- The minimum detectable effect is (t_{0.975, df} + t_{0.80, df}) * SE for the ANOVA interval, and
  `MDE_FACTOR * SE` with SE = CI width / (2 * 1.96) for a bootstrap or hand-made CI (`mde_from_ci`): the
  smallest true effect this design detects with 80% power in a two-sided test at the 5% level. A check is
  powered when its MDE is below its delta; `power_statement` says which checks of a finding are.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from esreason_lib.paper.intervals import METHODS, anova_interval, arms, bootstrap_interval
from esreason_lib.paper.power import estimate_components
from esreason_lib.seeding import numpy_rng

STATUSES = ("reproduced", "not reproduced", "not resolved")
"""The three outcomes of a check or a finding."""
MIN_SEEDS = 3
"""Training seeds a check with a seed axis needs before it can be `reproduced` or `not reproduced`."""
Z_95, Z_POWER_80 = 1.959964, 0.841621
MDE_FACTOR = Z_95 + Z_POWER_80
"""MDE = (z_0.975 + z_0.80) * SE: detected with 80% power at alpha = 0.05, two-sided."""
DIRECTIONS = ("greater", "less")
KINDS = ("claim", "setup")
"""What a finding is: a test of a claim of the paper, or a check of the setup (never counted as a claim)."""


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
    delta: float | None = None
    """Smallest effect of interest (> 0), fixed in advance: effects short of threshold +- delta on the claimed
    side do not matter. None: no such effect was fixed (the status rules without delta)."""
    components: tuple[float, float, float, int] | None = None
    """`power.Components` (seed, problem, resid, arms) of the estimate, for `esreason power`; None for a hand-made
    check (then estimated from the CI)."""
    n_problems: int | None = None
    """Problems behind the check (its design's P); None when unknown."""

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"Check.direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.ci_low > self.ci_high:  # NaN bounds pass here and are `not resolved`
            raise ValueError(f"Check {self.name!r}: ci_low {self.ci_low!r} > ci_high {self.ci_high!r}")
        if self.delta is not None and not (np.isfinite(self.delta) and self.delta > 0):
            raise ValueError(f"Check.delta must be a finite number > 0 or None, got {self.delta!r}")

    def _side(self, x, at: float | None = None) -> np.ndarray:
        """+1 where x is strictly on the claimed side of `at` (default: the threshold), -1 strictly on the other,
        0 on it."""
        sign = np.sign(np.asarray(x, dtype=np.float64) - (self.threshold if at is None else at))
        return sign if self.direction == "greater" else -sign

    @property
    def matters_at(self) -> float | None:
        """threshold + delta ("greater") or threshold - delta ("less"): the nearest effect that matters."""
        if self.delta is None:
            return None
        return self.threshold + (self.delta if self.direction == "greater" else -self.delta)

    @property
    def powered(self) -> bool | None:
        """Whether the MDE is below delta (the design can tell an effect that matters from none); None without
        a delta or with a non-finite MDE."""
        if self.delta is None or not np.isfinite(self.mde):
            return None
        return bool(abs(self.mde) < self.delta)

    @property
    def status(self) -> str:
        """`reproduced`, `not reproduced` or `not resolved` (rules in the module docstring)."""
        return status_and_reason(self)[0]

    @property
    def reason(self) -> str:
        """Why the status is what it is, in a few words."""
        return status_and_reason(self)[1]

    def describe(self, fmt: str = "{:+.3f}") -> str:
        """"name: effect [low, high] (MDE m[, delta d][, n seeds]; status)"."""
        f = fmt.format
        delta = f", delta {self.delta:.3f}" if self.delta is not None else ""
        seeds = f", {self.n_seeds} seeds" if self.n_seeds is not None else ""
        return (f"{self.name}: {f(self.effect)} [{f(self.ci_low)}, {f(self.ci_high)}] "
                f"(MDE {abs(self.mde):.3f}{delta}{seeds}; {self.status})")


def status_and_reason(check: Check) -> tuple[str, str]:
    """The status of `check` and the reason for it."""
    low, high = check._side([check.ci_low, check.ci_high])
    if check.n_seeds is not None and check.n_seeds < MIN_SEEDS:
        return "not resolved", f"{check.n_seeds} training seed(s) < {MIN_SEEDS}"
    if not np.isfinite([check.effect, check.ci_low, check.ci_high]).all():
        return "not resolved", "non-finite estimate"
    if low < 0 and high < 0:
        return "not reproduced", "CI on the opposite side"
    if check.delta is not None and (check._side([check.ci_low, check.ci_high], check.matters_at) < 0).all():
        return "not reproduced", f"CI excludes every effect of at least delta {check.delta:g}: too small to matter"
    if low > 0 and high > 0:
        if check.seed_effects and not (check._side(check.seed_effects) > 0).all():
            return "not resolved", "seeds disagree"
        return "reproduced", "CI on the claimed side"
    if check.delta is not None:
        sign = "+" if check.direction == "greater" else "-"
        return "not resolved", f"CI contains the threshold and threshold {sign} delta"
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
    kind: str = "claim"
    """"claim" (tests a claim of the paper; counted in the tally) or "setup" (checks a property the setup was built
    to have, e.g. the base's designed habit; shown, never counted)."""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"Finding.status must be one of {STATUSES}, got {self.status!r}")
        if self.kind not in KINDS:
            raise ValueError(f"Finding.kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def power(self) -> str:
        """`power_statement(self.checks)`."""
        return power_statement(self.checks)

    def to_json(self) -> dict:
        """A JSON-ready dict (each check with its computed status; the power statement)."""
        return {"status": self.status, "kind": self.kind, "sentence": self.sentence, "sanity": list(self.sanity), "power": self.power,
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


def make_finding(sentence: str, checks, sanity=(), kind: str = "claim") -> Finding:
    """A `Finding` whose status is computed from `checks`; the sentence gets each check's description appended."""
    checks = tuple(checks)
    text = "; ".join([sentence] + [c.describe() for c in checks]) if sentence else "; ".join(
        c.describe() for c in checks)
    return Finding(status=combine_status(checks), sentence=text, checks=checks, sanity=tuple(sanity), kind=kind)


def power_statement(checks) -> str:
    """One sentence on the design's power: which checks have an MDE below their delta (they can tell an effect
    that matters from none) and which do not (a `not resolved` there says the design is weak)."""
    checks = tuple(checks)
    with_delta = [c for c in checks if c.delta is not None]
    if not with_delta:
        return f"power not assessed: none of {len(checks)} checks fixes a delta"
    weak = [c for c in with_delta if not c.powered]
    text = f"{len(with_delta) - len(weak)} of {len(with_delta)} checks with a delta have MDE < delta"
    if weak:
        text += "; underpowered: " + ", ".join(f"{c.name} (MDE {abs(c.mde):.3f} vs delta {c.delta:.3f})"
                                               for c in weak)
    if len(with_delta) < len(checks):
        text += f"; {len(checks) - len(with_delta)} without a delta"
    return text


def mde_from_ci(low: float, high: float) -> float:
    """Minimum detectable effect from a 95% CI: MDE_FACTOR * (high - low) / (2 * 1.96)."""
    return MDE_FACTOR * (float(high) - float(low)) / (2 * Z_95)


def effect_check(name: str, a, b=None, *, direction: str = "greater", threshold: float = 0.0,
                 n_boot: int = 2000, seed: int = 0, seed_axis: bool = True, delta: float | None = None,
                 paired_seeds: bool = False, method: str = "anova") -> Check:
    """A `Check` of mean(a) - mean(b) (or of mean(a) when `b` is None) with a 95% CI over seeds and problems.

    `a`: [R_a, P] per-seed, per-problem values (e.g. Pass@K); `b`: [R_b, P] on the same P problems, or None.
    `paired_seeds=True`: row r of `a` and of `b` is the same training seed (b has a's shape); the check is then
    on the difference matrix a - b, and each seed's effect is its own row mean of a - b. Otherwise the seeds of
    the arms are independent, and seed effects are each seed of `a` against the mean of `b` and the mean of `a`
    against each seed of `b`.
    `method`: "anova" (default; `intervals.anova_interval`, seed-free, `n_boot` and `seed` unused) or
    "bootstrap" (`intervals.bootstrap_interval` with `n_boot` resamples drawn from (`seed`, `name`)).
    `seed_axis=False` for values whose first axis is not training seeds (one row: a base model, a probe set); the
    check then has `n_seeds = None` and no seed agreement rule. `delta`: the check's smallest effect of interest.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    a, b = arms(a, b, paired_seeds=paired_seeds)
    if method == "anova":
        interval = anova_interval(a, b)
        low, high, mde = interval.low, interval.high, interval.mde
    else:
        low, high = bootstrap_interval(a, b, n_boot=n_boot, rng=numpy_rng(seed, "effect_check", name))
        mde = mde_from_ci(low, high)
    b_mean = 0.0 if b is None else float(b.mean())
    effect = float(a.mean()) - b_mean
    seed_effects: tuple[float, ...] = ()
    n_seeds = None
    if seed_axis:
        per_a = a.mean(axis=1) - b_mean  # [R_a]
        per_b = [] if b is None or b.shape[0] == 1 else float(a.mean()) - b.mean(axis=1)  # [R_b]
        seed_effects = tuple(float(x) for x in np.concatenate([per_a, per_b]))
        n_seeds = int(a.shape[0]) if b is None or b.shape[0] == 1 else int(min(a.shape[0], b.shape[0]))
    comp = estimate_components(a, b)  # a, b as `arms` returned them (paired seeds: the difference, b None)
    return Check(name=name, effect=effect, ci_low=low, ci_high=high, mde=mde, direction=direction,
                 threshold=float(threshold), seed_effects=seed_effects, n_seeds=n_seeds,
                 delta=None if delta is None else float(delta),
                 components=(comp.seed, comp.problem, comp.resid, comp.arms), n_problems=int(a.shape[1]))
