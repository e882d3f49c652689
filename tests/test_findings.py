import numpy as np
import pytest
from scipy import stats

from esreason_lib.paper.findings import (
    Check,
    Finding,
    Test,
    effect_check,
    finding_status,
    make_finding,
    operating_characteristic,
)
from esreason_lib.paper.intervals import REGIMES, anova_interval, coverage, satterthwaite
from esreason_lib.paper.mde import MDE_FACTOR, mde_from_ci, power_statement
from esreason_lib.paper.status import STATUSES, UNDECIDABLE


def check(low, high, effect=None, **kw):
    effect = (low + high) / 2 if effect is None else effect
    return Check("c", effect, low, high, mde_from_ci(low, high), **kw)


@pytest.mark.parametrize("low,high,direction,threshold,status", [
    (0.1, 0.3, "greater", 0.0, "reproduced"),
    (-0.3, -0.1, "greater", 0.0, "not reproduced"),
    (-0.1, 0.3, "greater", 0.0, "not resolved"),
    (0.0, 0.3, "greater", 0.0, "not resolved"),       # touching the threshold is not clearing it
    (-0.3, -0.1, "less", 0.0, "reproduced"),
    (0.1, 0.3, "less", 0.0, "not reproduced"),
    (-0.04, 0.02, "greater", -0.05, "reproduced"),    # a "no worse than -0.05" margin
    (-0.09, -0.06, "greater", -0.05, "not reproduced"),
])
def test_status_rules(low, high, direction, threshold, status):
    assert check(low, high, direction=direction, threshold=threshold).status == status


def test_seed_rules():
    assert check(0.1, 0.3, seed_effects=(0.2, 0.1, -0.01), n_seeds=3).status == "not resolved"
    assert check(0.1, 0.3, seed_effects=(0.2, 0.1, -0.01), n_seeds=3).reason == "seeds disagree"
    assert check(0.1, 0.3, seed_effects=(0.2, 0.1, 0.3), n_seeds=3).status == "reproduced"
    two = check(0.1, 0.3, seed_effects=(0.2, 0.1), n_seeds=2)
    assert two.status == "not resolved" and "2 training seed" in two.reason
    assert check(0.1, 0.3, n_seeds=None).status == "reproduced"  # no seed axis: no seed rule
    assert check(float("nan"), float("nan"), effect=0.2).status == "not resolved"


def test_bad_check_fields_are_named():
    with pytest.raises(ValueError, match="direction"):
        check(0.1, 0.2, direction="up")
    with pytest.raises(ValueError, match="ci_low"):
        Check("c", 0.0, 0.3, 0.1, 0.1)
    with pytest.raises(ValueError, match="status"):
        Finding(status="yes", sentence="", checks=())


def test_a_finding_takes_its_paper_tests_primary_status_and_never_ands_the_secondaries():
    rep, no, unres = check(0.1, 0.2), check(-0.2, -0.1), check(-0.1, 0.1)
    paper, control = Test("paper", "as the paper tests it", rep, (no, unres)), Test("control", "matched", no)
    assert paper.status == "reproduced" and control.status == "not reproduced"
    assert finding_status([control, paper]) == "reproduced"  # the paper's test, wherever it stands
    assert finding_status([control]) == "not reproduced" and finding_status([]) == "not resolved"
    f = make_finding("pass@1 0.2", [], sanity=("JS >= 0 in 4/4 (Jensen)",), tests=[paper, control])
    assert f.status == "reproduced" and len(f.checks) == 3  # rep, no, unres once each
    assert f.sentence.startswith("pass@1 0.2; paper test (as the paper tests it): c: +0.150")
    record = f.to_json()
    assert [t["role"] for t in record["tests"]] == ["paper", "control"] and record["tests"][1]["status"] == \
        "not reproduced" and record["tests"][0]["secondary"] == ["c", "c"] and record["sanity"]
    legacy = make_finding("x", [unres, rep])  # no declared tests: the first check is the primary
    assert legacy.status == "not resolved" and legacy.tests[0].secondary == (rep,)
    with pytest.raises(ValueError, match="role"):
        Test("mechanism", "x", rep)


def test_mde_is_power_scaled_standard_error():
    # CI half-width 1.96 * SE = 0.0392 -> SE 0.02 -> MDE 2.80 * 0.02
    assert mde_from_ci(-0.0392, 0.0392) == pytest.approx(MDE_FACTOR * 0.02, rel=1e-4)
    assert MDE_FACTOR == pytest.approx(2.8016, abs=1e-3)


def test_effect_check_constant_shift_is_exact():
    rng = np.random.default_rng(0)
    b = rng.random((3, 50))
    c = effect_check("shift", b + 0.1, b, n_boot=200)
    # paired by problem and the same seeds' values shifted: every resample of a - b is 0.1 up to seed draws
    assert c.effect == pytest.approx(0.1)
    assert c.n_seeds == 3 and len(c.seed_effects) == 6
    assert c.status == "reproduced"


def test_effect_check_pairing_beats_unpaired_noise():
    """Problems vary a lot but the two arms differ by a small constant: pairing resolves it."""
    rng = np.random.default_rng(1)
    difficulty = rng.random(200)  # [P]
    b = difficulty[None] + 0.01 * rng.standard_normal((3, 200))
    a = b + 0.02
    c = effect_check("paired", a, b, paired_seeds=True)  # row r of a is row r of b shifted: the same seed
    assert c.ci_low > 0 and c.ci_high - c.ci_low < 0.02
    assert c.seed_effects == pytest.approx((0.02,) * 3) and c.n_seeds == 3


def test_effect_check_no_effect_is_not_resolved_and_seed_variance_counts():
    rng = np.random.default_rng(2)
    a = rng.random((3, 100))
    b = a[::-1].copy()  # same problems, seeds permuted: no true difference
    assert effect_check("null", a, b, n_boot=300).status == "not resolved"
    # seeds far apart widen the interval: one seed at +0.3, two at -0.1
    spread = np.stack([np.full(40, 0.3), np.full(40, -0.1), np.full(40, -0.1)])
    wide = effect_check("seeds", spread, n_boot=300)
    assert wide.ci_low < 0 < wide.ci_high
    assert wide.status == "not resolved"


def test_effect_check_without_seed_axis_and_shape_errors():
    c = effect_check("base", np.array([[1.0, 1.0, 0.0, 1.0]]), seed_axis=False, threshold=0.5, n_boot=200)
    assert c.n_seeds is None and c.seed_effects == () and c.effect == pytest.approx(0.75)
    with pytest.raises(ValueError, match="same problems"):
        effect_check("x", np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"\[seeds, problems\]"):
        effect_check("x", np.zeros(3))


def test_effect_check_is_deterministic_in_name_and_seed():
    rng = np.random.default_rng(3)
    a, b = rng.random((3, 30)), rng.random((3, 30))
    boot = dict(n_boot=100, method="bootstrap")
    assert effect_check("x", a, b, **boot) == effect_check("x", a, b, **boot)
    assert effect_check("x", a, b, seed=1, **boot) != effect_check("x", a, b, **boot)
    assert effect_check("x", a, b, seed=1) == effect_check("x", a, b)  # the ANOVA interval draws nothing
    with pytest.raises(ValueError, match="method"):
        effect_check("x", a, b, method="jackknife")


# ------------------------------------------------------------------------------------------ delta


@pytest.mark.parametrize("low,high,direction,threshold,status", [
    (0.06, 0.10, "greater", 0.0, "reproduced"),
    (0.01, 0.10, "greater", 0.0, "reproduced"),         # on the claimed side and reaching effects that matter
    (0.01, 0.04, "greater", 0.0, "smaller than delta"),  # real but short of delta: the paper's side, too small
    (-0.02, 0.04, "greater", 0.0, "smaller than delta"),  # around 0, excludes every effect >= delta
    (-0.02, 0.06, "greater", 0.0, "not resolved"),      # contains both 0 and delta
    (-0.02, 0.05, "greater", 0.0, "not resolved"),      # touching threshold + delta does not exclude it
    (-0.10, -0.02, "greater", 0.0, "not reproduced"),   # the other side of 0: the only `not reproduced`
    (-0.10, -0.06, "less", 0.0, "reproduced"),
    (-0.04, 0.02, "less", 0.0, "smaller than delta"),
    (-0.06, 0.02, "less", 0.0, "not resolved"),
    (-0.04, -0.01, "less", 0.0, "smaller than delta"),
    (-0.04, -0.03, "greater", -0.05, "smaller than delta"),  # above the margin -0.05 but short of -0.05 + 0.05
])
def test_delta_status_rules(low, high, direction, threshold, status):
    c = check(low, high, direction=direction, threshold=threshold, delta=0.05)
    assert c.status == status
    assert check(low, high, direction=direction, threshold=threshold, delta=None).status == {
        0.0: {(0.01, 0.04): "reproduced", (-0.02, 0.04): "not resolved"}}.get(threshold, {}).get(
        (low, high), check(low, high, direction=direction, threshold=threshold).status)


def test_delta_reasons_seed_rules_and_errors():
    assert check(0.01, 0.04, delta=0.05).reason == ("CI on the claimed side, excluding every effect of at least "
                                                    "delta 0.05")
    assert "around the threshold" in check(-0.01, 0.04, delta=0.05).reason
    assert check(-0.02, 0.06, delta=0.05).reason == "CI contains the threshold and threshold + delta"
    assert check(-0.06, 0.02, direction="less", delta=0.05).reason.endswith("threshold - delta")
    assert check(0.01, 0.1, delta=0.05, seed_effects=(0.1, -0.01, 0.2), n_seeds=3).reason == "seeds disagree"
    assert check(0.01, 0.04, delta=0.05, n_seeds=2).status == "not resolved"  # MIN_SEEDS first
    for bad in (0.0, -0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="delta"):
            check(0.1, 0.2, delta=bad)
    with pytest.raises(ValueError, match="Check.oc"):
        check(0.1, 0.2, oc=(0.5, 1.5, 0.0))


def test_undecidable_when_construction_fixes_it_or_the_design_cannot_reach_reproduced():
    fixed = check(0.1, 0.2, delta=0.05, fixed="base Pass@16 >= 0.95 on sorting: a ceiling")
    assert fixed.status == UNDECIDABLE and fixed.reason == ("base Pass@16 >= 0.95 on sorting: a ceiling (the "
                                                            "interval alone: reproduced)")
    weak = check(-0.01, 0.1, delta=0.05, oc=(0.3, 0.02, 0.01))  # not resolved where a real effect would be too
    assert weak.status == UNDECIDABLE and weak.reason.startswith("P(reproduced | effect = delta) = 0.30 < 0.5")
    assert check(-0.01, 0.1, delta=0.05, oc=(0.6, 0.02, 0.01)).status == "not resolved"  # it could have passed
    # a failure counts when a real effect rarely gives it, however low the power to pass ...
    assert check(-0.3, -0.1, delta=0.05, oc=(0.3, 0.02, 0.01)).status == "not reproduced"
    assert check(-0.3, -0.1, delta=0.05, oc=(0.9, 0.02, 0.0)).status == "not reproduced"
    wrong = check(-0.3, -0.1, delta=0.05, oc=(0.3, 0.02, 0.2))  # ... not when a real effect gives it too
    assert wrong.status == UNDECIDABLE and wrong.reason.startswith("P(not reproduced | effect = delta) = 0.20 > 0.1")
    assert check(-0.02, 0.04, delta=0.05, oc=(0.1, 0.02, 0.0)).status == "smaller than delta"  # excludes delta
    assert check(0.1, 0.2, delta=0.05, oc=(0.3, 0.02, 0.0)).status == "reproduced"  # a pass no null would give
    loose = check(0.1, 0.2, delta=0.05, oc=(0.9, 0.4, 0.0))  # a pass no effect would give too
    assert loose.status == UNDECIDABLE and loose.reason.startswith("P(reproduced | effect = 0) = 0.40 > 0.1")
    assert "P(rep | delta) 0.90" in check(0.1, 0.2, delta=0.05, oc=(0.9, 0.02, 0.0)).describe()


def _arms(rng, effect, sd_seed=0.02, sd_resid=0.3, n_seeds=3, n_problems=400):
    problem = rng.normal(0, 0.3, n_problems)
    a = effect + problem + rng.normal(0, sd_seed, (n_seeds, 1)) + rng.normal(0, sd_resid, (n_seeds, n_problems))
    b = problem + rng.normal(0, sd_seed, (n_seeds, 1)) + rng.normal(0, sd_resid, (n_seeds, n_problems))
    return a, b


def test_operating_characteristic_tells_a_real_effect_from_none():
    """From the check's own components at its design: a delta the design resolves is reproduced most of the time
    when true and rarely when the effect is 0; the unpaired, paired and one-arm kinds each simulate."""
    rng = np.random.default_rng(7)
    a, b = _arms(rng, 0.1)
    big = effect_check("two arms", a, b, delta=0.1)
    p_delta, p_null, p_wrong = big.oc
    assert p_delta > 0.5 and p_null <= 0.1 and p_wrong <= 0.05
    assert big.oc == operating_characteristic(big)  # deterministic in the check's name
    small = effect_check("two arms", a, b, delta=0.01)  # a delta the design cannot reach ...
    assert small.oc[0] < 0.5 and small.status == "reproduced"  # ... but this pass fails under the null: it counts
    wrong_side = effect_check("two arms", b, a, delta=0.01)  # an effect of -0.1: rare when the truth is +0.01
    assert wrong_side.oc[0] < 0.5 and wrong_side.oc[2] <= 0.1 and wrong_side.status == "not reproduced"
    near = effect_check("two arms", a - 0.1, b, delta=0.01)  # no effect, unresolved: a real 0.01 would be too
    assert near.status in ("not resolved", UNDECIDABLE) and (near.status == UNDECIDABLE) == (near.oc[0] < 0.5)
    paired = effect_check("paired", a, b, paired_seeds=True, delta=0.1)
    one_arm = effect_check("one arm", a - b, delta=0.1)
    base = effect_check("base", a, b[:1], delta=0.1)
    for c in (paired, one_arm, base):
        assert c.oc[0] > 0.5 and c.oc[1] <= 0.1, (c.name, c.oc)
    assert effect_check("no delta", a, b).oc is None and effect_check("skip", a, b, delta=0.1, oc_sims=0).oc is None


@pytest.mark.parametrize("effect,delta,direction,status", [
    (0.15, 0.1, "greater", "reproduced"),
    (-0.15, 0.1, "greater", "not reproduced"),
    (0.04, 0.15, "greater", "smaller than delta"),
    (0.015, 0.035, "greater", "not resolved"),
    (-0.15, 0.1, "less", "reproduced"),
    (0.15, 0.1, "less", "not reproduced"),
])
def test_synthetic_results_drive_a_check_to_every_status(effect, delta, direction, status):
    a, b = _arms(np.random.default_rng(8), effect, n_problems=2000)
    c = effect_check("drive", a, b, delta=delta, direction=direction)
    assert c.oc[0] >= 0.5 and c.status == status, (c.describe(), c.reason)


def test_every_status_is_reached():
    a, b = _arms(np.random.default_rng(8), 0.15, n_problems=2000)
    reached = {effect_check("x", a, b, delta=d).status for d in (0.1, 0.02)} | {
        effect_check("x", b, a, delta=0.1).status, effect_check("x", a, b, delta=0.1, fixed="ceiling").status,
        effect_check("x", a, b, delta=0.4).status, effect_check("x", a - 0.135, b, delta=0.035).status}
    assert reached == set(STATUSES), reached


def test_describe_power_and_effect_check_pass_delta():
    c = check(-0.0392, 0.0392, delta=0.05)  # MDE 2.80 * 0.02 = 0.056 > delta
    assert "MDE 0.056, delta 0.050" in c.describe() and c.powered is False
    assert check(-0.0392, 0.0392, delta=0.06).powered and check(0.1, 0.2).powered is None
    assert power_statement([check(0.1, 0.2)]) == "power not assessed: none of 1 checks fixes a delta"
    text = power_statement([c, check(-0.0392, 0.0392, delta=0.06), check(0.1, 0.2)])
    assert text == ("1 of 2 checks with a delta have MDE < delta; underpowered: c (MDE 0.056 vs delta 0.050); "
                    "1 without a delta")
    f = make_finding("", [c])
    assert f.power.startswith("0 of 1") and f.to_json()["power"] == f.power and f.to_json()["checks"][0]["delta"]
    rng = np.random.default_rng(4)
    e = effect_check("d", rng.random((3, 40)), rng.random((3, 40)), delta=0.1)
    assert e.delta == 0.1 and "delta 0.100" in e.describe()


# ------------------------------------------------------------------------------------------ intervals


def test_identical_arms_with_shared_seeds_have_a_zero_interval():
    a = np.random.default_rng(5).random((3, 200)) + np.array([[0.0], [0.1], [0.2]])  # [3, 200], seeds apart
    for method in ("anova", "bootstrap"):
        c = effect_check("same", a, a.copy(), paired_seeds=True, method=method, n_boot=200)
        assert (c.effect, c.ci_low, c.ci_high, c.mde) == (0.0, 0.0, 0.0, 0.0)
    assert effect_check("same", a, a.copy()).ci_high > 0.1  # unpaired: each arm's seed spread counts
    with pytest.raises(ValueError, match="paired_seeds"):
        effect_check("x", a, a[:2], paired_seeds=True)


def test_anova_interval_hand_computed():
    # one arm, seed effects only: row means 1 and 3, SE of their mean sd / sqrt(2) = 1, t on R - 1 = 1 df
    a = np.array([[1.0, 1.0], [3.0, 3.0]])
    one = anova_interval(a)
    t975, t80 = stats.t.ppf(0.975, 1), stats.t.ppf(0.8, 1)
    assert (one.estimate, one.se, one.df) == (2.0, 1.0, 1.0)
    assert (one.low, one.high, one.mde) == pytest.approx((2 - t975, 2 + t975, t975 + t80))
    # two unpaired arms: d_p = (2, 1), S_d^2 / P = 0.5 / 2; a's seed term MS_seed / (R P) = 4 / 4; b has none
    two = anova_interval(a, np.array([[0.0, 1.0], [0.0, 1.0]]))
    assert two.estimate == 1.5 and two.se ** 2 == pytest.approx(1.25)
    assert two.df == pytest.approx(1.25 ** 2 / (0.25 ** 2 / 1 + 1.0 ** 2 / 1))
    # crossed ANOVA identity on random data: Var = (MS_seed + MS_problem - MS_resid) / (R P) when unclipped
    x = np.random.default_rng(6).standard_normal((4, 7)) + np.arange(4)[:, None]
    r, p = x.shape
    rows, cols, g = x.mean(1), x.mean(0), x.mean()
    ms_s, ms_q = p * np.sum((rows - g) ** 2) / (r - 1), r * np.sum((cols - g) ** 2) / (p - 1)
    ms_e = np.sum((x - rows[:, None] - cols + g) ** 2) / ((r - 1) * (p - 1))
    assert anova_interval(x).se ** 2 == pytest.approx((ms_s + ms_q - ms_e) / (r * p))
    assert np.isnan(anova_interval([[1.0]]).high)  # one seed, one problem: nothing to estimate a spread from


def test_satterthwaite_df_is_floored_at_the_least_reliable_positive_term():
    assert satterthwaite([(1.0, 2.0), (1.0, 2.0)]) == (2.0, 4.0)
    assert satterthwaite([(1.0, 2.0), (-0.99, 1000.0)])[1] == 2.0  # raw df would be ~1e-4
    assert satterthwaite([(0.0, 2.0)]) == (0.0, float("inf")) and np.isnan(satterthwaite([])[0])


@pytest.mark.parametrize("regime", list(REGIMES))
@pytest.mark.parametrize("two_arms", [True, False])
def test_anova_interval_covers_95_percent(regime, two_arms):
    """Coverage of 0 (the true effect) over 500 simulations per design, R in {3, 10} x P in {100, 500}: pooled
    over the designs within [0.92, 0.98], each design within [0.90, 0.99] (500 draws: SE ~0.01)."""
    cover = [coverage("anova", r, p, *REGIMES[regime], two_arms=two_arms, n_sims=500, seed=i)
             for i, (r, p) in enumerate([(3, 100), (3, 500), (10, 100), (10, 500)])]
    assert 0.92 <= np.mean(cover) <= 0.98 and all(0.90 <= c <= 0.99 for c in cover), cover


def test_bootstrap_under_covers_with_three_seeds_when_seeds_dominate():
    assert coverage("bootstrap", 3, 100, *REGIMES["seed-dominant"], n_sims=200, n_boot=200) < 0.9


def test_crossed_resample_draws_rows_then_shared_columns():
    from esreason_lib.paper.intervals import crossed_resample

    rows, cols = crossed_resample(np.random.default_rng(0), 500, 3, 7)
    assert rows.shape == (500, 3) and cols.shape == (500, 7)
    assert set(np.unique(rows)) == {0, 1, 2} and set(np.unique(cols)) == set(range(7))
    again = np.random.default_rng(0)
    assert np.array_equal(rows, again.integers(0, 3, size=(500, 3)))  # rows first: one stream, one order
    with pytest.raises(ValueError, match="n_boot"):
        crossed_resample(np.random.default_rng(0), 0, 3, 7)


def test_redraw_keep_is_high_far_from_a_boundary_and_about_half_on_one():
    from esreason_lib.paper.findings import redraw_keep

    rng = np.random.default_rng(3)
    a, b = _arms(rng, 0.0)
    base = effect_check("two arms", a, b)
    se = (base.ci_high - base.ci_low) / (2 * 1.96)
    far = effect_check("far", a + 10 * se, b)
    edge = effect_check("edge", a + (base.ci_high - 2 * base.effect), b)  # the CI's low end sits on 0
    assert far.status == "reproduced" and redraw_keep([far], n_sims=100) > 0.95
    assert abs(edge.ci_low) < 1e-9 and 0.2 < redraw_keep([edge], n_sims=100) < 0.8
    assert redraw_keep([far, far], n_sims=20) == redraw_keep([far], n_sims=20)  # both parts hold: the same
    assert redraw_keep([check(0.1, 0.2)]) is None  # a hand-made check has no components
