"""The status rules, once: from a check's interval and operating characteristic to one of `STATUSES`.

Every status the project shows comes from `status_and_reason` (a `findings.Check`'s `status`, the claims, the
notebooks) or from `undecidable_outcomes` (`esreason power`'s table), and both read the same `oc_verdict`. A
check's status, in this order:
- `undecidable at this design`: its outcome is fixed by construction (`Check.fixed`: a ceiling, a floor, a delta
  the design cannot reach, regression to the mean), or its operating characteristic (`Check.oc`, simulated by
  `findings.operating_characteristic` from its own variance components at the design it ran) says the outcome the
  interval gave is not rare under the hypothesis it would rule out (`oc_verdict`). Such a check neither supports
  nor contradicts the paper (the reason quotes what the interval alone says);
- `not resolved` when fewer than `MIN_SEEDS` training seeds back a check with a seed axis, or the estimate is not
  finite;
- `not reproduced`: the 95% CI lies entirely on the other side of the threshold;
- `smaller than delta` (read "not above delta"): (with a delta) the CI excludes every effect of at least delta: on
  the claimed side but short of threshold + delta, or around the threshold and short of it;
- `reproduced`: the CI lies entirely on the claimed side of the threshold, every training seed's own point
  estimate too, and (with a delta) the CI still reaches an effect that matters;
- `not resolved`: anything else (the CI contains the threshold, and threshold +- delta with a delta; seeds
  disagree).

Two rules read the operating characteristic (`RULES`). `current` (since f4301ab, 2026-12-05): each outcome counts
when it is rare under the hypothesis it rules out: a pass is undecidable when an effect of 0 passes more than
`MAX_FALSE_PASS` of the time, a failure (`not reproduced`) when an effect of delta fails that often, an open
interval (`not resolved`) when an effect of delta passes less than `MIN_POWER` of the time; `smaller than delta`
excludes delta by its interval and always counts. `registered` (the rule the `frontier` registration was run
under, 4b1606c): a pass as above, and every other outcome undecidable when an effect of delta passes less than
`MIN_POWER` of the time. `papers/preregistration.md`'s Deviations section lists what the change moved.
"""

from __future__ import annotations

import numpy as np

UNDECIDABLE = "undecidable at this design"
STATUSES = ("reproduced", "not reproduced", "smaller than delta", "not resolved", UNDECIDABLE)
"""The outcomes of a check, a test or a finding (rules in the module docstring), in the order tallies show them."""
INTERVAL_OUTCOMES = STATUSES[:4]
"""What an interval alone can say (`interval_status`)."""
RULES = ("current", "registered")
"""The rules that read a check's operating characteristic (module docstring); `current` is the one shown."""
MIN_SEEDS = 3
"""Training seeds a check with a seed axis needs before it can be `reproduced` or `not reproduced`."""
MIN_POWER = 0.5
"""A `not resolved` check (under `registered`: any check that did not pass) whose P(`reproduced` | effect = delta)
at its design is below this is `undecidable at this design`: a real effect would not have passed either."""
MAX_FALSE_PASS = 0.1
"""A check that passed, whose P(`reproduced` | effect = 0) at its design is above this, or failed (`not
reproduced`, rule `current`), whose P(`not reproduced` | effect = delta) is above this, is `undecidable at this
design`: the hypothesis it would rule out gives that outcome too (a nominal 95% one-sided interval gives 0.025)."""


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def interval_status(check) -> tuple[str, str]:
    """The status and reason the interval of `check` (a `findings.Check`) alone gives: one of
    `INTERVAL_OUTCOMES`."""
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


def oc_verdict(outcome: str, oc: tuple[float, float, float] | None, rule: str = "current") -> str:
    """Why the operating characteristic `oc` (P(rep | delta), P(rep | 0), P(not rep | delta)) makes the interval
    `outcome` `undecidable at this design` under `rule` ("" when the outcome stands, or without an `oc`)."""
    _check_rule(rule)
    if outcome not in INTERVAL_OUTCOMES:
        raise ValueError(f"outcome must be one of {INTERVAL_OUTCOMES}, got {outcome!r}")
    if oc is None:
        return ""
    power, false_pass, false_fail = oc
    if outcome == "reproduced":
        return (f"P(reproduced | effect = 0) = {false_pass:.2f} > {MAX_FALSE_PASS:g} at this design: no effect would "
                "pass too") if false_pass > MAX_FALSE_PASS else ""
    if rule == "current" and outcome == "not reproduced" and false_fail > MAX_FALSE_PASS:
        return (f"P(not reproduced | effect = delta) = {false_fail:.2f} > {MAX_FALSE_PASS:g} at this design: a real "
                "effect would fail too")
    if (rule == "registered" or outcome == "not resolved") and power < MIN_POWER:
        return f"P(reproduced | effect = delta) = {power:.2f} < {MIN_POWER:g} at this design"
    return ""


def status_and_reason(check, rule: str = "current") -> tuple[str, str]:
    """The status of `check` (a `findings.Check`) under `rule` and the reason for it: `undecidable at this design`
    when its construction fixes it or `oc_verdict` says so, else `interval_status`."""
    _check_rule(rule)
    status, reason = interval_status(check)
    if check.fixed:
        return UNDECIDABLE, f"{check.fixed} (the interval alone: {status})"
    why = oc_verdict(status, check.oc, rule)
    return (UNDECIDABLE, f"{why} (the interval alone: {status})") if why else (status, reason)


def undecidable_outcomes(oc: tuple[float, float, float] | None, fixed: str = "",
                         rule: str = "current") -> tuple[str, ...]:
    """The interval outcomes a check with operating characteristic `oc` (and `fixed`) would show as `undecidable
    at this design` under `rule`: every outcome when its construction fixes it, none without an `oc`."""
    if fixed:
        return INTERVAL_OUTCOMES
    return tuple(o for o in INTERVAL_OUTCOMES if oc_verdict(o, oc, rule))


def combined_status(statuses) -> str:
    """The status of a claim that needs every one of several checks (an intersection-union test): `reproduced` only
    when all are; otherwise the first of `not reproduced`, `smaller than delta`, `undecidable at this design`,
    `not resolved` that any of them has (one part against the paper, or too small, decides the whole)."""
    statuses = tuple(statuses)
    if not statuses or any(s not in STATUSES for s in statuses):
        raise ValueError(f"statuses must be one or more of {STATUSES}, got {statuses!r}")
    for status in ("not reproduced", "smaller than delta", UNDECIDABLE, "not resolved"):
        if status in statuses:
            return status
    return "reproduced"
