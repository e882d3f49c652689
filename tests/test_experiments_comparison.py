"""Notebook 01's experiments module (ES vs GRPO): pure functions on hand-computable tables and fake runs, then
the whole study on the smoke preset (two seeds, a temporary run store) for the run, evaluation and report layer."""

import json

import numpy as np
import pandas as pd
import pytest

from esreason_lib.evaluate import EvalResult
from esreason_lib.experiments import comparison as C
from esreason_lib.presets import get_preset
from esreason_lib.runs import Run


def _problems(method, seed, cs, n=4, distinct=None, entropy=1.0):
    P = len(cs)
    return pd.DataFrame({"problem_id": [f"p{i}" for i in range(P)], "n": n, "c": cs,
                         "greedy_correct": [c > n // 2 for c in cs],
                         "distinct_correct": distinct if distinct is not None else [min(c, 2) for c in cs],
                         "mean_reward": np.asarray(cs) / n, "mean_entropy": entropy, "mean_length": 5.0,
                         "method": method, "seed": seed})


@pytest.fixture
def problems():
    return pd.concat([_problems("base", -1, [0, 1, 2, 0], entropy=1.0),
                      _problems("grpo", 0, [4, 4, 0, 0], entropy=0.2),
                      _problems("grpo", 1, [4, 2, 0, 0], entropy=0.4),
                      _problems("es", 0, [1, 2, 3, 1], entropy=0.9),
                      _problems("es", 1, [1, 2, 1, 1], entropy=1.1)], ignore_index=True)


def test_seed_mean_curves_hand_computed(problems):
    out = C.seed_mean_curves(problems, [1, 4], n_boot=200).set_index(["method", "k"])
    assert list(out.index.get_level_values(0).unique()) == ["base", "grpo", "es"]
    # pass@1 = c/n; grpo seeds: mean(4,4,0,0)/4 = 0.5 and mean(4,2,0,0)/4 = 0.375 -> mean 0.4375
    assert out.loc[("grpo", 1), "pass_at_k"] == pytest.approx(0.4375)
    assert out.loc[("grpo", 1), "seed_min"] == pytest.approx(0.375)
    assert out.loc[("grpo", 1), "seed_max"] == pytest.approx(0.5)
    # pass@4 with n = 4 is 1[c > 0]: es solves every problem in both seeds, grpo half, base half
    assert out.loc[("es", 4), "pass_at_k"] == pytest.approx(1.0)
    assert out.loc[("grpo", 4), "pass_at_k"] == pytest.approx(0.5)
    assert out.loc[("base", 4), "n_seeds"] == 1
    assert (out["ci_low"] <= out["pass_at_k"] + 1e-12).all() and (out["pass_at_k"] <= out["ci_high"] + 1e-12).all()


def test_paired_difference(problems):
    d = C.paired_difference(problems, "es", "grpo", 4, n_boot=300)
    assert d["diff"] == pytest.approx(0.5) and d["k"] == 4
    assert d["ci_low"] <= 0.5 <= d["ci_high"]
    d1 = C.paired_difference(problems, "es", "grpo", 1, n_boot=300)
    # es pass@1 mean: (1+2+3+1 + 1+2+1+1)/32 = 0.375; grpo 0.4375
    assert d1["diff"] == pytest.approx(0.375 - 0.4375)
    other = problems.copy()
    other.loc[other["method"] == "es", "problem_id"] = "q"
    with pytest.raises(ValueError, match="different problems"):
        C.paired_difference(other, "es", "grpo", 1)
    with pytest.raises(ValueError, match="no evaluation rows"):
        C.paired_difference(problems, "es", "nope", 1)


def test_coverage_spread_and_format(problems):
    cov = C.coverage_table(problems).set_index(["method", "seed"])
    assert cov.loc[("grpo", 0), "solved"] == pytest.approx(0.5)
    assert cov.loc[("es", 0), "distinct_correct"] == pytest.approx((1 + 2 + 2 + 1) / 4)
    assert cov.loc[("grpo", 1), "greedy"] == pytest.approx(0.25)  # only c=4 > 2
    assert cov.loc[("es", 1), "eval_entropy"] == pytest.approx(1.1)
    sp = C.spread(cov.reset_index(), ["eval_entropy"])
    assert list(sp["method"]) == ["base", "grpo", "es"]
    row = sp.set_index("method").loc["grpo"]
    assert (row["eval_entropy"], row["eval_entropy_min"], row["eval_entropy_max"]) == pytest.approx((0.3, 0.2, 0.4))
    shown = C.format_spread(sp).set_index("method")["eval_entropy"]
    assert shown["grpo"] == "0.300 [0.200, 0.400]" and shown["base"] == "1.000"


def _fake_run(tmp_path, kind, seed, iterations, rows):
    run = Run.open(kind, {"iterations": iterations, "seed": seed}, seed=seed, home=tmp_path)
    for step, m in rows:
        run.log(step, m)
    return run


def test_cost_table_and_entropy(tmp_path):
    es = _fake_run(tmp_path, "es", 0, 4, [(s, {"es/generations": 10 * s, "time/step_s": 0.5,
                                               "policy/entropy": 1.0}) for s in range(1, 5)])
    grpo = _fake_run(tmp_path, "grpo", 0, 2, [(1, {"grpo/generations": 8, "time/step_s": 1.0, "policy/entropy": 2.0}),
                                              (2, {"grpo/generations": 16, "time/step_s": 2.0, "policy/entropy": 1.0})])
    runs = {("es", 0): es, ("grpo", 0): grpo}
    cost = C.cost_table(runs).set_index("method")
    assert cost.loc["es", "generations"] == 40 and cost.loc["es", "seconds"] == pytest.approx(2.0)
    assert cost.loc["grpo", "generations"] == 16 and cost.loc["grpo", "iterations"] == 2
    traces = C.entropy_traces(runs)
    assert list(traces["grpo seed=0"]["progress"]) == [0.5, 1.0]
    change = C.entropy_change(traces, frac=0.5).set_index("method")
    assert change.loc["grpo", "ratio"] == pytest.approx(0.5) and change.loc["es", "ratio"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="frac"):
        C.entropy_change(traces, frac=0.9)


def test_tables_from_results():
    table = _problems("x", 0, [1, 2]).drop(columns=["method", "seed"])
    curve = pd.DataFrame({"k": [1], "pass_at_k": [0.375], "ci_low": [0.25], "ci_high": [0.5]})
    res = {("base", -1): EvalResult(table, curve), ("es", 3): EvalResult(table, curve)}
    assert len(C.problem_table(res)) == 4 and set(C.problem_table(res)["seed"]) == {-1, 3}
    assert list(C.curve_table(res)["method"]) == ["base", "es"]


def test_describe_comparison():
    summary = pd.DataFrame({"method": ["base", "grpo", "es"], "pass@1": [0.18, 0.27, 0.22],
                            "pass@64": [0.90, 0.85, 0.93], "distinct_correct": [1.5, 1.1, 2.0],
                            "eval_entropy": [0.8, 0.3, 0.7], "train_entropy_ratio": [np.nan, 0.4, 0.98]})
    diffs = pd.DataFrame([{"a": a, "b": b, "k": k, "diff": d, "ci_low": d - 0.02, "ci_high": d + 0.02}
                          for a, b, k, d in [("es", "grpo", 1, -0.05), ("es", "grpo", 64, 0.08),
                                             ("es", "base", 1, 0.04), ("es", "base", 64, 0.03)]])
    text = C.describe_comparison(summary, diffs, n_seeds=3)
    assert text.startswith("pass@1 base 0.18 / GRPO 0.27 / ES 0.22; pass@64 base 0.90 / GRPO 0.85 / ES 0.93 (3 seeds)")
    assert "training entropy last/first GRPO x0.40 / ES x0.98" in text
    assert "ES pass@1 above base: yes (+0.040" in text
    assert "ES above GRPO at K=64: yes (+0.080 [+0.060, +0.100])" in text
    assert "GRPO wins at K=1: yes" in text


def test_verdict_says_within_noise_when_the_ci_straddles_zero():
    from esreason_lib.experiments.comparison import _verdict

    assert _verdict(0.01, 0.06) == "yes"
    assert _verdict(-0.05, -0.01) == "no"
    assert _verdict(-0.003, 0.010) == "within noise"


# ------------------------------------------------------------------------------------ the smoke study end to end
SEEDS = (0, 1)
REPORT_KEYS = {"runs", "cost", "problems", "curves", "mean_curves", "coverage", "summary", "traces",
               "entropy_change", "diffs"}


@pytest.fixture(scope="module")
def smoke_store(isolated_store):
    """(smoke preset, run store, default store): ESREASON_HOME is a second folder that must stay empty."""
    return get_preset("smoke"), isolated_store.store, isolated_store.default


@pytest.fixture(scope="module")
def report(smoke_store):
    preset, store, _ = smoke_store
    return C.comparison_report(preset, seeds=SEEDS, home=store, progress=False)


@pytest.fixture
def frozen(forbid_loading):
    """Any model load (training, pretraining or an uncached evaluation) fails the test."""
    import esreason_lib.models
    from esreason_lib.experiments import common

    forbid_loading(esreason_lib.models, common)


def test_report_trains_both_methods_for_every_seed(report, smoke_store):
    preset, store, default = smoke_store
    runs = report["runs"]
    assert list(runs) == [(m, s) for m in ("grpo", "es") for s in SEEDS]
    assert len({r.path for r in runs.values()}) == len(runs)
    for (method, seed), run in runs.items():
        assert run.kind == method and run.seed == seed == run.config["seed"]
        assert run.config["model"] == preset.base_model and run.config["task"] == preset.task
        assert run.config["iterations"] == getattr(preset, method).iterations
        assert run.is_complete() and run.path.parent == store and (run.model_dir / "config.json").is_file()
    assert not default.exists(), "the study wrote outside its run store"


def test_report_runs_are_the_shared_trained_runs_and_are_reused(report, smoke_store, frozen):
    from esreason_lib.experiments.common import trained_runs

    preset, store, _ = smoke_store
    before = {p.name: (p / "manifest.json").read_bytes() for p in store.iterdir() if (p / "manifest.json").exists()}
    runs = trained_runs(preset, ("grpo", "es"), home=store, progress=False)
    assert list(runs) == [("grpo", 0), ("es", 0)]  # smoke.seeds == (0,)
    assert all(runs[key].path == report["runs"][key].path for key in runs)
    after = {p.name: (p / "manifest.json").read_bytes() for p in store.iterdir() if (p / "manifest.json").exists()}
    assert after == before


def test_evaluate_runs_evaluates_the_base_and_every_trained_model(report, smoke_store, frozen):
    preset, store, _ = smoke_store
    results = C.evaluate_runs(preset, report["runs"], home=store, progress=False)  # all cached by the report
    assert list(results) == [("base", C.BASE_SEED), *report["runs"]]
    for res in results.values():
        assert len(res.table) == preset.eval.n_problems and (res.table["n"] == preset.eval.n_samples).all()
        assert res.table["c"].between(0, preset.eval.n_samples).all()
        assert res.curve["k"].tolist() == list(preset.eval.ks) and res.curve["pass_at_k"].between(0, 1).all()
    pd.testing.assert_frame_equal(C.problem_table(results), report["problems"])
    evaluated = {json.loads((p / "config.json").read_text())["model"] for p in store.glob("eval-*")}
    assert evaluated == {preset.base_model} | {str(run.model_dir) for run in report["runs"].values()}


def test_comparison_report_tables_agree_with_each_other(report, smoke_store):
    preset, _, _ = smoke_store
    assert set(report) == REPORT_KEYS
    ks, P, n_evals = list(preset.eval.ks), preset.eval.n_problems, 1 + 2 * len(SEEDS)
    assert len(report["problems"]) == n_evals * P and len(report["curves"]) == n_evals * len(ks)

    cost = report["cost"].set_index(["method", "seed"])
    es, grpo = preset.es, preset.grpo
    assert (cost.xs("es", level="method")["generations"] ==
            es.population_size * es.prompts_per_step * es.iterations).all()
    assert (cost.xs("grpo", level="method")["generations"] ==
            grpo.group_size * grpo.prompts_per_step * grpo.iterations).all()

    mean = report["mean_curves"].set_index(["method", "k"])
    assert list(mean.index.get_level_values(0).unique()) == ["base", "grpo", "es"]
    assert mean["n_seeds"].to_dict() == {(m, k): (1 if m == "base" else len(SEEDS)) for m in C.METHOD_ORDER for k in ks}
    assert mean["pass_at_k"].between(0, 1).all()
    assert ((mean["seed_min"] <= mean["pass_at_k"] + 1e-12) & (mean["pass_at_k"] <= mean["seed_max"] + 1e-12)).all()

    cov = report["coverage"]
    assert len(cov) == n_evals and {"pass@1", f"pass@{max(ks)}"} <= set(cov.columns)
    assert cov["solved"].to_numpy() == pytest.approx(cov[f"pass@{preset.eval.n_samples}"].to_numpy())  # Pass@n

    summary = report["summary"].set_index("method")
    assert list(summary.index) == ["base", "grpo", "es"]
    for col in ("pass@1", f"pass@{max(ks)}", "solved", "eval_entropy"):
        assert (summary[f"{col}_min"] <= summary[col] + 1e-12).all()
        assert (summary[col] <= summary[f"{col}_max"] + 1e-12).all()
    assert np.isnan(summary.loc["base", "train_entropy_ratio"]) and summary.loc["es", "train_entropy_ratio"] > 0

    assert set(report["traces"]) == {f"{m} seed={s}" for m in ("grpo", "es") for s in SEEDS}
    assert all(t["progress"].iloc[-1] == 1.0 for t in report["traces"].values())
    change = report["entropy_change"]
    assert len(change) == 2 * len(SEEDS) and change["ratio"].to_numpy() == pytest.approx(
        (change["last"] / change["first"]).to_numpy())

    diffs = report["diffs"]
    assert list(diffs[["a", "b", "k"]].itertuples(index=False, name=None)) == [
        (a, b, k) for a, b in (("es", "grpo"), ("es", "base"), ("grpo", "base")) for k in (1, max(ks))]
    for _, d in diffs.iterrows():  # same problems for every seed: the paired mean is the difference of means
        assert d["diff"] == pytest.approx(summary.loc[d["a"], f"pass@{d['k']}"] - summary.loc[d["b"], f"pass@{d['k']}"])
        assert d["ci_low"] - 1e-12 <= d["diff"] <= d["ci_high"] + 1e-12
    text = C.describe_comparison(report["summary"], diffs, len(SEEDS))
    assert text.startswith("pass@1 base ") and f"({len(SEEDS)} seeds)" in text
