"""The one status rule (`paper.status`): the current and the registered rule on hand-made checks, the outcomes a
design would not count, and a claim that needs several checks at once."""

import pytest

from esreason_lib.paper.findings import Check, Test, make_finding
from esreason_lib.paper.mde import mde_from_ci
from esreason_lib.paper.status import (
    INTERVAL_OUTCOMES,
    STATUSES,
    UNDECIDABLE,
    combined_status,
    oc_verdict,
    status_and_reason,
    undecidable_outcomes,
)


def check(low, high, oc=None, name="c", **kw):
    return Check(name, (low + high) / 2, low, high, mde_from_ci(low, high), delta=0.05, oc=oc, **kw)


WEAK = (0.3, 0.02, 0.01)  # P(rep | delta) 0.3 < 0.5, a null rarely passes, a real effect rarely fails
LOOSE_NULL = (0.9, 0.4, 0.0)  # a null passes 40% of the time
LOOSE_FAIL = (0.3, 0.02, 0.2)  # a real effect fails 20% of the time


@pytest.mark.parametrize("low,high,oc,current,registered", [
    (0.1, 0.2, WEAK, "reproduced", "reproduced"),  # a pass no null gives counts under both
    (0.1, 0.2, LOOSE_NULL, UNDECIDABLE, UNDECIDABLE),  # a pass a null gives too counts under neither
    (-0.3, -0.1, WEAK, "not reproduced", UNDECIDABLE),  # the change: a weak design's failure now counts
    (-0.3, -0.1, LOOSE_FAIL, UNDECIDABLE, UNDECIDABLE),
    (-0.3, -0.1, (0.9, 0.02, 0.0), "not reproduced", "not reproduced"),
    (-0.02, 0.04, WEAK, "smaller than delta", UNDECIDABLE),  # excludes delta: counts now, not then
    (-0.01, 0.1, WEAK, UNDECIDABLE, UNDECIDABLE),  # open where a real effect would be too
    (-0.01, 0.1, (0.6, 0.02, 0.0), "not resolved", "not resolved"),
    (-0.01, 0.1, None, "not resolved", "not resolved"),  # no operating characteristic: the interval's
])
def test_the_current_and_the_registered_rule(low, high, oc, current, registered):
    c = check(low, high, oc)
    assert status_and_reason(c)[0] == current == c.status
    assert status_and_reason(c, "registered")[0] == registered


def test_a_fixed_outcome_is_undecidable_under_both_rules_and_bad_rules_are_refused():
    fixed = check(0.1, 0.2, fixed="a ceiling")
    assert status_and_reason(fixed) == (UNDECIDABLE, "a ceiling (the interval alone: reproduced)")
    assert status_and_reason(fixed, "registered")[0] == UNDECIDABLE
    with pytest.raises(ValueError, match="rule must be one of"):
        status_and_reason(fixed, "newest")
    with pytest.raises(ValueError, match="outcome must be one of"):
        oc_verdict(UNDECIDABLE, WEAK)


def test_oc_verdict_says_why_and_undecidable_outcomes_lists_what_a_design_would_not_count():
    assert oc_verdict("not reproduced", LOOSE_FAIL).startswith("P(not reproduced | effect = delta) = 0.20 > 0.1")
    assert oc_verdict("reproduced", WEAK) == "" and oc_verdict("not resolved", None) == ""
    assert undecidable_outcomes(WEAK) == ("not resolved",)
    assert undecidable_outcomes(WEAK, rule="registered") == ("not reproduced", "smaller than delta", "not resolved")
    assert undecidable_outcomes((0.9, 0.4, 0.2)) == ("reproduced", "not reproduced")
    assert undecidable_outcomes(None) == () and undecidable_outcomes(None, "a floor") == INTERVAL_OUTCOMES


def test_combined_status_needs_every_part():
    assert combined_status(["reproduced", "reproduced"]) == "reproduced"
    assert combined_status(["reproduced", "smaller than delta"]) == "smaller than delta"
    assert combined_status(["not resolved", UNDECIDABLE, "not reproduced"]) == "not reproduced"
    assert combined_status(["reproduced", "not resolved", UNDECIDABLE]) == UNDECIDABLE
    assert combined_status(["reproduced"]) == "reproduced" and set(STATUSES) >= {combined_status([s]) for s in STATUSES}
    with pytest.raises(ValueError, match="statuses must be"):
        combined_status([])


def test_a_test_with_a_co_primary_check_holds_only_when_both_do():
    lead = check(0.1, 0.2, name="Pass@K above GRPO")
    still = check(-0.005, 0.002, name="Pass@1 above base")  # excludes delta 0.05 around 0: ES did not move
    test = Test("paper", "as the paper", lead, also=(still,))
    assert lead.status == "reproduced" and test.status == "smaller than delta"
    assert test.reason.startswith("needs Pass@1 above base too: smaller than delta (CI around the threshold")
    assert test.to_json()["also"] == ["Pass@1 above base"]
    assert "also" not in Test("paper", "x", lead).to_json()  # earlier records keep their keys
    f = make_finding("s", tests=[test], notes=["ES did not move"])
    assert f.status == "smaller than delta" and f.notes == ("ES did not move",) and "ES did not move" in f.sentence
    assert f.to_json()["notes"] == ["ES did not move"] and "notes" not in make_finding("s", [lead]).to_json()
    assert "paper test (as the paper): Pass@K above GRPO" in f.sentence and " and Pass@1 above base" in f.sentence
