"""A finding is a test: each claim of the paper becomes `Check`s whose status is computed from data.

Every study ends in `finding(tables) -> Finding`: a status, one sentence, its tests (each one primary `Check`
declared in advance, with secondary checks shown beside it) and the sanity checks. The rules live here, once:

- A `Check` is one effect the paper predicts, with a direction: `effect > threshold` ("greater") or
  `effect < threshold` ("less"); the threshold is 0 for "A beats B" and a margin for "no worse than". Its
  `delta` (fixed in advance, optional) is the smallest effect of interest: an effect matters when it lies at
  least `delta` beyond the threshold on the claimed side (threshold + delta for "greater", threshold - delta
  for "less"). Its status (`STATUSES`), in this order:
  - `undecidable at this design`: its outcome is fixed by construction (`Check.fixed`: a ceiling, a floor, a
    delta the design cannot reach, regression to the mean), or its operating characteristic (`Check.oc`,
    simulated by `operating_characteristic` from its own variance components at the design it ran) says the
    outcome it got could not have gone the other way: a pass (`reproduced` by the interval) that the simplest
    alternative, a true effect of 0, would also give more than `MAX_FALSE_PASS` of the time; a failure (`not
    reproduced`) that a real effect (= delta) would also give more than `MAX_FALSE_PASS` of the time; or a `not
    resolved` where a real effect would reach `reproduced` less than `MIN_POWER` of the time. Such a check
    neither supports nor contradicts the paper (the reason quotes what the interval alone says). Each outcome
    counts when it is rare under the hypothesis it rules out: a low-powered design that
    still puts the whole interval on the other side has contradicted the paper, and says so; `smaller than
    delta` excludes delta by its interval (a true effect of delta gives it ~2.5% of the time) and counts too;
    `power_report` marks a design whose checks cannot reach `reproduced` at all;
  - `not resolved` when fewer than `MIN_SEEDS` training seeds back a check with a seed axis, or the estimate
    is not finite;
  - `not reproduced`: the 95% CI lies entirely on the other side of the threshold;
  - `smaller than delta`: (with a delta) the CI excludes every effect that matters: on the claimed side but
    short of threshold + delta, or around the threshold and short of it (no effect of interest);
  - `reproduced`: the CI lies entirely on the claimed side of the threshold, every training seed's own point
    estimate too, and (with a delta) the CI still reaches an effect that matters;
  - `not resolved`: anything else (the CI contains the threshold, and threshold +- delta with a delta; seeds
    disagree).
- A `Test` is one way of testing a claim, with a `role`: "paper" (the paper's own design, in its words) or
  "control" (the alternative explanation it must survive). Its status is its primary check's, declared in
  advance (`studies.registry`); secondary checks are shown and never enter it (no conjunction).
- A `Finding`'s status is its paper test's (the first test when none has the paper's role).
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
  powered when its MDE is below its delta; `power_statement` says which checks of a finding are. Deciding
  between 0 and delta takes more: a CI decides when its whole width (~3.92 SE) is below delta (`power`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from esreason_lib.paper.intervals import METHODS, anova_interval, arms, bootstrap_interval
from esreason_lib.paper.power import Components, estimate_components, simulated_arms
from esreason_lib.seeding import numpy_rng

UNDECIDABLE = "undecidable at this design"
STATUSES = ("reproduced", "not reproduced", "smaller than delta", "not resolved", UNDECIDABLE)
"""The outcomes of a check, a test or a finding (rules in the module docstring)."""
ROLES = ("paper", "control")
"""What a `Test` is: the paper's own test (its design, its words) or the control that could explain it away."""
MIN_SEEDS = 3
"""Training seeds a check with a seed axis needs before it can be `reproduced` or `not reproduced`."""
MIN_POWER = 0.5
"""A `not resolved` check whose P(`reproduced` | effect = delta) at its design is below this is `undecidable at this
design`: a real effect would not have passed either."""
MAX_FALSE_PASS = 0.1
"""A check that passed, whose P(`reproduced` | effect = 0) at its design is above this, or failed (`not
reproduced`), whose P(`not reproduced` | effect = delta) is above this, is `undecidable at this design`: the
hypothesis it would rule out gives that outcome too (a nominal 95% one-sided interval gives 0.025)."""
OC_SIMS = 200
"""Simulated replications per true effect behind a check's operating characteristic (SE of a rate <= 0.035)."""
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
    fixed: str = ""
    """Why the check's outcome is fixed by its construction (a ceiling, a floor, regression to the mean, a delta
    it cannot reach), which makes it `undecidable at this design`; "" when nothing fixes it."""
    oc: tuple[float, float, float] | None = None
    """Operating characteristic at its design (`operating_characteristic`): P(`reproduced` | effect = delta),
    P(`reproduced` | effect = 0), P(`not reproduced` | effect = delta); None when not simulated (no delta or no
    components)."""

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"Check.direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.ci_low > self.ci_high:  # NaN bounds pass here and are `not resolved`
            raise ValueError(f"Check {self.name!r}: ci_low {self.ci_low!r} > ci_high {self.ci_high!r}")
        if self.delta is not None and not (np.isfinite(self.delta) and self.delta > 0):
            raise ValueError(f"Check.delta must be a finite number > 0 or None, got {self.delta!r}")
        if self.oc is not None and not (len(self.oc) == 3 and all(0 <= p <= 1 for p in self.oc)):
            raise ValueError(f"Check.oc must be three probabilities in [0, 1] or None, got {self.oc!r}")

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
        """One of `STATUSES` (rules in the module docstring)."""
        return status_and_reason(self)[0]

    @property
    def reason(self) -> str:
        """Why the status is what it is, in a few words."""
        return status_and_reason(self)[1]

    def describe(self, fmt: str = "{:+.3f}") -> str:
        """"name: effect [low, high] (MDE m[, delta d][, n seeds][, P(rep | delta) p]; status)"."""
        f = fmt.format
        delta = f", delta {self.delta:.3f}" if self.delta is not None else ""
        seeds = f", {self.n_seeds} seeds" if self.n_seeds is not None else ""
        oc = f", P(rep | delta) {self.oc[0]:.2f}" if self.oc is not None else ""
        return (f"{self.name}: {f(self.effect)} [{f(self.ci_low)}, {f(self.ci_high)}] "
                f"(MDE {abs(self.mde):.3f}{delta}{seeds}{oc}; {self.status})")


def interval_status(check: Check) -> tuple[str, str]:
    """The status and reason the interval alone gives (`status_and_reason` without `fixed` and `oc`)."""
    low, high = check._side([check.ci_low, check.ci_high])
    if check.n_seeds is not None and check.n_seeds < MIN_SEEDS:
        return "not resolved", f"{check.n_seeds} training seed(s) < {MIN_SEEDS}"
    if not np.isfinite([check.effect, check.ci_low, check.ci_high]).all():
        return "not resolved", "non-finite estimate"
    if low < 0 and high < 0:
        return "not reproduced", "CI on the opposite side"
    if check.delta is not None and (check._side([check.ci_low, check.ci_high], check.matters_at) < 0).all():
        where = "on the claimed side" if low > 0 else "around the threshold"
        return "smaller than delta", f"CI {where}, excluding every effect of at least delta {check.delta:g}"
    if low > 0 and high > 0:
        if check.seed_effects and not (check._side(check.seed_effects) > 0).all():
            return "not resolved", "seeds disagree"
        return "reproduced", "CI on the claimed side"
    if check.delta is not None:
        sign = "+" if check.direction == "greater" else "-"
        return "not resolved", f"CI contains the threshold and threshold {sign} delta"
    return "not resolved", "CI contains the threshold"


def status_and_reason(check: Check) -> tuple[str, str]:
    """The status of `check` and the reason for it: `undecidable at this design` when its construction fixes it or
    its operating characteristic says its outcome is as likely under the hypothesis it would rule out (module
    docstring), else `interval_status`."""
    status, reason = interval_status(check)
    if check.fixed:
        return UNDECIDABLE, f"{check.fixed} (the interval alone: {status})"
    if check.oc is not None and status == "reproduced" and check.oc[1] > MAX_FALSE_PASS:
        return UNDECIDABLE, (f"P(reproduced | effect = 0) = {check.oc[1]:.2f} > {MAX_FALSE_PASS:g} at this design: "
                             f"no effect would pass too (the interval alone: {status})")
    if check.oc is not None and status == "not reproduced" and check.oc[2] > MAX_FALSE_PASS:
        return UNDECIDABLE, (f"P(not reproduced | effect = delta) = {check.oc[2]:.2f} > {MAX_FALSE_PASS:g} at this "
                             f"design: a real effect would fail too (the interval alone: {status})")
    if check.oc is not None and status == "not resolved" and check.oc[0] < MIN_POWER:
        return UNDECIDABLE, (f"P(reproduced | effect = delta) = {check.oc[0]:.2f} < {MIN_POWER:g} at this design "
                             f"(the interval alone: {status})")
    return status, reason


@dataclass(frozen=True)
class Test:
    """One way of testing a claim: its role, what it tests, its primary check (declared in advance: the status)
    and secondary checks (shown, never in the status)."""

    __test__ = False  # not a pytest class

    role: str
    """"paper" (the paper's own design, in its words) or "control" (the alternative it must survive)."""
    name: str
    """The test in words, e.g. "final ES above the GRPO tuned for Pass@1 (the paper's comparison)"."""
    primary: Check
    """The check whose status is the test's."""
    secondary: tuple[Check, ...] = ()
    """Checks shown beside the primary; they never set the status."""

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"Test.role must be one of {ROLES}, got {self.role!r}")

    @property
    def status(self) -> str:
        """The primary check's status."""
        return self.primary.status

    def to_json(self) -> dict:
        """{"role", "name", "status", "reason", "primary": check name, "secondary": [check names]}."""
        return {"role": self.role, "name": self.name, "status": self.status, "reason": self.primary.reason,
                "primary": self.primary.name, "secondary": [c.name for c in self.secondary]}


@dataclass(frozen=True)
class Finding:
    """What a study concludes: a computed status, one sentence, its tests, its evidence and its sanity checks."""

    status: str
    """`finding_status(tests)`."""
    sentence: str
    """The measured result in one sentence (numbers, not adjectives)."""
    checks: tuple[Check, ...]
    """The evidence: every check of every test (primary and secondary), each of which could have failed."""
    sanity: tuple[str, ...] = field(default=())
    """Identities and bookkeeping reported beside the evidence (they cannot fail and never set the status)."""
    kind: str = "claim"
    """"claim" (tests a claim of the paper; counted in the tally) or "setup" (checks a property the setup was built
    to have, e.g. the base's designed habit; shown, never counted)."""
    tests: tuple[Test, ...] = field(default=())
    """The paper's test and its control(s), each with its own status."""

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
        """A JSON-ready dict (each test with its role and status; each check with its computed status)."""
        return {"status": self.status, "kind": self.kind, "sentence": self.sentence, "sanity": list(self.sanity),
                "power": self.power, "tests": [t.to_json() for t in self.tests],
                "checks": [{**asdict(c), "seed_effects": list(c.seed_effects), "status": c.status,
                            "reason": c.reason} for c in self.checks]}


def finding_status(tests) -> str:
    """The status of the paper's test (the first test when none has role "paper"); `not resolved` without tests."""
    tests = tuple(tests)
    paper = [t for t in tests if t.role == "paper"] or list(tests)
    return paper[0].status if paper else "not resolved"


def make_finding(sentence: str, checks=(), sanity=(), kind: str = "claim", tests=None) -> Finding:
    """A `Finding` whose status is its paper test's (`finding_status`); the sentence gets each test's primary
    check described. `tests`: the declared `Test`s; without them the first of `checks` is the primary check of
    one paper test and the rest are its secondaries. `Finding.checks` lists `checks` in their order, then the
    tests' checks not among them."""
    checks = tuple(checks)
    if tests is None:
        tests = (Test("paper", "the claim", checks[0], checks[1:]),) if checks else ()
    tests = tuple(tests)
    every = tuple(dict.fromkeys(list(checks) + [c for t in tests for c in (t.primary, *t.secondary)]))
    parts = [f"{t.role} test ({t.name}): {t.primary.describe()}" for t in tests]
    rest = [c.describe() for c in every if all(c is not t.primary for t in tests)]
    text = "; ".join(([sentence] if sentence else []) + parts + (["secondary: " + "; ".join(rest)] if rest else []))
    return Finding(status=finding_status(tests), sentence=text, checks=every, sanity=tuple(sanity), kind=kind,
                   tests=tests)


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


def _estimate(a: np.ndarray, b: np.ndarray | None, *, seed_axis: bool, method: str = "anova", n_boot: int = 2000,
              rng=None) -> dict:
    """The interval fields of a `Check` of mean(a) - mean(b) on validated arms (`intervals.arms`): effect,
    ci_low, ci_high, mde, seed_effects, n_seeds (`effect_check` explains the seed rules)."""
    if method == "anova":
        interval = anova_interval(a, b)
        low, high, mde = interval.low, interval.high, interval.mde
    else:
        low, high = bootstrap_interval(a, b, n_boot=n_boot, rng=rng)
        mde = mde_from_ci(low, high)
    b_mean = 0.0 if b is None else float(b.mean())
    seed_effects: tuple[float, ...] = ()
    n_seeds = None
    if seed_axis:
        per_a = a.mean(axis=1) - b_mean  # [R_a]
        per_b = [] if b is None or b.shape[0] == 1 else float(a.mean()) - b.mean(axis=1)  # [R_b]
        seed_effects = tuple(float(x) for x in np.concatenate([per_a, per_b]))
        n_seeds = int(a.shape[0]) if b is None or b.shape[0] == 1 else int(min(a.shape[0], b.shape[0]))
    return {"effect": float(a.mean()) - b_mean, "ci_low": low, "ci_high": high, "mde": mde,
            "seed_effects": seed_effects, "n_seeds": n_seeds}


def operating_characteristic(check: Check, *, n_sims: int = OC_SIMS,
                             seed: int = 0) -> tuple[float, float, float] | None:
    """(P(`reproduced` | effect = delta), P(`reproduced` | effect = 0), P(`not reproduced` | effect = delta)) of
    `check` at the design it ran (its seeds and problems), simulated from its own variance components
    (`power.simulated_arms`, true effect at threshold +- delta and at the threshold) through the same interval
    and status rules (`interval_status`); `n_sims` replications each, drawn from (`seed`, the check's name).
    None without a delta, components or at least 2 problems."""
    if check.delta is None or check.components is None or not check.n_problems or check.n_problems < 2:
        return None
    comp = Components(*check.components)
    rng = numpy_rng(seed, "operating_characteristic", check.name)
    rows = check.n_seeds if check.n_seeds is not None else 1
    statuses = {}
    for label, truth in (("delta", check.matters_at), ("null", check.threshold)):
        statuses[label] = [interval_status(replace(check, **_estimate(
            *simulated_arms(comp, max(rows, 1), check.n_problems, truth, rng), seed_axis=check.n_seeds is not None),
            fixed="", oc=None))[0] for _ in range(n_sims)]
    rate = lambda label, status: float(np.mean([s == status for s in statuses[label]]))  # noqa: E731
    return rate("delta", "reproduced"), rate("null", "reproduced"), rate("delta", "not reproduced")


def effect_check(name: str, a, b=None, *, direction: str = "greater", threshold: float = 0.0,
                 n_boot: int = 2000, seed: int = 0, seed_axis: bool = True, delta: float | None = None,
                 paired_seeds: bool = False, method: str = "anova", fixed: str = "", oc_sims: int = OC_SIMS) -> Check:
    """A `Check` of mean(a) - mean(b) (or of mean(a) when `b` is None) with a 95% CI over seeds and problems.

    `a`: [R_a, P] per-seed, per-problem values (e.g. Pass@K); `b`: [R_b, P] on the same P problems, or None.
    `paired_seeds=True`: row r of `a` and of `b` is the same training seed (b has a's shape); the check is then
    on the difference matrix a - b, and each seed's effect is its own row mean of a - b. Otherwise the seeds of
    the arms are independent, and seed effects are each seed of `a` against the mean of `b` and the mean of `a`
    against each seed of `b`.
    `method`: "anova" (default; `intervals.anova_interval`, seed-free, `n_boot` and `seed` unused) or
    "bootstrap" (`intervals.bootstrap_interval` with `n_boot` resamples drawn from (`seed`, `name`)).
    `seed_axis=False` for values whose first axis is not training seeds (one row: a base model, a probe set); the
    check then has `n_seeds = None` and no seed agreement rule. `delta`: the check's smallest effect of interest;
    with one, its operating characteristic is simulated (`operating_characteristic`, `oc_sims` replications per
    true effect; 0 skips it). `fixed`: why its construction fixes the outcome ("" when nothing does).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    a, b = arms(a, b, paired_seeds=paired_seeds)
    rng = numpy_rng(seed, "effect_check", name) if method == "bootstrap" else None
    comp = estimate_components(a, b)  # a, b as `arms` returned them (paired seeds: the difference, b None)
    check = Check(name=name, direction=direction, threshold=float(threshold),
                  delta=None if delta is None else float(delta), fixed=fixed,
                  components=(comp.seed, comp.problem, comp.resid, comp.arms), n_problems=int(a.shape[1]),
                  **_estimate(a, b, seed_axis=seed_axis, method=method, n_boot=n_boot, rng=rng))
    return replace(check, oc=operating_characteristic(check, n_sims=oc_sims, seed=seed)) if oc_sims else check
