import numpy as np
import pytest
from scipy import stats

from esreason_lib.paper.intervals import anova_interval
from esreason_lib.paper.power import (
    Components,
    Cost,
    cheapest_design,
    design_mde,
    design_se,
    estimate_components,
    power_table,
    simulated_arms,
)


def t_mde(df, se):
    return (stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * se


def test_estimate_components_hand_computed():
    a = np.array([[1.0, 1.0], [3.0, 3.0]])  # seeds 1 and 3, no problem or residual spread
    assert estimate_components(a) == Components(seed=2.0, problem=0.0, resid=0.0, arms=1)
    # b: one seed pattern repeated (no seed spread, no residual); d_p = (2, 1): S_d^2 = 0.5 is problem variance
    assert estimate_components(a, np.array([[0.0, 1.0], [0.0, 1.0]])) == Components(2.0, 0.5, 0.0, arms=2)
    # a base model (one row) has no seeds: arms counts only a
    assert estimate_components(a, np.array([[0.0, 1.0]])).arms == 1
    paired = estimate_components(a, a + 0.3, paired_seeds=True)  # the difference matrix is constant
    assert (paired.seed, paired.problem, paired.resid, paired.arms) == pytest.approx((0.0, 0.0, 0.0, 1))


def test_components_reproduce_the_observed_interval():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 60)) + rng.standard_normal((4, 1)) + rng.standard_normal(60)
    b = rng.standard_normal((4, 60)) + rng.standard_normal((4, 1))
    for arms in ((a,), (a, b)):
        assert estimate_components(*arms).variance(4, 60) == pytest.approx(anova_interval(*arms).se ** 2)
    # one arm: the design's df at the observed mean squares is the interval's (two arms: split equally, not equal)
    assert design_se(estimate_components(a), 4, 60) == pytest.approx((anova_interval(a).se, anova_interval(a).df))


def test_design_mde_hand_computed():
    seeds_only = Components(seed=1.0, problem=0.0, resid=0.0)
    assert design_se(seeds_only, 3, 100) == pytest.approx((np.sqrt(1 / 3), 2.0))
    assert design_mde(seeds_only, 3, 100) == pytest.approx(t_mde(2, np.sqrt(1 / 3)))  # 3.0966
    assert design_mde(seeds_only, 3, 100) == pytest.approx(3.0966, abs=1e-4)
    resid_only = Components(seed=0.0, problem=0.0, resid=1.0)
    assert design_se(resid_only, 4, 50) == pytest.approx((np.sqrt(1 / 200), 49.0))
    problems_only = Components(seed=0.0, problem=1.0, resid=0.0)
    assert design_mde(problems_only, 3, 100) == pytest.approx(t_mde(99, 0.1))
    # two unpaired arms split the seed variance: df 2 (R - 1) per arm -> 4
    assert design_se(Components(seed=2.0, problem=0.0, resid=0.0, arms=2), 3, 100)[1] == pytest.approx(4.0)
    assert design_mde(Components(0.0, 0.0, 0.0), 3, 100) == 0.0


def t_width(df, se):
    return 2 * stats.t.ppf(0.975, df) * se


def test_cheapest_design_and_undecidable_checks():
    """A design decides a check when its whole CI (2 t SE, ~3.92 SE) is narrower than delta, not its MDE (~2.8 SE)."""
    comps = {"seeds": Components(1.0, 0.0, 0.0), "problems": Components(0.0, 1.0, 0.0),
             "tiny": Components(0.0, 1.0, 0.0)}
    deltas = {"seeds": 1.2, "problems": 0.2, "tiny": 0.05}
    designs = [(r, p) for r in (3, 10) for p in (100, 500)]
    cost = Cost(per_seed_run=10.0, per_problem=0.01)
    # CI width seeds: 4.97 at R=3, 2 t_9 / sqrt(10) = 1.43 at R=10 (> 1.2: never decided, though its MDE at R=10,
    # 0.995, is below 1.2); problems: 0.397 at P=100, 0.176 at 500 (< 0.2)
    assert t_width(9, np.sqrt(0.1)) > 1.2 > t_mde(9, np.sqrt(0.1))
    plan = cheapest_design(comps, deltas, designs, cost)
    assert (plan.n_seeds, plan.n_problems, plan.cost) == (3, 500, 45.0)
    assert plan.undecidable == ("seeds", "tiny")
    assert plan.mde["problems"] == pytest.approx(t_mde(499, np.sqrt(1 / 500)))
    # a cheaper grid point wins when it suffices
    easy = cheapest_design({"seeds": comps["seeds"]}, {"seeds": 5.0}, designs, cost)
    assert (easy.n_seeds, easy.n_problems, easy.cost) == (3, 100, 33.0)
    none = cheapest_design({"tiny": comps["tiny"]}, {"tiny": 0.01}, designs, cost)
    assert none.n_seeds is None and none.undecidable == ("tiny",) and none.mde == {}


def test_simulated_arms_have_the_components_and_the_effect():
    rng = np.random.default_rng(3)
    comp = Components(seed=0.01, problem=0.04, resid=0.09, arms=2)
    draws = [simulated_arms(comp, 4, 300, 0.2, rng) for _ in range(300)]
    diffs = np.array([a.mean() - b.mean() for a, b in draws])
    assert diffs.mean() == pytest.approx(0.2, abs=0.01)
    assert diffs.var() == pytest.approx(comp.variance(4, 300), rel=0.25)
    one, none = simulated_arms(Components(0.0, 1.0, 0.0, arms=0), 3, 50, 0.0, rng)
    assert one.shape == (1, 50) and none is None  # no seeded arm: one row
    assert simulated_arms(Components(1.0, 0.0, 0.0, arms=1), 3, 50, 0.0, rng)[0].shape == (3, 50)


def test_power_table_shape_and_order():
    table = power_table({"x": Components(1.0, 1.0, 1.0)}, {"x": 0.5}, [(10, 500), (3, 100)], Cost(1.0, 0.0))
    assert list(table.columns) == ["check", "n_seeds", "n_problems", "cost", "se", "df", "mde", "ci_width", "delta",
                                   "decided"]
    assert table["n_seeds"].tolist() == [3, 10] and table["cost"].tolist() == [3.0, 10.0]
    assert table["se"].iloc[0] == pytest.approx(np.sqrt(1 / 3 + 1 / 100 + 1 / 300))


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="Components.seed"):
        Components(-1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="Components.arms"):
        Components(0.0, 0.0, 0.0, arms=3)
    with pytest.raises(ValueError, match="Cost.per_problem"):
        Cost(1.0, float("nan"))
    with pytest.raises(ValueError, match="n_seeds"):
        design_mde(Components(1.0, 0.0, 0.0), 1, 100)
    with pytest.raises(ValueError, match="n_problems"):
        Components(1.0, 0.0, 0.0).variance(3, 1.5)
    with pytest.raises(ValueError, match="deltas"):
        power_table({"x": Components(1.0, 0.0, 0.0)}, {"y": 0.1}, [(3, 100)], Cost(1.0, 1.0))
    with pytest.raises(ValueError, match=r"deltas\['x'\]"):
        power_table({"x": Components(1.0, 0.0, 0.0)}, {"x": 0.0}, [(3, 100)], Cost(1.0, 1.0))
    with pytest.raises(ValueError, match="designs"):
        power_table({"x": Components(1.0, 0.0, 0.0)}, {"x": 0.1}, [], Cost(1.0, 1.0))
