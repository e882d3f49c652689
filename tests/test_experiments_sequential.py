"""Pure functions of notebook 03's experiments module (sequential training), on hand-computable cases."""

import pandas as pd
import pytest

from esreason_lib.experiments import sequential as S
from esreason_lib.presets import get_preset
from esreason_lib.runs import Run


def test_budgets_and_stages():
    tiny = get_preset("tiny")
    assert S.method_budgets(tiny) == {"es": tiny.update_budget,
                                      "grpo": tiny.grpo_update_budget or tiny.update_budget}
    p = get_preset("tiny", update_budget=150, grpo_update_budget=400)
    assert S.arm_stages(p, "grpo->es") == [("grpo", 200), ("es", 75)]
    assert S.arm_stages(p, "es->grpo") == [("es", 75), ("grpo", 200)]
    assert S.arm_stages(p, "es") == [("es", 150)] and S.arm_stages(p, "grpo") == [("grpo", 400)]
    odd = get_preset("smoke", update_budget=3)  # grpo_update_budget None -> same count for both
    assert S.arm_stages(odd, "grpo->es") == [("grpo", 1), ("es", 2)]
    for bad in ("sgd", "es->es->grpo", "es->adam"):
        with pytest.raises(ValueError, match="arm"):
            S.arm_stages(p, bad)


def test_tiny_single_arms_reuse_notebook_01_runs():
    """ES-only / GRPO-only at the full budget must be exactly the preset's training runs (cache reuse)."""
    tiny = get_preset("tiny")
    assert S.arm_stages(tiny, "es") == [("es", tiny.es.iterations)], "update_budget != es.iterations"
    assert S.arm_stages(tiny, "grpo") == [("grpo", tiny.grpo.iterations)], "grpo_update_budget != grpo.iterations"


def test_plane_points_hand_computed():
    curves = pd.DataFrame({"method": ["base"] * 2 + ["es"] * 4 + ["grpo"] * 2,
                           "seed": [-1, -1, 0, 0, 1, 1, 0, 0], "k": [1, 8, 1, 8, 1, 8, 1, 8],
                           "pass_at_k": [0.1, 0.6, 0.2, 0.9, 0.3, 0.7, 0.4, 0.7]})
    pts = S.plane_points(curves, 8).set_index("method")
    assert list(pts.index) == ["base", "es", "grpo"]
    assert pts.loc["es", "pass@1"] == pytest.approx(0.25) and pts.loc["es", "pass@K"] == pytest.approx(0.8)
    assert pts.loc["es", "n_seeds"] == 2
    assert pts["non_dominated"].to_dict() == {"base": False, "es": True, "grpo": True}
    with pytest.raises(ValueError, match="k=16"):
        S.plane_points(curves, 16)


def test_arm_cost(tmp_path):
    def run(kind, it, gen, secs):
        r = Run.open(kind, {"iterations": it, "tag": gen}, seed=0, home=tmp_path)
        for s in range(1, it + 1):
            r.log(s, {f"{kind}/generations": gen * s, "time/step_s": secs})
        return r

    arms = {"grpo->es": [run("grpo", 2, 8, 1.0), run("es", 3, 10, 2.0)]}
    cost = S.arm_cost(arms, 0).iloc[0]
    assert cost["stages"] == "grpo 2 + es 3"
    assert cost["generations"] == 16 + 30 and cost["seconds"] == pytest.approx(2.0 + 6.0)


def test_describe_sequential():
    pts = pd.DataFrame({"method": ["base", "es", "grpo", "grpo->es", "es->grpo"],
                        "pass@1": [0.1, 0.2, 0.3, 0.3, 0.25], "pass@K": [0.8, 0.9, 0.7, 0.9, 0.6]})
    from esreason_lib.analysis import non_dominated

    pts["non_dominated"] = non_dominated(pts["pass@1"], pts["pass@K"])
    text = S.describe_sequential(pts, 64, {"es": 150, "grpo": 400}, (0,))
    assert text.startswith("pass@1/pass@64 base 0.10/0.80 / es 0.20/0.90 / grpo 0.30/0.70 / grpo->es 0.30/0.90")
    assert "(budget: ES 150 it, GRPO 400 it, 50/50 per method; seed 0)" in text
    assert "non-dominated: grpo->es;" in text
    assert "GRPO->ES at least as good as both singles on both axes: yes; ES->GRPO: no" in text
