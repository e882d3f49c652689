"""Pure functions of notebook 01's experiments module (ES vs GRPO), on hand-computable tables and fake runs."""

import numpy as np
import pandas as pd
import pytest

from esreason_lib.evaluate import EvalResult
from esreason_lib.experiments import comparison as C
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
