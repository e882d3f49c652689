"""A finding is a test: each claim of the paper becomes `Check`s whose status is computed from data.

Every study ends in `finding(tables) -> Finding`: a status, one sentence, its tests (each one primary `Check`
declared in advance, with secondary checks shown beside it) and the sanity checks. The rules live here (the status
rule itself in `status`):

- A `Check` is one effect the paper predicts, with a direction: `effect > threshold` ("greater") or
  `effect < threshold` ("less"); the threshold is 0 for "A beats B" and a margin for "no worse than". Its
  `delta` (fixed in advance, optional) is the smallest effect of interest: an effect matters when it lies at
  least `delta` beyond the threshold on the claimed side (threshold + delta for "greater", threshold - delta
  for "less"). Its status (`STATUSES`) is `status.status_and_reason`'s, the one status rule of the project
  (its module docstring); `power_report` marks a design whose checks cannot reach `reproduced` at all.
- A `Test` is one way of testing a claim, with a `role`: "paper" (the paper's own design, in its words) or
  "control" (the alternative explanation it must survive). Its status is its primary check's, declared in
  advance (`studies.registry`), combined with any co-primary check the claim itself also needs (`Test.also`:
  `status.combined_status`, all must hold); secondary checks are shown and never enter it.
- A `Finding`'s status is its paper test's (the first test when none has the paper's role).
- Sanity checks (identities that cannot fail: AM-GM, Jensen, algebra) are reported beside the evidence and never
  enter the status.
- Uncertainty (`effect_check`) treats seeds and problems as crossed random factors, paired by problem (the
  arms were scored on the same problems) and, with `paired_seeds`, by seed. The default interval is the
  crossed-ANOVA t interval of `intervals` (variance components by the method of moments, Satterthwaite df);
  `method="bootstrap"` keeps the hierarchical bootstrap (seeds of each arm with replacement, then one set of
  problems shared by both arms), which counts the seed x problem residual twice and under-covers with 3 seeds.
- The minimum detectable effect is (t_{0.975, df} + t_{0.80, df}) * SE for the ANOVA interval, and
  `mde.MDE_FACTOR * SE` with SE = CI width / (2 * 1.96) for a bootstrap or hand-made CI (`mde.mde_from_ci`): the
  smallest true effect this design detects with 80% power in a two-sided test at the 5% level. A check is
  powered when its MDE is below its delta; `mde.power_statement` says which checks of a finding are. Deciding
  between 0 and delta takes more: a CI decides when its whole width (~3.92 SE) is below delta (`power`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from esreason_lib.paper.intervals import METHODS, anova_interval, arms, bootstrap_interval
from esreason_lib.paper.mde import mde_from_ci, power_statement
from esreason_lib.paper.power import Components, estimate_components, simulated_arms
from esreason_lib.paper.status import STATUSES, combined_status, interval_status, status_and_reason
from esreason_lib.seeding import numpy_rng

ROLES = ("paper", "control")
"""What a `Test` is: the paper's own test (its design, its words) or the control that could explain it away."""
OC_SIMS = 200
"""Simulated replications per true effect behind a check's operating characteristic (SE of a rate <= 0.035)."""
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


@dataclass(frozen=True)
class Test:
    """One way of testing a claim: its role, what it tests, its primary check (declared in advance: the status),
    any co-primary checks the claim also needs, and secondary checks (shown, never in the status)."""

    __test__ = False  # not a pytest class

    role: str
    """"paper" (the paper's own design, in its words) or "control" (the alternative it must survive)."""
    name: str
    """The test in words, e.g. "final ES above the GRPO tuned for Pass@1 (the paper's comparison)"."""
    primary: Check
    """The check whose status is the test's (with `also`'s)."""
    secondary: tuple[Check, ...] = ()
    """Checks shown beside the primary; they never set the status."""
    also: tuple[Check, ...] = ()
    """Co-primary checks the claim itself needs besides the primary (01: ES's Pass@1 above the base as well as its
    Pass@K above GRPO's): the test is `reproduced` only when every one is (`status.combined_status`)."""

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"Test.role must be one of {ROLES}, got {self.role!r}")

    @property
    def status(self) -> str:
        """`status.combined_status` of the primary and `also` checks (the primary's status when `also` is empty)."""
        return combined_status(c.status for c in (self.primary, *self.also))

    @property
    def reason(self) -> str:
        """The primary's reason; when a co-primary check sets the status instead, that check's name, status and
        reason (e.g. "needs ES Pass@1 above base too: smaller than delta (CI around the threshold, ...)")."""
        if self.status == self.primary.status:
            return self.primary.reason
        setter = next(c for c in self.also if c.status == self.status)
        return f"needs {setter.name} too: {setter.status} ({setter.reason})"

    def to_json(self) -> dict:
        """{"role", "name", "status", "reason", "primary": check name, "also": [check names], "secondary": [check
        names]} ("also" only when the test has co-primary checks: earlier records keep their bytes)."""
        also = {"also": [c.name for c in self.also]} if self.also else {}
        return {"role": self.role, "name": self.name, "status": self.status, "reason": self.reason,
                "primary": self.primary.name, **also, "secondary": [c.name for c in self.secondary]}


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
    notes: tuple[str, ...] = field(default=())
    """What a reader needs beside the statuses, shown in every row of the finding (a tuned arm at the edge of its
    grid; a part of the claim that did not move); empty for most findings."""

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
        notes = {"notes": list(self.notes)} if self.notes else {}  # absent when empty: earlier records keep their bytes
        return {"status": self.status, "kind": self.kind, "sentence": self.sentence, "sanity": list(self.sanity),
                **notes,
                "power": self.power, "tests": [t.to_json() for t in self.tests],
                "checks": [{**asdict(c), "seed_effects": list(c.seed_effects), "status": c.status,
                            "reason": c.reason} for c in self.checks]}


def finding_status(tests) -> str:
    """The status of the paper's test (the first test when none has role "paper"); `not resolved` without tests."""
    tests = tuple(tests)
    paper = [t for t in tests if t.role == "paper"] or list(tests)
    return paper[0].status if paper else "not resolved"


def make_finding(sentence: str, checks=(), sanity=(), kind: str = "claim", tests=None, notes=()) -> Finding:
    """A `Finding` whose status is its paper test's (`finding_status`); the sentence gets each test's primary
    check described. `tests`: the declared `Test`s; without them the first of `checks` is the primary check of
    one paper test and the rest are its secondaries. `Finding.checks` lists `checks` in their order, then the
    tests' checks not among them. `notes`: `Finding.notes`, also appended to the sentence."""
    checks = tuple(checks)
    if tests is None:
        tests = (Test("paper", "the claim", checks[0], checks[1:]),) if checks else ()
    tests = tuple(tests)
    every = tuple(dict.fromkeys(list(checks) + [c for t in tests for c in (t.primary, *t.also, *t.secondary)]))
    parts = [f"{t.role} test ({t.name}): " + " and ".join(c.describe() for c in (t.primary, *t.also)) for t in tests]
    rest = [c.describe() for c in every if all(c is not p for t in tests for p in (t.primary, *t.also))]
    text = "; ".join(([sentence] if sentence else []) + list(notes) + parts
                     + (["secondary: " + "; ".join(rest)] if rest else []))
    return Finding(status=finding_status(tests), sentence=text, checks=every, sanity=tuple(sanity), kind=kind,
                   tests=tests, notes=tuple(notes))


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


def redraw_keep(checks, *, n_sims: int = OC_SIMS, seed: int = 0) -> float | None:
    """P(a full redraw gives the same status): `checks` (a test's primary and co-primary checks, whose
    `status.combined_status` is the test's) are each drawn again at the design they ran (their seeds and
    problems) from their own variance components with the true effect at their estimate (a plug-in: a check on a
    boundary reads about one half), their operating characteristic and `fixed` kept, and put through the same
    status rule; the parts are drawn independently. `n_sims` replications drawn from `seed` alone (the same draws
    whatever the checks are named).
    None when a check has no components or fewer than 2 problems."""
    checks = tuple(checks)
    if not checks or any(c.components is None or not c.n_problems or c.n_problems < 2 for c in checks):
        return None
    rng = numpy_rng(seed, "redraw_keep")
    now = combined_status(c.status for c in checks)
    same = 0
    for _ in range(n_sims):
        drawn = [status_and_reason(replace(c, **_estimate(
            *simulated_arms(Components(*c.components), max(c.n_seeds or 1, 1), c.n_problems, c.effect, rng),
            seed_axis=c.n_seeds is not None)))[0] for c in checks]
        same += combined_status(drawn) == now
    return same / n_sims


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
