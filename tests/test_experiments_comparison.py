"""Notebook 01's study (ES vs GRPO over a step-size grid): pure functions and `finding` on hand-built tables
(including inputs where every check fails), then `compute` on the smoke preset (a temporary run store)."""

import json

import numpy as np
import pandas as pd
import pytest

from esreason_lib.studies import comparison as C
from esreason_lib.studies.presets import get_preset
from esreason_lib.studies.specs import ComparisonSpec
from esreason_lib.store.runs import Run

N = 8  # samples per problem in the hand-built tables
REPEAT = 10  # each 4-problem pattern is repeated: 40 test problems


def _arm(arm, test_c, sel_c=(), entropy=1.0, seeds=(0, 1, 2)):
    """Per-problem rows of one arm: the 4-problem pattern `test_c` repeated REPEAT times (split "test"), then
    `sel_c` (split "selection"); the same values for every seed (the base gets seed -1)."""
    method = arm.split(" ")[0]
    step = float(arm.split("=")[1]) if "=" in arm else float("nan")
    cs = list(test_c) * REPEAT + list(sel_c)
    ids = [f"t{i:02d}" for i in range(4 * REPEAT)] + [f"s{i}" for i in range(len(sel_c))]
    seeds = (C.BASE_SEED,) if method == "base" else seeds
    return pd.concat([pd.DataFrame({
        "problem_id": ids, "n": N, "c": cs, "greedy_correct": [c > N // 2 for c in cs],
        "distinct_correct": [min(c, 2) for c in cs], "mean_reward": np.asarray(cs) / N, "mean_entropy": entropy,
        "mean_length": 5.0, "arm": arm, "seed": s, "split": ["test"] * len(ids[:4 * REPEAT]) + ["selection"] * len(sel_c),
        "method": method, "step_size": step}) for s in seeds], ignore_index=True)


def _tables(*arms, k=4):
    problems = pd.concat(arms, ignore_index=True)
    return {"problems": problems, "frontier": C.frontier(problems, k)}


# GRPO concentrates (solves 3 of 4 problems every time, never the 4th), ES spreads (half of the samples right on
# every problem), the base is weak: pass@1 base 0.125 < ES 0.5 < GRPO 0.75; pass@4 GRPO 0.75 < ES 0.986.
HOLDS = dict(base=("base", [1, 1, 1, 1], [1], 1.0), grpo=("grpo lr=0.0001", [8, 8, 8, 0], [8], 0.3),
             es=("es alpha=0.0024", [4, 4, 4, 4], [4], 0.9))
# Every statement reversed: the base beats ES at K=1 (base 1.0 > ES 0.75), ES beats GRPO at K=1 (0.75 > 0.375),
# GRPO beats ES at K=4 (0.929 > 0.75), GRPO's entropy is above the base's and ES's below GRPO's.
FAILS = dict(base=("base", [8, 8, 8, 8], [8], 0.5), grpo=("grpo lr=0.0001", [3, 3, 3, 3], [3], 0.9),
             es=("es alpha=0.0024", [8, 8, 8, 0], [8], 0.4))


def _entropy_noise(table, scale=0.01):
    """Per-problem entropy jitter (so the intervals are not single points); reproducible."""
    rng = np.random.default_rng(0)
    return table.assign(mean_entropy=table["mean_entropy"] + scale * rng.standard_normal(len(table)))


def test_finding_reproduced_when_every_statement_holds():
    tables = _tables(*(_entropy_noise(_arm(*v)) for v in HOLDS.values()))
    f = C.finding(tables)
    assert [c.status for c in f.checks] == ["reproduced"] * 4, f.sentence
    assert f.status == "reproduced"
    effects = {c.name: c.effect for c in f.checks}
    assert effects["ES (es alpha=0.0024) Pass@1 above base"] == pytest.approx(0.5 - 0.125)
    assert "not part of the claim: GRPO (grpo lr=0.0001) above ES (es alpha=0.0024) at K=1: +0.250" in f.sentence
    es_k4 = 1 - 1 / 70  # 1 - C(4, 4) / C(8, 4)
    assert effects["ES (es alpha=0.0024) above GRPO (grpo lr=0.0001) at K=4"] == pytest.approx(es_k4 - 0.75)
    assert all(c.n_seeds == 3 for c in f.checks)
    assert "best settings chosen on 1 selection problems disjoint from the 40 test problems" in f.sentence
    assert f.sanity == ("Pass@4 >= Pass@1 for every arm: True",)


def test_finding_not_reproduced_when_every_statement_fails():
    tables = _tables(*(_entropy_noise(_arm(*v)) for v in FAILS.values()))
    f = C.finding(tables)
    assert [c.status for c in f.checks] == ["not reproduced"] * 4, f.sentence
    assert f.status == "not reproduced" and "not reproduced" in f.sentence


@pytest.mark.parametrize("which", range(4))
def test_each_check_alone_can_fail(which):
    """Start from the passing tables and break one statement: that check (and the finding) is `not reproduced`."""
    arms = {m: _entropy_noise(_arm(*v)) for m, v in HOLDS.items()}
    if which == 0:  # ES Pass@1 below the base
        arms["base"] = _entropy_noise(_arm("base", [6, 6, 6, 6], [6], 1.0))
    elif which == 1:  # GRPO at K=4 above ES: GRPO spreads too
        arms["grpo"] = _entropy_noise(_arm("grpo lr=0.0001", [5, 5, 5, 5], [5], 0.3))
        arms["es"] = _entropy_noise(_arm("es alpha=0.0024", [4, 4, 4, 0], [4], 0.9))
    elif which == 2:  # GRPO's entropy above the base's
        arms["grpo"] = _entropy_noise(_arm("grpo lr=0.0001", [8, 8, 8, 0], [8], 1.2))
        arms["es"] = _entropy_noise(_arm("es alpha=0.0024", [4, 4, 4, 4], [4], 1.3))
    else:  # ES's entropy below GRPO's
        arms["es"] = _entropy_noise(_arm("es alpha=0.0024", [4, 4, 4, 4], [4], 0.1))
    f = C.finding(_tables(*arms.values()))
    assert f.checks[which].status == "not reproduced", f.sentence
    assert f.status == "not reproduced"


def test_grpo_winning_at_k1_is_reported_but_not_evidence():
    """ES above GRPO at K=1 does not change the status: the paper allows GRPO to win there, it does not claim it."""
    arms = {m: _entropy_noise(_arm(*v)) for m, v in HOLDS.items()}
    arms["grpo"] = _entropy_noise(_arm("grpo lr=0.0001", [8, 8, 0, 0], [8], 0.3))  # pass@1 0.5 = ES's 0.5
    f = C.finding(_tables(*arms.values()))
    assert f.status == "reproduced" and "above ES (es alpha=0.0024) at K=1" in f.sentence


def test_one_seed_is_not_resolved():
    arms = [_arm(*v[:3], entropy=v[3], seeds=(0,)) if v[0] != "base" else _arm(*v) for v in HOLDS.values()]
    f = C.finding(_tables(*arms))
    assert {c.status for c in f.checks} == {"not resolved"} and f.status == "not resolved"


def test_frontier_chooses_on_the_selection_split_and_the_verdict_uses_the_choice():
    """GRPO's low lr is better at Pass@4 on the selection problems but worse on the test problems: the verdict
    is against the chosen (low-lr) arm, not against the arm that looks best on the test problems."""
    base = _arm("base", [1, 1, 1, 1], [1, 1])
    hi = _arm("grpo lr=0.0001", [8, 8, 8, 0], [8, 0])  # selection: pass@1 0.5, pass@4 0.5
    lo = _arm("grpo lr=2e-05", [8, 8, 0, 0], [3, 3])  # selection: pass@1 0.375, pass@4 0.929
    es = _arm("es alpha=0.0024", [4, 4, 4, 4], [4, 4])
    tables = _tables(base, hi, lo, es)
    front = tables["frontier"].set_index("arm")
    assert list(front.index) == ["base", "grpo lr=0.0001", "grpo lr=2e-05", "es alpha=0.0024"]
    assert front.loc["grpo lr=2e-05", "sel_pass@K"] == pytest.approx(1 - 5 / 70)
    assert front.loc["grpo lr=2e-05", "pass@1"] == pytest.approx(0.5) and front.loc["grpo lr=2e-05", "pass@K"] == 0.5
    assert C.selected_arms(tables["frontier"], "pass@K") == {"grpo": "grpo lr=2e-05", "es": "es alpha=0.0024"}
    assert C.selected_arms(tables["frontier"], "pass@1") == {"grpo": "grpo lr=0.0001", "es": "es alpha=0.0024"}
    # on the test plane the high lr dominates the low one (0.75/0.75 against 0.5/0.5)
    assert front["non_dominated"].to_dict() == {"base": True, "grpo lr=0.0001": True, "grpo lr=2e-05": False,
                                                 "es alpha=0.0024": True}
    assert (front["chosen_on"] == "selection").all() and (front["k"] == 4).all()
    names = [c.name for c in C.finding(tables).checks]
    assert "ES (es alpha=0.0024) above GRPO (grpo lr=2e-05) at K=4" in names
    with pytest.raises(ValueError, match="criterion"):
        C.selected_arms(tables["frontier"], "pass@2")


def test_without_a_selection_split_the_choice_is_on_the_test_problems():
    tables = _tables(*(_arm(*v[:2], entropy=v[3]) for v in HOLDS.values()))
    assert (tables["frontier"]["chosen_on"] == "test").all()
    assert "chosen on the 40 test problems themselves, which favours them" in C.finding(tables).sentence


def test_seed_problem_values_shapes_and_errors():
    problems = C.with_pass(pd.concat([_arm(*HOLDS["base"][:3]), _arm(*HOLDS["es"][:3])]), (1,))
    base, es = C.seed_problem_values(problems, "pass@1", "base", "es alpha=0.0024")
    assert base.shape == (1, 40) and es.shape == (3, 40) and es[0, 0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="no test rows for arm 'nope'"):
        C.seed_problem_values(problems, "pass@1", "nope")
    other = problems.copy()
    other.loc[other["arm"] == "base", "problem_id"] += "x"
    with pytest.raises(ValueError, match="different problems"):
        C.seed_problem_values(other, "pass@1", "base", "es alpha=0.0024")


def test_seed_table_spread_and_curves():
    problems = pd.concat([_arm("base", [0, 1, 2, 0], [5]), _arm("es alpha=0.001", [1, 2, 3, 1], [0], seeds=(0,)),
                          _arm("es alpha=0.001", [1, 2, 1, 1], [0], entropy=0.5, seeds=(1,))], ignore_index=True)
    seeds = C.seed_table(problems, 8).set_index(["arm", "seed"])
    assert seeds.loc[("es alpha=0.001", 0), "pass@1"] == pytest.approx(7 / 32)  # selection rows left out
    assert seeds.loc[("base", -1), "solved"] == pytest.approx(0.5) and seeds.loc[("es alpha=0.001", 1), "pass@K"] == 1
    sp = C.spread(seeds.reset_index(), ["pass@1", "eval_entropy"]).set_index("arm")
    assert sp.loc["es alpha=0.001", ["pass@1", "pass@1_min", "pass@1_max"]].tolist() == pytest.approx(
        [(7 / 32 + 5 / 32) / 2, 5 / 32, 7 / 32])
    shown = C.format_spread(sp.reset_index(), ["eval_entropy"]).set_index("arm")["eval_entropy"]
    assert shown["es alpha=0.001"] == "0.750 [0.500, 1.000]" and shown["base"] == "1.000"
    mean, per_seed = C.pass_curves(problems, [1, 8], n_boot=200)
    m = mean.set_index(["arm", "k"])
    assert m.loc[("es alpha=0.001", 1), "pass_at_k"] == pytest.approx(6 / 32) and m.loc[("base", 8), "n_seeds"] == 1
    assert m.loc[("es alpha=0.001", 8), "pass_at_k"] == 1.0 and m.loc[("base", 8), "pass_at_k"] == 0.5
    assert ((m["ci_low"] <= m["pass_at_k"] + 1e-12) & (m["pass_at_k"] <= m["ci_high"] + 1e-12)).all()
    assert per_seed.set_index(["arm", "seed", "k"]).loc[("es alpha=0.001", 1, 1), "pass_at_k"] == pytest.approx(5 / 32)


def _fake_run(tmp_path, kind, seed, iterations, rows):
    run = Run.open(kind, {"iterations": iterations, "seed": seed}, seed=seed, home=tmp_path)
    for step, m in rows:
        run.log(step, m)
    return run


def test_cost_and_entropy_tables(tmp_path):
    es = _fake_run(tmp_path, "es", 0, 4, [(s, {"es/generations": 10 * s, "time/step_s": 0.5,
                                               "policy/entropy": 1.0}) for s in range(1, 5)])
    grpo = _fake_run(tmp_path, "grpo", 0, 2, [(1, {"grpo/generations": 8, "time/step_s": 1.0, "policy/entropy": 2.0}),
                                              (2, {"grpo/generations": 16, "time/step_s": 2.0, "policy/entropy": 1.0})])
    runs = {("es alpha=0.1", 0): es, ("grpo lr=0.1", 0): grpo}
    cost = C.cost_table(runs).set_index("arm")
    assert cost.loc["es alpha=0.1", "generations"] == 40 and cost.loc["es alpha=0.1", "seconds"] == pytest.approx(2.0)
    assert cost.loc["grpo lr=0.1", "generations"] == 16 and cost.loc["grpo lr=0.1", "iterations"] == 2
    traces = C.entropy_traces(runs)
    assert traces[traces["arm"] == "grpo lr=0.1"]["progress"].tolist() == [0.5, 1.0]
    change = C.entropy_change(traces, frac=0.5).set_index("arm")
    assert change.loc["grpo lr=0.1", "ratio"] == pytest.approx(0.5) and change.loc["es alpha=0.1", "ratio"] == 1.0
    with pytest.raises(ValueError, match="frac"):
        C.entropy_change(traces, frac=0.9)


def test_grid_labels_and_evaluation_spec():
    tiny = get_preset("tiny")
    assert C.grid(tiny) == [("grpo", 2e-5), ("grpo", 1e-4), ("es", 1.2e-3), ("es", 2.4e-3)]
    assert [C.arm_label(m, s) for m, s in C.grid(tiny)] == ["grpo lr=2e-05", "grpo lr=0.0001", "es alpha=0.0012",
                                                             "es alpha=0.0024"]
    assert (tiny.es.alpha, tiny.grpo.lr) == (2.4e-3, 1e-4)  # the grids hold the preset's own: 03-05 reuse the runs
    configs = C.training_configs(tiny)
    assert len(configs) == 4 * 3 and configs["grpo", 2e-5, 1].lr == 2e-5 and configs["grpo", 2e-5, 1].seed == 1
    assert configs["es", 2.4e-3, 0] == tiny.config("es", seed=0)  # the preset's own arm: notebook 01's default runs
    assert C.evaluation_spec(tiny).n_problems == 200 + 100 and C.evaluation_spec(tiny).ks == tiny.eval.ks
    easy = get_preset("paper-easy")
    assert C.evaluation_spec(easy) is easy.eval and easy.comparison.selection_problems == 0
    for bad in (dict(es_alphas=()), dict(grpo_lrs=(1e-4, 1e-4)), dict(es_alphas=(-1.0,)), dict(selection_problems=-1)):
        with pytest.raises(ValueError, match="ComparisonSpec"):
            ComparisonSpec(**{**dict(es_alphas=(1e-3,), grpo_lrs=(1e-4,), selection_problems=0), **bad})
    with pytest.raises(ValueError, match="selection_problems must be 0 when eval.n_problems is None"):
        get_preset("tiny", **{"eval.n_problems": None})


# ------------------------------------------------------------------------------------ the smoke study end to end
@pytest.fixture(scope="module")
def smoke_store(isolated_store):
    """(smoke preset with two ES alphas and two seeds, run store, default store that must stay empty)."""
    preset = get_preset("smoke", **{"comparison.es_alphas": (1e-3, 2e-3), "seeds": (0, 1)})
    return preset, isolated_store.store, isolated_store.default


@pytest.fixture(scope="module")
def tables(smoke_store):
    preset, store, _ = smoke_store
    return C.compute(preset, home=store, progress=False)


def test_compute_trains_every_arm_for_every_seed_and_evaluates_both_splits(tables, smoke_store):
    preset, store, default = smoke_store
    arms = ["grpo lr=2e-05", "es alpha=0.001", "es alpha=0.002"]
    cost = tables["cost"]
    assert list(zip(cost["arm"], cost["seed"])) == [(a, s) for a in arms for s in (0, 1)]
    es, grpo = preset.es, preset.grpo
    per_it = {"es": es.population_size * es.prompts_per_step, "grpo": grpo.group_size * grpo.prompts_per_step}
    assert cost["generations"].tolist() == [per_it[m] * 3 for m in cost["method"]]
    trained = [json.loads((p / "config.json").read_text()) for p in store.glob("es-*")]
    assert sorted((c["alpha"], c["seed"]) for c in trained) == [(1e-3, 0), (1e-3, 1), (2e-3, 0), (2e-3, 1)]
    problems = tables["problems"]
    n_test, n_sel = preset.eval.n_problems, preset.comparison.selection_problems
    for (arm, seed), g in problems.groupby(["arm", "seed"]):
        assert g["split"].value_counts().to_dict() == {"test": n_test, "selection": n_sel}, (arm, seed)
    test_ids = set(problems.loc[problems["split"] == "test", "problem_id"])
    assert not test_ids & set(problems.loc[problems["split"] == "selection", "problem_id"])
    assert len(list(store.glob("eval-*"))) == 1 + 3 * 2  # the base and 3 arms x 2 seeds, one evaluation each
    assert not default.exists(), "the study wrote outside its run store"


def test_compute_tables_agree(tables, smoke_store):
    preset, _, _ = smoke_store
    front = tables["frontier"]
    assert front["arm"].tolist() == ["base", "grpo lr=2e-05", "es alpha=0.001", "es alpha=0.002"]
    assert (front["n_seeds"] == [1, 2, 2, 2]).all() and front["best_pass@K"].sum() == 2
    summary = tables["summary"].set_index("arm")
    assert summary["pass@1"].to_numpy() == pytest.approx(front["pass@1"].to_numpy())
    curves = tables["curves"]
    assert sorted(curves["k"].unique()) == list(preset.eval.ks) and set(curves["arm"]) == set(front["arm"])
    assert set(tables["traces"]["arm"]) == set(front["arm"]) - {"base"}
    f = C.finding(tables)
    assert f.status == "not resolved" and len(f.checks) == 4  # two seeds
    assert all(c.n_seeds == 2 for c in f.checks)


def test_compute_again_reuses_every_run(tables, smoke_store, forbid_loading):
    import esreason_lib.models.load
    from esreason_lib.studies import common

    forbid_loading(esreason_lib.models.load, common)
    preset, store, _ = smoke_store
    before = {p.name: (p / "manifest.json").read_bytes() for p in store.iterdir() if (p / "manifest.json").exists()}
    again = C.compute(preset, home=store, progress=False)
    pd.testing.assert_frame_equal(again["problems"], tables["problems"])
    after = {p.name: (p / "manifest.json").read_bytes() for p in store.iterdir() if (p / "manifest.json").exists()}
    assert after == before
