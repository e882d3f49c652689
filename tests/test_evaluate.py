"""Tests for esreason_lib.evaluation on a stub task whose verdicts are computable by hand from the samples."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from toy_tasks import FirstCharTask

from esreason_lib import metrics
from esreason_lib.evaluation import (
    CURVE_COLUMNS,
    MAJ_COLUMNS,
    PROBLEM_COLUMNS,
    SAMPLE_COLUMNS,
    EvalResult,
    EvalSpec,
    evaluate,
)
from esreason_lib.models.generation import Forward, Sampling, generate
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.seeding import derive_seed
from esreason_lib.store.runs import Run

DIGITS = set("0123456789")


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    m = tiny_random_qwen2(len(tok), seed=1)
    with torch.no_grad():
        m.lm_head.weight.mul_(6.0)
    return m.eval()


@pytest.fixture(scope="module")
def task():
    return FirstCharTask()


def _by_hand(model, tok, task, n, seed, batch_size):
    """Regenerate the samples exactly as evaluate draws them (one chunk) and score them by hand."""
    exs = task.examples()
    ro = generate(model, tok, [e["prompt"] for e in exs], Sampling(max_new_tokens=task.max_new_tokens), n=n,
                  seed=derive_seed(seed, "eval", 0), forward=Forward(batch_size=batch_size))
    rows = []
    for q, ex in enumerate(exs):
        texts = ro.completions[q * n:(q + 1) * n]
        ok = [ex["ok"] is None or (t[:1] != "" and t[0] in ex["ok"]) for t in texts]
        rows.append(dict(c=sum(ok), distinct=len({t[:1] for t, o in zip(texts, ok) if o and t}),
                         reward=np.mean([1.0 if o else (0.1 if t else 0.0) for t, o in zip(texts, ok)]),
                         length=float(ro.completion_mask[q * n:(q + 1) * n].sum()) / n))
    return rows


def test_table_matches_hand_computation(model, tok, task):
    res = evaluate(model, tok, task, task.examples(), EvalSpec(n_samples=8, ks=(1, 2, 8), seed=3, batch_size=64),
                   progress=False)
    assert isinstance(res, EvalResult)
    assert list(res.table.columns) == list(PROBLEM_COLUMNS)
    assert res.table["problem_id"].tolist() == ["007", "never", "digit", "upper"]
    hand = _by_hand(model, tok, task, 8, 3, 64)
    assert res.table["n"].tolist() == [8] * 4
    assert res.table["c"].tolist() == [h["c"] for h in hand]
    assert res.table.loc[0, "c"] == 8 and res.table.loc[1, "c"] == 0
    assert res.table["distinct_correct"].tolist() == [h["distinct"] for h in hand]
    np.testing.assert_allclose(res.table["mean_reward"], [h["reward"] for h in hand])
    np.testing.assert_allclose(res.table["mean_length"], [h["length"] for h in hand])
    assert np.all(res.table["mean_entropy"] > 0)
    # greedy column: the first greedy character decides
    g = generate(model, tok, [e["prompt"] for e in task.examples()], Sampling(greedy=True, max_new_tokens=6))
    expected = [task.is_correct(t, e) for t, e in zip(g.completions, task.examples())]
    assert res.table["greedy_correct"].tolist() == expected
    assert res.table.loc[0, "greedy_correct"] and not res.table.loc[1, "greedy_correct"]


def test_curve_and_summary(model, tok, task):
    res = evaluate(model, tok, task, task.examples(), EvalSpec(n_samples=8, ks=(8, 1, 4, 2, 1), seed=0, batch_size=64),
                   progress=False)
    assert list(res.curve.columns) == list(CURVE_COLUMNS)
    assert res.curve["k"].tolist() == [1, 2, 4, 8]  # sorted, each k once
    n, c = res.table["n"].to_numpy(), res.table["c"].to_numpy()
    np.testing.assert_allclose(res.curve["pass_at_k"], metrics.pass_at_k_curve(n, c, [1, 2, 4, 8]))
    assert np.all(res.curve["ci_low"] <= res.curve["pass_at_k"] + 1e-12)
    assert np.all(res.curve["pass_at_k"] <= res.curve["ci_high"] + 1e-12)
    assert np.all(np.diff(res.curve["pass_at_k"]) >= -1e-12)  # Pass@k is monotone in k
    s = res.summary()
    assert s["eval/pass@1"] == pytest.approx(c.sum() / (8 * 4))
    assert s["eval/greedy"] == pytest.approx(res.table["greedy_correct"].mean())
    assert {"eval/pass@8", "eval/mean_reward", "eval/entropy", "eval/length", "eval/distinct_correct"} <= set(s)


def test_two_problem_curve_is_exact(model, tok, task):
    """One always-correct and one never-correct problem: Pass@k = 0.5 for every k."""
    res = evaluate(model, tok, task, task.examples(n=2), EvalSpec(n_samples=4, ks=(1, 2, 4)), progress=False)
    np.testing.assert_allclose(res.curve["pass_at_k"], [0.5, 0.5, 0.5])


def test_no_greedy_and_determinism(model, tok, task):
    a = evaluate(model, tok, task, task.examples(),
                 EvalSpec(n_samples=4, ks=(1, 2, 4), greedy=False, seed=5, batch_size=8), progress=False)
    b = evaluate(model, tok, task, task.examples(),
                 EvalSpec(n_samples=4, ks=(1, 2, 4), greedy=False, seed=5, batch_size=8), progress=False)
    assert a.table["greedy_correct"].isna().all() and "eval/greedy" not in a.summary()
    pd.testing.assert_frame_equal(a.table, b.table)
    pd.testing.assert_frame_equal(a.curve, b.curve)


def test_run_cache_roundtrip(model, tok, task, tmp_path):
    run = Run.open("eval-test", {"x": 1}, seed=0, home=tmp_path)
    res = evaluate(model, tok, task, task.examples(), EvalSpec(n_samples=4, ks=(1, 2, 4), seed=2), run=run,
                   name="final", progress=False)
    assert (run.read_table("final_problems") is not None) and (run.read_table("final_curve") is not None)
    # a second call reloads: the model is never touched (None would fail inside generate)
    again = evaluate(None, tok, task, task.examples(), EvalSpec(n_samples=4, ks=(1, 2, 4), seed=2), run=run,
                     name="final", progress=False)
    pd.testing.assert_frame_equal(again.table, res.table)
    pd.testing.assert_frame_equal(again.curve, res.curve, check_exact=False, rtol=1e-12)
    assert again.summary() == pytest.approx(res.summary())
    # another n under the same name is recomputed
    more = evaluate(model, tok, task, task.examples(), EvalSpec(n_samples=2, ks=(1, 2), seed=2), run=run, name="final",
                    progress=False)
    assert more.table["n"].tolist() == [2] * 4
    # other problems under the same name are recomputed (and overwrite the cache)
    fresh = evaluate(model, tok, task, task.examples(n=2), EvalSpec(n_samples=4, ks=(1, 2, 4), seed=2), run=run,
                     name="final", progress=False)
    assert fresh.table["problem_id"].tolist() == ["007", "never"]
    assert len(run.read_table("final_problems")) == 2


def test_no_greedy_roundtrip(model, tok, task, tmp_path):
    run = Run.open("eval-test", {"x": 2}, seed=0, home=tmp_path)
    res = evaluate(model, tok, task, task.examples(), EvalSpec(n_samples=2, ks=(1, 2), greedy=False), run=run,
                   progress=False)
    again = evaluate(None, tok, task, task.examples(), EvalSpec(n_samples=2, ks=(1, 2), greedy=False), run=run,
                     progress=False)
    pd.testing.assert_frame_equal(again.table, res.table)


def test_progress_bar_runs(model, tok, task):
    res = evaluate(model, tok, task, task.examples(n=2), EvalSpec(n_samples=2, ks=(1, 2), batch_size=2), progress=True)
    assert len(res.table) == 2


@pytest.mark.parametrize("kwargs,match", [({"n_samples": 0}, "EvalSpec.n_samples must be >= 1, got 0"),
                                          ({"ks": (32,)}, "EvalSpec.ks"),
                                          ({"batch_size": 0}, "EvalSpec.batch_size must be a positive int, got 0")])
def test_eval_spec_validates(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EvalSpec(**{"n_samples": 4, "ks": (1, 4), **kwargs})


def test_evaluate_takes_an_eval_spec(model, tok, task):
    with pytest.raises(TypeError, match="spec must be an EvalSpec, got dict"):
        evaluate(model, tok, task, task.examples(), {"n_samples": 4}, progress=False)
    spec = EvalSpec(n_samples=4, ks=(1, 4), temperature=0.5, top_p=0.9, sampler="inverse-cdf", forward="fused",
                    share_prefixes=True, batch_size=64)
    assert spec.sampling(7) == Sampling(temperature=0.5, top_p=0.9, max_new_tokens=7, sampler="inverse-cdf")
    assert EvalSpec(max_new_tokens=3).sampling(7).max_new_tokens == 3  # the spec's own budget wins
    assert spec.forward_path() == Forward(kind="fused", share_prefixes=True, batch_size=64)


def test_evaluate_rejects_empty_and_duplicate_examples(model, tok, task):
    with pytest.raises(ValueError, match="empty"):
        evaluate(model, tok, task, [], progress=False)
    ex = task.examples(n=1)
    with pytest.raises(ValueError, match="distinct ids"):
        evaluate(model, tok, task, ex + ex, progress=False)


@pytest.mark.parametrize("name", ["countdown", "addition", "sorting"])
def test_real_synthetic_tasks_smoke(model, tok, name):
    from esreason_lib.tasks import get_task

    real = get_task(name)
    exs = real.examples("test", n=3)
    res = evaluate(model, tok, real, exs, EvalSpec(n_samples=2, ks=(1, 2), batch_size=8), progress=False)
    assert res.table["problem_id"].tolist() == [str(e["id"]) for e in exs]
    assert res.table["mean_length"].max() <= real.max_new_tokens
    assert set(res.summary()) >= {"eval/greedy", "eval/pass@1", "eval/pass@2"}


def test_samples_table_and_maj_curve(model, tok, task, tmp_path):
    res = evaluate(model, tok, task, task.examples(), EvalSpec(n_samples=8, ks=(1, 2, 8), seed=3, batch_size=64),
                   progress=False)
    assert list(res.samples.columns) == list(SAMPLE_COLUMNS) and len(res.samples) == 4 * 8
    assert res.samples["sample"].tolist() == list(range(8)) * 4
    per_problem = res.samples.groupby("problem_id", sort=False)["correct"].sum()
    assert per_problem.tolist() == res.table["c"].tolist()  # the samples are the ones Pass@k counted
    ro = generate(model, tok, [e["prompt"] for e in task.examples()], Sampling(max_new_tokens=6), n=8,
                  seed=derive_seed(3, "eval", 0), forward=Forward(batch_size=64))
    assert res.samples["answer"].tolist() == [task.extract_answer(t) for t in ro.completions]
    maj = res.maj_curve()
    assert list(maj.columns) == list(MAJ_COLUMNS) and maj["k"].tolist() == [1, 2, 8]
    # k = n is exact: the majority of all 8 answers, scored by hand
    want = metrics.maj_at_k([g["answer"].tolist() for _, g in res.samples.groupby("problem_id", sort=False)],
                            [g["correct"].tolist() for _, g in res.samples.groupby("problem_id", sort=False)], 8)
    assert maj.loc[2, "maj_at_k"] == pytest.approx(want.mean())
    assert maj.loc[0, "maj_at_k"] == pytest.approx(res.curve.loc[0, "pass_at_k"], abs=0.1)  # Maj@1 ~ Pass@1
    # the cache round trip keeps every answer (including None and digit strings such as "007") exactly
    run = Run.open("eval-test", {"x": 3}, seed=0, home=tmp_path)
    first = evaluate(model, tok, task, task.examples(), EvalSpec(n_samples=8, ks=(1, 2, 8), seed=3, batch_size=64),
                     run=run, progress=False)
    again = evaluate(None, tok, task, task.examples(), EvalSpec(n_samples=8, ks=(1, 2, 8), seed=3, batch_size=64),
                     run=run, progress=False)
    pd.testing.assert_frame_equal(again.samples, first.samples)
    # a cache from before samples were stored still reloads, without them
    (run.path / "results" / "eval_samples.csv").unlink()
    old = evaluate(None, tok, task, task.examples(), EvalSpec(n_samples=8, ks=(1, 2, 8), seed=3, batch_size=64),
                   run=run, progress=False)
    assert old.samples is None
    pd.testing.assert_frame_equal(old.table, first.table)
    with pytest.raises(ValueError, match="no per-sample answers"):
        old.maj_curve()
