"""Notebook 03's experiments module (sequential training): pure functions on hand-computable cases, then the
whole study on the smoke preset (a temporary run store) for the arm training and the report."""

import json

import pandas as pd
import pytest

from esreason_lib.experiments import sequential as S
from esreason_lib.presets import get_preset
from esreason_lib.runs import Run


def test_budgets_and_stages():
    tiny = get_preset("tiny")
    assert S.method_budgets(tiny) == {"es": 150, "grpo": 150}
    p = get_preset("tiny", **{"sequential.es_budget": 150, "sequential.grpo_budget": 400})
    assert S.arm_stages(p, "grpo->es") == [("grpo", 200), ("es", 75)]
    assert S.arm_stages(p, "es->grpo") == [("es", 75), ("grpo", 200)]
    assert S.arm_stages(p, "es") == [("es", 150)] and S.arm_stages(p, "grpo") == [("grpo", 400)]
    odd = get_preset("smoke", **{"sequential.es_budget": 3, "sequential.grpo_budget": 3})
    assert S.arm_stages(odd, "grpo->es") == [("grpo", 1), ("es", 2)]
    for bad in ("sgd", "es->es->grpo", "es->adam"):
        with pytest.raises(ValueError, match="arm"):
            S.arm_stages(p, bad)


def test_tiny_single_arms_reuse_notebook_01_runs():
    """ES-only / GRPO-only at the full budget must be exactly the preset's training runs (cache reuse)."""
    tiny = get_preset("tiny")
    assert S.arm_stages(tiny, "es") == [("es", tiny.es.iterations)], "sequential.es_budget != es.iterations"
    assert S.arm_stages(tiny, "grpo") == [("grpo", tiny.grpo.iterations)], "sequential.grpo_budget != grpo.iterations"


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


# ------------------------------------------------------------------------------------ the smoke study end to end
@pytest.fixture(scope="module")
def smoke_store(isolated_store):
    """(preset, run store, default store): smoke with different per-method budgets (ES 2, GRPO 4 iterations) and
    two preset seeds; ESREASON_HOME is a second folder that must stay empty."""
    return get_preset("smoke", **{"sequential.grpo_budget": 4, "seeds": (0, 1)}), isolated_store.store, isolated_store.default


@pytest.fixture(scope="module")
def report(smoke_store):
    preset, store, _ = smoke_store
    return S.sequential_report(preset, home=store, progress=False)


@pytest.fixture
def frozen(forbid_loading):
    """Any model load (training, pretraining or an uncached evaluation) fails the test."""
    import esreason_lib.models
    from esreason_lib.experiments import common

    forbid_loading(esreason_lib.models, common)


def test_train_arms_spends_each_methods_budget_share_and_chains_stages(report, smoke_store, frozen):
    from esreason_lib.experiments.common import train

    preset, store, _ = smoke_store
    budgets = S.method_budgets(preset)
    assert budgets == {"es": 2, "grpo": 4}
    before = {p.name: (p / "manifest.json").read_bytes() for p in store.iterdir() if (p / "manifest.json").exists()}
    arms = S.train_arms(preset, 0, home=store, progress=False)  # every arm was trained by the report
    assert list(arms) == list(S.ARMS[1:])
    for arm, runs in arms.items():
        assert [(r.kind, r.config["iterations"]) for r in runs] == S.arm_stages(preset, arm)
        assert sum(r.config["iterations"] / budgets[r.kind] for r in runs) == pytest.approx(1.0)  # one full run
        assert [int(r.metrics()["step"].max()) for r in runs] == [r.config["iterations"] for r in runs]
        assert all(r.is_complete() and r.seed == 0 and r.path.parent == store for r in runs)
        assert runs[0].config["model"] == preset.base_model
        assert [r.config["model"] for r in runs[1:]] == [str(r.model_dir) for r in runs[:-1]]
    per_method = {arm: {m: sum(r.config["iterations"] for r in runs if r.kind == m) for m in budgets}
                  for arm, runs in arms.items()}
    assert per_method["grpo->es"] == per_method["es->grpo"] == {"es": 1, "grpo": 2}  # half of each budget
    for m in ("es", "grpo"):  # single arms are notebook 01's cached runs at the method's full budget
        assert arms[m][0].path == train(preset, m, seed=0, iterations=budgets[m], home=store, progress=False).path
    only = S.train_arms(preset, 0, arms=("es->grpo",), home=store, progress=False)
    assert list(only) == ["es->grpo"] and [r.path for r in only["es->grpo"]] == [r.path for r in arms["es->grpo"]]
    after = {p.name: (p / "manifest.json").read_bytes() for p in store.iterdir() if (p / "manifest.json").exists()}
    assert after == before


def test_sequential_report_on_the_smoke_preset(report, smoke_store):
    from esreason_lib.analysis import non_dominated

    preset, store, default = smoke_store
    ks = list(preset.eval.ks)
    assert set(report) == {"cost", "curves", "arm_curves", "points", "k", "budgets", "seeds"}
    assert report["seeds"] == (0,)  # default: the first preset seed only
    assert report["k"] == max(ks) and report["budgets"] == S.method_budgets(preset)

    cost = report["cost"]
    assert cost["arm"].tolist() == list(S.ARMS[1:]) and (cost["seed"] == 0).all()
    assert cost["stages"].tolist() == ["es 2", "grpo 4", "grpo 2 + es 1", "es 1 + grpo 2"]
    per_it = {"es": preset.es.population_size * preset.es.prompts_per_step,
              "grpo": preset.grpo.group_size * preset.grpo.prompts_per_step}
    want = [sum(per_it[m] * it for m, it in S.arm_stages(preset, arm)) for arm in S.ARMS[1:]]
    assert cost["generations"].tolist() == want

    curves = report["curves"]
    assert curves["method"].unique().tolist() == list(S.ARMS)
    assert curves.groupby("method")["seed"].unique().map(list).to_dict() == {
        arm: [-1 if arm == "base" else 0] for arm in S.ARMS}
    assert curves.groupby("method")["k"].apply(list).to_dict() == {a: ks for a in S.ARMS}
    assert curves["pass_at_k"].between(0, 1).all()
    assert (curves["ci_low"] <= curves["pass_at_k"] + 1e-12).all()
    assert (curves["pass_at_k"] <= curves["ci_high"] + 1e-12).all()
    assert list(report["arm_curves"]) == list(S.ARMS)
    for arm, curve in report["arm_curves"].items():  # one seed: the seed mean is that seed's curve
        mine = curves[curves["method"] == arm]
        assert curve["k"].tolist() == ks and curve["pass_at_k"].tolist() == mine["pass_at_k"].tolist()

    points = report["points"].set_index("method")
    assert list(points.index) == list(S.ARMS) and (points["n_seeds"] == 1).all()
    at = curves.set_index(["method", "k"])["pass_at_k"]
    assert points["pass@1"].to_dict() == {a: at[(a, 1)] for a in S.ARMS}
    assert points["pass@K"].to_dict() == {a: at[(a, max(ks))] for a in S.ARMS}
    assert points["non_dominated"].tolist() == list(non_dominated(points["pass@1"], points["pass@K"]))

    # what was evaluated: the base and each arm's final stage, nothing else
    arms = S.train_arms(preset, 0, home=store, progress=False)
    evaluated = {json.loads((p / "config.json").read_text())["model"] for p in store.glob("eval-*")}
    assert evaluated == {preset.base_model} | {str(runs[-1].model_dir) for runs in arms.values()}
    assert not default.exists(), "the study wrote outside its run store"
    text = S.describe_sequential(report["points"], report["k"], report["budgets"], report["seeds"])
    assert "(budget: ES 2 it, GRPO 4 it, 50/50 per method; seed 0)" in text
