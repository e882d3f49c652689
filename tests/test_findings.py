import numpy as np
import pytest

from esreason_lib.findings import (MDE_FACTOR, Check, Finding, combine_status, effect_check, make_finding,
                                   mde_from_ci)


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


def test_combine_status():
    rep, no, unres = check(0.1, 0.2), check(-0.2, -0.1), check(-0.1, 0.1)
    assert combine_status([rep, rep]) == "reproduced"
    assert combine_status([rep, unres]) == "not resolved"
    assert combine_status([rep, unres, no]) == "not reproduced"
    assert combine_status([]) == "not resolved"
    f = make_finding("pass@1 0.2", [rep, unres], sanity=("JS >= 0 in 4/4 (Jensen)",))
    assert f.status == "not resolved" and f.sentence.startswith("pass@1 0.2; c: +0.150")
    assert f.to_json()["checks"][1]["status"] == "not resolved" and f.to_json()["sanity"]


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
    c = effect_check("paired", a, b, n_boot=500)
    assert c.ci_low > 0 and c.ci_high - c.ci_low < 0.02


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
    assert effect_check("x", a, b, n_boot=100) == effect_check("x", a, b, n_boot=100)
    assert effect_check("x", a, b, n_boot=100, seed=1) != effect_check("x", a, b, n_boot=100)
