"""Notebook 03's study module (`paper.studies.sequential`: sequential training): pure functions on hand-computable
cases, then the whole study on the smoke preset (a temporary run store) for the arm training and the report."""

import json

import pandas as pd
import pytest

from esreason_lib.paper.studies import sequential as S
from esreason_lib.paper.studies.presets import get_preset
from esreason_lib.store.runs import Run


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


def _arm(arm, test_c, seeds=(0, 1, 2), n=8, repeat=10):
    """Per-problem rows of one arm: the pattern `test_c` repeated `repeat` times on the test split, plus one
    selection problem that no check may read (c = n, which would flip every check)."""
    cs, ids = list(test_c) * repeat, [f"t{i:02d}" for i in range(len(test_c) * repeat)]
    seeds = (-1,) if arm == "base" else seeds
    return pd.concat([pd.DataFrame({"problem_id": ids + ["s0"], "n": n, "c": cs + [n], "arm": arm, "seed": s,
                                    "split": ["test"] * len(ids) + ["selection"]}) for s in seeds], ignore_index=True)


def _tables(arms, k=4, repeat=10, snapshots=None):
    """`finding`'s tables: `arms` {arm: pattern} (sequences' first stages default to FIRST), GRPO-only's path
    base (step 0) -> `snapshots` {step: pattern} -> final (step 9)."""
    arms = {**{S.first_stage(q): FIRST[q] for q in S.SEQUENCES}, **arms}
    problems = pd.concat([_arm(a, c, repeat=repeat) for a, c in arms.items()], ignore_index=True)
    grpo = problems[problems["arm"] == "grpo"]
    paths = pd.concat([problems[problems["arm"] == "base"].assign(step=0), grpo.assign(step=9)]
                      + [_arm("grpo", c, repeat=repeat).assign(step=st) for st, c in (snapshots or {}).items()],
                      ignore_index=True)
    deltas = pd.DataFrame([{"stage": 0.15, "pass1": 0.01, "passk": 0.15}])  # deltas 40 problems can reach
    return {"problems": problems, "points": S.plane_points(problems, k), "paths": paths, "deltas": deltas}


# pass@1 / pass@4 from 8 samples: c=8,8,8,0 -> 0.75 / 0.75 (GRPO: sharp), c=4 -> 0.5 / 0.986 (ES: broad)
SHARP, BROAD = [8, 8, 8, 0], [4, 4, 4, 4]
# each sequence's own first stage: GRPO at half budget (pass@1 0.47, pass@4 0.75), ES at half budget (0.375)
FIRST = {"grpo->es": [5, 5, 5, 0], "es->grpo": [3, 3, 3, 3]}
HOLDS = {"base": [1, 1, 1, 1], "es": BROAD, "grpo": SHARP, "grpo->es": [6, 6, 6, 6], "es->grpo": [6, 6, 6, 6]}


def test_plane_points_hand_computed():
    tables = _tables({"base": [1, 1, 1, 1], "es": BROAD, "grpo": SHARP, "grpo->es": [6, 6, 6, 6]})
    pts = tables["points"].set_index("arm")
    assert list(pts.index)[:4] == ["base", "es", "grpo", "grpo->es"]  # ARMS order, selection rows left out
    assert pts.loc["es", "pass@1"] == pytest.approx(0.5) and pts.loc["grpo", "pass@K"] == pytest.approx(0.75)
    assert pts.loc["es", "n_seeds"] == 3 and pts.loc["base", "n_seeds"] == 1 and (pts["k"] == 4).all()
    assert pts.loc["grpo->es", "non_dominated"] and not pts.loc["grpo", "non_dominated"]


def test_finding_reproduced_when_both_orders_combine_the_gains():
    # c=6 of 8 on every problem: pass@1 0.75 > ES's 0.5, pass@4 1.0 > GRPO's 0.75 (also at GRPO's final point,
    # which has the sequence's Pass@1), and above each first stage
    f = S.finding(_tables(HOLDS))
    assert [c.status for c in f.checks] == ["reproduced"] * 8, f.sentence
    assert f.status == "reproduced"
    assert [t.primary.name for t in f.tests] == ["grpo->es Pass@4 above GRPO-only",
                                                 "grpo->es Pass@4 above GRPO-only's path at its Pass@1"]
    assert all(c.delta is not None for c in f.checks)
    assert f.tests[0].primary.effect == pytest.approx(0.25) and f.tests[0].secondary[0].effect == pytest.approx(0.25)


def test_a_sequence_equal_to_its_first_stage_is_not_evidence():
    """Alternative explanation (issue 21): the sequence is its first stage, GRPO at half budget; the ES stage adds
    nothing. Its "combination" checks can still pass; the first-stage check cannot."""
    arms = {**HOLDS, "grpo->es": [6, 6, 6, 6]}
    tables = _tables(arms)
    first = tables["problems"]["arm"] == S.first_stage("grpo->es")
    seq = tables["problems"][tables["problems"]["arm"] == "grpo->es"]
    tables["problems"] = pd.concat([tables["problems"][~first], seq.assign(arm=S.first_stage("grpo->es"))])
    f = S.finding(tables)
    stage = f.tests[1].secondary[0]
    assert (stage.name == "grpo->es pass@4 above its own first stage"
            and stage.status == "smaller than delta"), f.sentence
    assert f.tests[0].status == "reproduced"  # the combination check alone passes: the paper's test holds


def test_a_sequence_on_grpos_path_is_not_evidence():
    """Alternative explanation: the sequence is just GRPO trained less; GRPO-only's path passes through it."""
    f = S.finding(_tables(HOLDS, snapshots={4: [6, 6, 6, 6]}))
    matched = [c for c in f.checks if "path at its Pass@1" in c.name]
    assert len(matched) == 2 and all(c.status in ("smaller than delta", "not resolved") for c in matched), f.sentence
    assert f.tests[1].status == "smaller than delta" and f.tests[0].status == "reproduced"


def test_finding_not_reproduced_when_every_check_fails():
    # a sequence below ES at K=1 (c=2: 0.25 < 0.5) and below GRPO at K=4 (0.589 < 0.75)
    f = S.finding(_tables({**HOLDS, "grpo->es": [2, 2, 2, 0], "es->grpo": [2, 2, 2, 0]}))
    assert f.status == "not reproduced"
    assert [c.status for c in f.checks if "GRPO-only" == c.name[-9:]] == ["not reproduced"] * 2, f.sentence


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


# ------------------------------------------------------------------------------------ the smoke study end to end
@pytest.fixture(scope="module")
def smoke_store(isolated_store):
    """(preset, run store, default store): smoke with different per-method budgets (ES 2, GRPO 4 iterations) and
    two preset seeds; ESREASON_HOME is a second folder that must stay empty."""
    return (get_preset("smoke", **{"sequential.grpo_budget": 4, "seeds": (0, 1)}), isolated_store.store,
            isolated_store.default)


@pytest.fixture(scope="module")
def tables(smoke_store):
    preset, store, _ = smoke_store
    return S.compute(preset, home=store, progress=False)


def test_train_arms_spends_each_methods_budget_share_and_chains_stages(tables, smoke_store, forbid_loading):
    import esreason_lib.models.load
    from esreason_lib.methods import trainer
    from esreason_lib.paper.studies import common

    forbid_loading(esreason_lib.models.load, common)  # every arm was trained by `compute`
    preset, store, _ = smoke_store
    budgets = S.method_budgets(preset)
    assert budgets == {"es": 2, "grpo": 4}
    before = {p.name: (p / "manifest.json").read_bytes() for p in store.iterdir() if (p / "manifest.json").exists()}
    arms = S.train_arms(preset, 0, home=store, progress=False)
    assert list(arms) == list(S.ARMS[1:])
    for arm, runs in arms.items():
        assert [(r.kind, r.config["iterations"]) for r in runs] == S.arm_stages(preset, arm)
        assert sum(r.config["iterations"] / budgets[r.kind] for r in runs) == pytest.approx(1.0)  # one full run
        assert [int(r.metrics()["step"].max()) for r in runs] == [r.config["iterations"] for r in runs]
        assert all(r.is_complete() and r.seed == 0 and r.path.parent == store for r in runs)
        assert runs[0].config["model"] == preset.base_model
        assert [r.config["model"] for r in runs[1:]] == [f"run:{r.path.name}/model" for r in runs[:-1]]  # portable
    per_method = {arm: {m: sum(r.config["iterations"] for r in runs if r.kind == m) for m in budgets}
                  for arm, runs in arms.items()}
    assert per_method["grpo->es"] == per_method["es->grpo"] == {"es": 1, "grpo": 2}  # half of each budget
    for m in ("es", "grpo"):  # single arms are the preset's own runs (notebook 01's) at the method's full budget
        own = trainer(m)(preset.config(m, seed=0, iterations=budgets[m]), home=store, progress=False)
        assert arms[m][0].path == own.path
    only = S.train_arms(preset, 0, arms=("es->grpo",), home=store, progress=False)
    assert list(only) == ["es->grpo"] and [r.path for r in only["es->grpo"]] == [r.path for r in arms["es->grpo"]]
    after = {p.name: (p / "manifest.json").read_bytes() for p in store.iterdir() if (p / "manifest.json").exists()}
    assert after == before


def test_compute_on_the_smoke_preset(tables, smoke_store):
    preset, store, default = smoke_store
    ks, seeds = list(preset.eval.ks), list(preset.seeds)
    assert set(tables) == {"problems", "paths", "cost", "points", "curves", "deltas"}

    cost = tables["cost"]
    assert list(zip(cost["arm"], cost["seed"])) == [(a, s) for s in seeds for a in S.ARMS[1:]]
    assert cost["stages"].tolist() == ["es 2", "grpo 4", "grpo 2 + es 1", "es 1 + grpo 2"] * len(seeds)
    per_it = {"es": preset.es.population_size * preset.es.prompts_per_step,
              "grpo": preset.grpo.group_size * preset.grpo.prompts_per_step}
    want = [sum(per_it[m] * it for m, it in S.arm_stages(preset, arm)) for arm in S.ARMS[1:]]
    assert cost["generations"].tolist() == want * len(seeds)

    problems = tables["problems"]
    assert set(problems["arm"]) == set(S.ARMS) | {S.first_stage(q) for q in S.SEQUENCES}
    problems = problems[problems["arm"].isin(S.ARMS)]
    assert problems.groupby("arm")["seed"].unique().map(sorted).to_dict() == {
        arm: [-1] if arm == "base" else seeds for arm in S.ARMS}
    n = preset.eval.n_problems
    assert (problems[problems["split"] == "test"].groupby(["arm", "seed"]).size() == n).all()

    curves = tables["curves"]
    curves = curves[curves["arm"].isin(S.ARMS)]
    assert curves.groupby("arm", sort=False)["k"].apply(list).to_dict() == {a: ks for a in S.ARMS}
    assert ((curves["ci_low"] <= curves["pass_at_k"] + 1e-12)
            & (curves["pass_at_k"] <= curves["ci_high"] + 1e-12)).all()
    points = tables["points"].set_index("arm")
    points = points.loc[list(S.ARMS)]
    assert points["n_seeds"].tolist() == [1] + [len(seeds)] * 4
    at = curves.set_index(["arm", "k"])["pass_at_k"]
    assert points["pass@1"].to_numpy() == pytest.approx([at[(a, 1)] for a in S.ARMS])
    assert points["pass@K"].to_numpy() == pytest.approx([at[(a, max(ks))] for a in S.ARMS])

    # what was evaluated: the base and each arm's final stage per seed (and first stages, GRPO's snapshots)
    finals = {f"run:{runs[-1].path.name}/model" for s in seeds for runs in S.train_arms(preset, s, home=store,
                                                                                progress=False).values()}
    evaluated = {json.loads((p / "config.json").read_text())["model"] for p in store.glob("eval-*")}
    assert evaluated >= {preset.base_model} | finals and len(finals) == 4 * len(seeds)
    assert not default.exists(), "the study wrote outside its run store"
    f = S.finding(tables)
    assert f.status == "undecidable at this design" and [c.n_seeds for c in f.checks] == [len(seeds)] * 8  # 2 < 3
