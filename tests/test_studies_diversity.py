"""Notebook 02's study modules (`paper.studies.diversity`, its measurements and estimators): the estimators on
hand-computable cases, and the pipeline on a tiny model."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from esreason_lib.es.config import ESConfig
from esreason_lib.es.noise import perturbed
from esreason_lib.methods import trainer
from esreason_lib.metrics import js_policy_exact
from esreason_lib.models.pretrain import pretrain
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.paper.findings import effect_check
from esreason_lib.paper.mde import mde_from_ci
from esreason_lib.paper.studies import diversity as div
from esreason_lib.paper.studies import diversity_estimators as est
from esreason_lib.paper.studies import diversity_model_passes as passes
from esreason_lib.paper.studies.presets import get_preset
from esreason_lib.paper.theory import fisher_trace, lemma1_prediction
from esreason_lib.tasks import get_task
from esreason_lib.tasks.base import RewardShaping
from esreason_lib.tasks.countdown import Countdown

# ----------------------------------------------------------------------------------- token-level JS_pol


def _log_softmax(x):
    return torch.log_softmax(torch.as_tensor(x, dtype=torch.float64), dim=-1)


def test_tokenwise_kl_one_token_is_exact_categorical_js():
    rng = np.random.default_rng(0)
    probs = _log_softmax(rng.normal(size=(3, 5)))  # [M, V]
    logp = probs[:, None, None, :].expand(3, 3, 1, 5).clone()  # [M, B=3 rows, T=1, V]
    tokens, mask = torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1, dtype=torch.bool)
    kl = est.tokenwise_kl(logp, tokens, mask, torch.arange(3))  # row b drawn from member b
    assert float(kl.mean()) == pytest.approx(js_policy_exact(probs.exp().numpy()), rel=1e-12)


def test_tokenwise_kl_two_tokens_averages_to_the_exact_sequence_kl():
    rng = np.random.default_rng(1)
    m, v = 2, 3
    first = _log_softmax(rng.normal(size=(m, v)))  # [M, V] log p_j(a)
    second = _log_softmax(rng.normal(size=(m, v, v)))  # [M, V(a), V(b)] log q_j(b | a)
    seqs = list(itertools.product(range(v), range(v)))  # all 9 sequences (a, b)
    logp = torch.stack([torch.stack([torch.stack([first[j], second[j, a]]) for a, _ in seqs]) for j in range(m)])
    tokens = torch.tensor(seqs)  # [9, 2]
    mask = torch.ones(9, 2, dtype=torch.bool)
    seq_p = np.array([[float((first[j, a] + second[j, a, b]).exp()) for a, b in seqs] for j in range(m)])  # [M, 9]
    exact = js_policy_exact(seq_p)
    estimate = 0.0
    for i in range(m):  # E_{y ~ pi_i} of the per-row estimate, by enumeration
        kl = est.tokenwise_kl(logp, tokens, mask, torch.full((9,), i)).numpy()
        estimate += (seq_p[i] * kl).sum() / m
    assert estimate == pytest.approx(exact, rel=1e-10)


def test_token_logprobs_masks_and_gathers():
    logp = _log_softmax(torch.zeros(1, 2, 2, 4))  # uniform over 4
    tok = est.token_logprobs(logp, torch.tensor([[1, 2], [3, 0]]), torch.tensor([[True, False], [True, True]]))
    assert tok.shape == (1, 2, 2)
    assert tok[0, 0, 1] == 0 and tok[0, 1, 1] == pytest.approx(-np.log(4))


# ----------------------------------------------------------------------------------- success estimates


def test_mis_success_hand_case_and_edges():
    lp = np.log([[0.2, 0.6], [0.6, 0.2]])  # [M=2, B=2]; pi_bar = 0.4 on both rows
    # member 0: ratios (0.5, 1.5), member 1: (1.5, 0.5); only row 0 correct
    np.testing.assert_allclose(est.mis_success(lp, [1, 0]), [0.5 / 2.0, 1.5 / 2.0])
    np.testing.assert_allclose(est.mis_success(lp, [1, 1]), [1.0, 1.0])
    np.testing.assert_allclose(est.mis_success(lp, [0, 0]), [0.0, 0.0])
    same = np.zeros((3, 4))  # identical members: the plain fraction correct
    np.testing.assert_allclose(est.mis_success(same, [1, 0, 0, 1]), [0.5] * 3)


def test_is_success_and_ess():
    base = np.log([0.5, 0.5])
    target = np.log([[0.25, 0.75]])
    assert est.is_success(target, base, [0, 1])[0] == pytest.approx(0.75)
    assert est.ess_fraction(np.zeros((1, 5)), np.zeros(5))[0] == pytest.approx(1.0)
    assert est.ess_fraction(np.array([[50.0, 0, 0, 0]]), np.zeros(4))[0] == pytest.approx(0.25, rel=1e-6)


def test_fitness_weights():
    np.testing.assert_allclose(est.fitness_weights([1.0, -1.0, 2.0, 0.0]), [1 / 3, 0, 2 / 3, 0])
    np.testing.assert_allclose(est.fitness_weights([0.0, 0.0]), [0.5, 0.5])
    w = est.fitness_weights([0.0, np.log(3.0)], "softmax")
    np.testing.assert_allclose(w, [0.25, 0.75])
    with pytest.raises(ValueError, match="scheme"):
        est.fitness_weights([1.0], "rank")


def test_bernoulli_kl_pass_k_and_slope():
    assert est.bernoulli_kl(0.5, 0.25) == pytest.approx(0.5 * np.log(4 / 3))
    assert est.bernoulli_kl(0.0, 0.0) == 0.0 and est.bernoulli_kl(1.0, 1.0) == 0.0
    assert np.isfinite(est.bernoulli_kl(0.5, 0.0)) and est.bernoulli_kl(0.5, 0.0) > 10
    np.testing.assert_allclose(est.bernoulli_kl([0.1, 0.3], [0.1, 0.3]), [0.0, 0.0])
    assert est.pass_k(0.5, 2) == pytest.approx(0.75)
    assert est.pass_k(1.0 + 2.2e-16, 1) == 1.0 and est.pass_k(-1e-17, 3) == 0.0  # rounding of stored estimates
    with pytest.raises(ValueError, match="p must lie"):
        est.pass_k(1.01, 2)
    x = np.array([1e-4, 1e-3, 1e-2])
    assert est.loglog_slope(x, 3 * x**2) == pytest.approx(2.0)
    np.testing.assert_allclose(est.loglog_slope(x, np.stack([x, 5 * x**3])), [1.0, 3.0])  # rows: [2, S] -> [2]
    assert np.isnan(est.loglog_slope(x, [1e-6, 1e-4, -1.0])) and np.isnan(est.loglog_slope([1.0], [1.0]))


def test_nanmedian_rows():
    x = np.array([[[[1.0, np.nan, 3.0, 10.0]]], [[[np.nan] * 4]]])  # [2, S=1, R=1, P=4]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = est.nanmedian_rows(x)
    assert out[0] == 3.0 and np.isnan(out[1])


def test_grid_bootstrap_resamples_populations_and_shares_prompts():
    by_pop = np.array([[[0.0], [1.0]]])  # [S=1, R=2, P=1]: populations differ
    estimate, draws = est.grid_bootstrap([by_pop], lambda g: g.mean(axis=(-3, -2, -1)), n_boot=4000)
    assert estimate == 0.5 and set(np.unique(draws)) == {0.0, 0.5, 1.0}
    assert np.mean(draws == 0.5) == pytest.approx(0.5, abs=0.03)  # 2 of the 4 equally likely pairs
    by_prompt = np.tile(np.arange(3.0), (2, 2, 1))  # [S=2, R=2, P=3]: value = prompt index
    _, draws = est.grid_bootstrap([by_prompt],
                                  lambda g: g[..., 0, :].mean(-1).mean(-1) - g[..., 1, :].mean(-1).mean(-1))
    assert np.all(draws == 0)  # every population sees the same resampled prompts
    _, draws = est.grid_bootstrap([by_prompt, 2 * by_prompt], lambda a, b: (b - 2 * a).sum(axis=(-3, -2, -1)))
    assert np.all(draws == 0)  # several grids share each resample


def test_band_checks():
    lo, hi = est.band_checks("slope", 2.0, np.linspace(1.9, 2.1, 101), (1.8, 2.2))
    assert (lo.name, lo.direction, lo.threshold) == ("slope > 1.8", "greater", 1.8) and hi.name == "slope < 2.2"
    assert lo.status == hi.status == "reproduced" and lo.n_seeds is None
    assert lo.ci_low == pytest.approx(1.905) and lo.mde == pytest.approx(mde_from_ci(lo.ci_low, lo.ci_high))
    lo, hi = est.band_checks("slope", 1.0, np.linspace(0.9, 1.1, 101), (1.8, 2.2))
    assert lo.status == "not reproduced" and hi.status == "reproduced"
    lo, hi = est.band_checks("slope", 2.0, [2.0, np.nan], (1.8, 2.2))
    assert lo.status == hi.status == "not resolved"


# ----------------------------------------------------------------------------------- model pieces


@pytest.fixture(scope="module")
def tiny():
    tok = build_char_tokenizer()
    return tiny_random_qwen2(len(tok), seed=0), tok


def _rollouts(model, tok, n=2, seed=0):
    from esreason_lib.models.generation import Sampling, generate

    return generate(model, tok, ["12+3=", "7+8="], Sampling(max_new_tokens=5), n=n, seed=seed)


def test_full_logprobs_and_sequence_logp_agree_with_generation(tiny):
    model, tok = tiny
    ro = _rollouts(model, tok)
    batch = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    full = passes.full_logprobs(model, *batch)  # [B, T, V]
    assert full.shape[:2] == ro.completion_ids.shape and full.dtype == torch.float64
    seq = est.token_logprobs(full[None], ro.completion_ids, ro.completion_mask).sum(-1)[0].numpy()
    np.testing.assert_allclose(seq, passes.sequence_logp(model, *batch), atol=1e-4)
    np.testing.assert_allclose(seq, ro.logprobs.sum(-1).double().numpy(), atol=1e-4)


def test_stack_rollouts_pads_completions(tiny):
    model, tok = tiny
    a, b = _rollouts(model, tok, seed=0), _rollouts(model, tok, seed=1)
    pid, pmask, cid, cmask = passes.stack_rollouts([a, b], tok.pad_token_id)
    assert pid.shape[0] == cid.shape[0] == 8
    assert cid.shape[1] == max(a.completion_ids.shape[1], b.completion_ids.shape[1])
    assert int(cmask.sum()) == int(a.completion_mask.sum() + b.completion_mask.sum())


def test_fisher_projections_match_fisher_trace_and_finite_differences(tiny):
    model, tok = tiny
    ro = _rollouts(model, tok)
    batch = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    directions = passes.flat_directions(model, [11, 12])  # [2, D]
    sq, proj = passes.fisher_projections(model, *batch, directions)
    np.testing.assert_allclose(sq, fisher_trace(model, *batch, per_sample=True), rtol=1e-5)
    h = 1e-3
    with perturbed(model, 11, 1, h):
        up = passes.sequence_logp(model, *batch)
    with perturbed(model, 11, -1, h):
        down = passes.sequence_logp(model, *batch)
    np.testing.assert_allclose(proj[:, 0], (up - down) / (2 * h), rtol=0.05, atol=1e-2)


# ----------------------------------------------------------------------------------- pipeline and tables


def test_lemma_cells_on_a_tiny_model(tiny):
    model, tok = tiny
    task = get_task("countdown")
    examples = task.examples("test", n=2, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    cells, members = div.lemma_cells(model, tok, task, examples, sigmas=(1e-3, 1e-2), population=3, repeats=2,
                                     samples=2, fisher_samples=2, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # exact restore
    assert len(cells) == 2 * 2 * 2 and len(members) == 3 * len(cells)
    assert (cells["js_pol"] > 0).all() and (cells["p_pop"] >= cells["p_same"] - 1e-12).all()
    assert (cells["n_samples"] == 6).all()
    table = div.lemma1_table(cells)
    assert list(table["sigma"]) == [1e-3, 1e-2]
    assert np.isfinite(table[["ratio", "ratio_pop", "js_pol_se"]].to_numpy()).all()
    # same draws at both sigmas: the second-order predictions scale exactly as sigma^2
    assert table["prediction_pop"].iloc[1] / table["prediction_pop"].iloc[0] == pytest.approx(100.0)


def test_probe_rows_hand_case():
    rows = est.probe_rows([[0.2, 0.4]], np.array([0.5, 0.5]), [0.1], [0.3], [0.25])
    r = rows.iloc[0]
    assert list(rows.columns) == ["prompt", "p_theta", "p_bar", "p_w", "p_plus", "p_next", "kl", "lift", "lemma3_err",
                                  "js_succ"]
    assert r["p_w"] == pytest.approx(0.3) and r["p_bar"] == pytest.approx(0.3) and r["p_next"] == 0.25
    assert r["kl"] == pytest.approx(0.0, abs=1e-12) and r["lift"] == pytest.approx(0.0) and r["lemma3_err"] < 1e-15
    r = est.probe_rows([[0.2, 0.4]], np.array([0.0, 1.0]), [0.3], [0.3], [0.3]).iloc[0]
    assert r["lift"] == pytest.approx(0.1) and r["kl"] == pytest.approx(est.bernoulli_kl(0.4, 0.3))


def _probes(p_next=0.3, seeds=3, iterations=4, prompts=6, p_w=0.3):
    """Hand-built `compute_prop1` rows: p_theta = p_fresh = 0.28, p_plus = p_w - 0.001 (kl ~ 2e-6), p_next =
    `p_next` + small noise, js_succ rising with that noise (the diversity-to-Pass@K link holds)."""
    rng = np.random.default_rng(2)
    rows = []
    for s, i, p in itertools.product(range(seeds), range(iterations), range(prompts)):
        noise = 0.002 * rng.standard_normal()
        rows.append({"seed": s, "iteration": i + 1, "prompt": p, "p_theta": 0.28, "p_bar": 0.3, "p_w": p_w,
                     "p_plus": p_w - 0.001, "p_next": float(np.clip(p_next + noise, 0, 1)),
                     "kl": est.bernoulli_kl(p_w, p_w - 0.001), "lift": 0.0, "lemma3_err": 1e-17, "reward_mean": 0.1,
                     "ess_min": 0.9, "js_succ": 0.01 + noise + 0.0005 * rng.standard_normal(), "p_fresh": 0.28})
    return pd.DataFrame(rows)


def test_prop1_table_and_slack_hand_case():
    probes = pd.DataFrame({"seed": 0, "iteration": 1, "prompt": [0, 1], "p_theta": [0.2, 0.2], "p_bar": 0.3,
                           "p_w": [0.5, 0.2], "p_plus": 0.3, "p_next": [0.6, 0.1], "kl": [0.02, 0.0],
                           "lift": 0.0, "lemma3_err": 0.0, "reward_mean": 0.1, "ess_min": 1.0})
    np.testing.assert_allclose(est.prop1_slack(probes, 1), [[0.6 - (0.5 - 0.1), 0.1 - 0.2]])  # sqrt(0.02/2) = 0.1
    t = est.prop1_table(probes, ks=(1, 2)).set_index("k")
    assert t.loc[1, "jk_w"] == pytest.approx(0.35) and t.loc[1, "eps"] == pytest.approx(0.01)
    assert t.loc[1, "threshold"] == pytest.approx(np.sqrt(0.005)) and t.loc[2, "threshold"] == pytest.approx(
        2 * np.sqrt(0.005))
    assert t.loc[1, "margin"] == pytest.approx(0.15) and t.loc[1, "condition"]  # 0.15 > 0.0707
    assert t.loc[1, "change"] == pytest.approx(0.35 - 0.2) and t.loc[1, "rose"]
    assert t.loc[2, "jk_theta"] == pytest.approx(1 - 0.8**2)
    s1 = div.prop1_summary(est.prop1_table(probes, ks=(1,)))
    assert s1.iloc[0].to_dict() == {"k": 1, "iterations": 1, "condition": 1, "rose_given_condition": 1, "rose": 1}


def test_prop1_trajectory_on_a_tiny_model(tiny):
    model, tok = tiny
    model = tiny_random_qwen2(len(tok), seed=1)  # trained in place: a fresh copy
    task = get_task("countdown", shaping=RewardShaping(1.0, 0.0, 0.0))
    config = ESConfig(model="unused", population_size=2, sigma=1e-2, alpha=1e-2, iterations=2, prompts_per_step=2,
                      antithetic=True, device="cpu")
    table = div.prop1_trajectory(config, model, tok, task, task.examples("test", n=3, seed=0), samples=2,
                                 progress=False)
    assert len(table) == 2 * 3 and list(table["iteration"].unique()) == [1, 2]
    assert table["ess_min"].between(0, 1).all() and (table["lemma3_err"] < 1e-12).all()
    assert table["p_next"].isin([0.0, 0.5, 1.0]).all()  # a fraction of the 2 fresh samples


def test_prop1_trajectory_resumes_where_it_stopped(tiny, tmp_path, monkeypatch):
    """Interrupted in its third iteration, a trajectory run resumes from its checkpoint (iterations 1-2 are not
    run again) and returns the uninterrupted call's table and centre, bit for bit."""
    from esreason_lib.paper.studies import diversity_measurements as meas
    from esreason_lib.store.runs import Run

    _, tok = tiny
    task = get_task("countdown", shaping=RewardShaping(1.0, 0.0, 0.0))
    config = ESConfig(model="unused", population_size=2, sigma=1e-2, alpha=1e-2, iterations=3, prompts_per_step=2,
                      antithetic=True, device="cpu")
    probes = task.examples("test", n=3, seed=0)
    kwargs = {"samples": 2, "progress": False, "independent": True}
    whole_model = tiny_random_qwen2(len(tok), seed=1)
    whole = meas.prop1_trajectory(config, whole_model, tok, task, probes, **kwargs)
    real, calls = meas.es_step, []

    def counted(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(meas, "es_step", counted)
    run = Run.open("diversity-prop1", {"test": "resume"}, seed=0, home=tmp_path, lock=True)
    with pytest.raises(KeyboardInterrupt):
        meas.prop1_trajectory(config, tiny_random_qwen2(len(tok), seed=1), tok, task, probes, run=run, **kwargs)
    assert sorted(p.name for p in (run.path / "checkpoints").glob("*.pt")) == ["step-000001.pt", "step-000002.pt"]
    calls.clear()
    model = tiny_random_qwen2(len(tok), seed=1)  # the base: the checkpoint restores the centre
    resumed = meas.prop1_trajectory(config, model, tok, task, probes, run=run, **kwargs)
    assert len(calls) == 1  # only the third iteration ran again
    pd.testing.assert_frame_equal(resumed, whole, check_exact=True)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), whole_model.state_dict().values()))
    assert list(run.metrics()["step"]) == [1, 2, 3]


def test_small_sigmas():
    assert div.small_sigmas([1e-2, 1e-4, 3e-4, 1e-3, 3e-3]) == [1e-4, 3e-4, 1e-3]
    assert div.small_sigmas([1e-3, 1e-2]) == [1e-3, 1e-2]
    assert div.small_sigmas([1e-3]) == [1e-3]


def _cells(slope=2.0, ratio=1.0, gap_ratio=1.0, n=8):
    """Hand-built `lemma_cells` rows on 3 sigmas x 3 populations x 4 prompts: JS_pol = ratio x Lemma 1's prediction
    x (sigma / 1e-3)^(slope - 2), gap = gap_ratio x gap_approx, each with a few percent of noise."""
    rng = np.random.default_rng(1)
    rows = []
    for sigma in (1e-4, 1e-3, 1e-2):
        for rep in range(3):
            for p in range(4):
                trace = 100.0 * (1 + p / 10)
                pred = lemma1_prediction(sigma, n, trace)
                js = ratio * pred * (sigma / 1e-3) ** (slope - 2) * (1 + 0.03 * rng.standard_normal())
                approx = 0.01 * (1 + 0.2 * rng.standard_normal())
                rows.append({"sigma": sigma, "repeat": rep, "prompt": p, "fisher_trace": trace, "prediction": pred,
                             "prediction_pop": pred, "js_pol": js, "js_pol_mc": js, "js_succ": js / 10,
                             "n_correct": 3 + p % 2, "n_samples": n * 8, "p_bar": 0.4, "p_pop": 0.9, "p_same": 0.8,
                             "gap": gap_ratio * approx * (1 + 0.02 * rng.standard_normal()), "gap_approx": approx})
    return pd.DataFrame(rows)


def _tables(cells=None, probes=None):
    probes = _probes() if probes is None else probes
    return {"cells": _cells() if cells is None else cells, "probes": probes, "prop1": est.prop1_table(probes, (1, 4)),
            "deltas": pd.DataFrame([{"delta_change": 0.01, "delta_condition": 3e-4, "delta_link": 0.1}])}


def test_lemma1_table_and_plot_tables():
    cells = _cells()
    t = div.lemma1_table(cells)
    assert list(t["sigma"]) == [1e-4, 1e-3, 1e-2] and t["ratio"].between(0.97, 1.03).all()
    per_rep = cells[cells["sigma"] == 1e-4].groupby("repeat")["js_pol"].mean()
    assert t["js_pol_se"].iloc[0] == pytest.approx(per_rep.std(ddof=1) / np.sqrt(3))
    long = div.lemma1_plot_table(cells)
    assert set(long["estimator"]) == {"JS_pol token-level", "JS_pol sequence MC", "sigma^2 Q / 2 (drawn populations)"}
    assert div.lemma2_resolved(cells).all()  # 3 or 4 correct of 64, and many incorrect
    long = div.prop1_plot_table(est.prop1_table(_probes(), (1, 4)))
    assert set(long["quantity"]) == {"J_K(w) - J_K(theta)", "K sqrt(eps/2)", "J_K(theta+) - J_K(theta), fresh"}
    assert len(long) == 3 * 2 * 4  # quantities x K x iterations (the seed mean)


def test_finding_reproduced_when_every_check_holds():
    f = div.finding(_tables())
    assert f.status == "reproduced", f.sentence
    assert [(t.role, t.status) for t in f.tests] == [("paper", "reproduced"), ("control", "reproduced")]
    names = [c.name for c in f.checks]
    assert names == ["Pass@4 change per iteration, fresh samples",
                     "corr(JS_succ, Pass@4 change) across iterations, independent samples"]
    assert all(c.n_seeds == 3 and c.delta is not None for c in f.checks)
    # Proposition 1's condition, the Taylor limits, Pinsker's bound and the identities are reported, never evidence
    assert f.sanity[0].startswith("Proposition 1's sufficient condition (pooled over probes) held in K=1: 12 of 12")
    assert sum(s.startswith("condition margin, reported") for s in f.sanity) == 2
    assert sum(s.startswith("Taylor limit, cannot fail: Lemma") for s in f.sanity) == 6
    assert sum(s.startswith("Pinsker, holds for any update") for s in f.sanity) == 2
    assert [s.split(" (")[0] for s in f.sanity[11:]] == ["P_pop >= P_same", "JS_succ >= 0", "JS_succ <= JS_pol",
                                                         "Lemma 3 identity"]


def test_a_design_without_the_lemma_study_loads_nothing_and_says_so(monkeypatch):
    """`lemma.sigmas = ()` (the `pretrained` design): no Lemma 1-2 run, and the finding's statuses are those of the
    same Proposition 1 tables with the lemma cells (the lemmas are sanity lines only)."""
    from esreason_lib.paper.studies.presets import get_preset

    monkeypatch.setattr(div, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    cells, members = div.compute_lemmas(get_preset("pretrained-smollm2"))
    assert cells.empty and members.empty
    with_lemmas, without = div.finding(_tables()), div.finding(_tables(cells=pd.DataFrame()))
    assert [t.status for t in without.tests] == [t.status for t in with_lemmas.tests] and without.checks == (
        with_lemmas.checks)
    assert div.LEMMAS_LEFT_OUT in without.sanity and not any(s.startswith("Taylor") for s in without.sanity)
    assert [s for s in with_lemmas.sanity if not s.startswith(("Taylor", "P_pop", "JS_succ"))] == [
        s for s in without.sanity if s != div.LEMMAS_LEFT_OUT]


def test_finding_with_a_falling_pass_k_or_an_inverted_link():
    f = div.finding(_tables(probes=_probes(p_next=0.2)))
    assert f.tests[0].status == "not reproduced" and f.status == "not reproduced", f.sentence
    f = div.finding(_tables(probes=_probes().assign(js_succ=lambda t: 0.02 - t["js_succ"])))
    assert f.tests[1].status == "not reproduced" and f.status == "reproduced"  # the control never ANDs in


def test_finding_is_undecidable_with_one_seed_or_on_shared_samples():
    f = div.finding(_tables(probes=_probes(seeds=1)))  # one seed can never reach `reproduced` (MIN_SEEDS)
    assert f.status == "undecidable at this design" and f.tests[0].primary.oc[0] == 0.0
    assert f.tests[0].primary.reason.endswith("(the interval alone: not resolved)")
    f = div.finding(_tables(probes=_probes().drop(columns="p_fresh")))  # the tiny/powered runs: shared samples
    assert f.tests[1].status == "undecidable at this design" and "regression to the mean" in f.tests[1].primary.reason
    f = div.finding(_tables(probes=_probes().drop(columns=["js_succ", "p_fresh"])))  # a cached v2 table
    assert f.tests[1].status == "undecidable at this design" and np.isnan(f.tests[1].primary.effect)


def _null_probes(seeds=3, iterations=30, prompts=40, samples=8, seed=9):
    """True change 0: every prompt keeps success rate 0.3 along training; p_theta(t) from the samples S_t that
    JS_succ(t) is computed from (JS_succ rises with their success count), p_next(t) = p_theta(t + 1) from S_{t+1},
    p_fresh(t) from an independent draw of the same centre."""
    rng = np.random.default_rng(seed)
    rows = []
    for s, p in itertools.product(range(seeds), range(prompts)):
        draws = rng.binomial(samples, 0.3, size=iterations + 1) / samples  # [T + 1] S_0 .. S_T
        fresh = rng.binomial(samples, 0.3, size=iterations) / samples  # [T]
        for i in range(iterations):
            rows.append({"seed": s, "prompt": p, "iteration": i + 1, "p_theta": draws[i], "p_next": draws[i + 1],
                         "p_fresh": fresh[i], "js_succ": 0.05 * draws[i] + 0.001 * rng.standard_normal()})
    return pd.DataFrame(rows)


def test_null_diversity_link_is_0_on_independent_samples_and_negative_on_shared_ones():
    """Issue 31 item 1: with a true change of 0, the link on shared samples is strongly negative (regression to the
    mean); on independent samples its CI covers 0."""
    probes = _null_probes()
    shared = effect_check("shared", est.diversity_link(probes, 4))
    assert shared.ci_high < -0.3, shared.describe()
    independent = div.link_check(probes, 4, 0.1)
    assert independent.ci_low < 0 < independent.ci_high and independent.fixed == "", independent.describe()
    assert div.link_check(probes.drop(columns="p_fresh"), 4, 0.1).fixed == div.SHARED_SAMPLES


# ----------------------------------------------------------------------------------- the cached study, smoke


@pytest.fixture(scope="module")
def smoke_store(isolated_store):
    """(store, default store): the smoke base pretrained once into `store`; ESREASON_HOME points to `default`,
    so that anything written outside the given store shows up."""
    pretrain("smoke", home=isolated_store.store, progress=False)
    return isolated_store.store, isolated_store.default


@pytest.fixture
def parity(monkeypatch):
    """Countdown's verifier replaced by "the completion has even length": the smoke model never solves a
    problem, and with no successes every success probability (Lemmas 2-3, Proposition 1) would be 0."""
    monkeypatch.setattr(Countdown, "is_correct", lambda self, completion, example: len(completion) % 2 == 0)


def test_compute_lemmas_cells_obey_lemma_2_and_are_cached(smoke_store, parity, forbid_loading):
    store, default = smoke_store
    preset = get_preset("smoke")
    cells, members = div.compute_lemmas(preset, home=store, progress=False)
    assert list(cells.columns) == ["sigma", "repeat", "prompt", "fisher_trace", "prediction", "prediction_pop",
                                   "js_pol", "js_pol_mc", "js_succ", "n_correct", "n_samples", "p_bar", "p_pop",
                                   "p_same", "gap_approx", "gap"]
    assert list(members.columns) == ["sigma", "repeat", "prompt", "member", "p"]
    n, sigmas = preset.lemma.population, list(preset.lemma.sigmas)
    assert len(cells) == len(sigmas) * preset.lemma.repeats * preset.lemma.prompts
    assert len(members) == n * len(cells)
    assert set(cells["sigma"]) == set(sigmas) and (cells["n_samples"] == n * preset.lemma.samples).all()
    assert ((cells["n_correct"] > 0) & (cells["n_correct"] < cells["n_samples"])).all()  # not degenerate
    # Lemma 2, cell by cell: 0 <= JS_succ <= JS_pol and P_pop >= P_same
    assert (cells["js_succ"] >= 0).all() and (cells["js_succ"] <= cells["js_pol"]).all()
    assert (cells["p_pop"] >= cells["p_same"] - 1e-12).all()
    assert cells["gap"].to_numpy() == pytest.approx((cells["p_pop"] - cells["p_same"]).to_numpy(), abs=1e-15)
    p_bar = members.groupby(["sigma", "repeat", "prompt"])["p"].mean()
    assert cells.set_index(["sigma", "repeat", "prompt"])["p_bar"].to_dict() == pytest.approx(p_bar.to_dict())
    assert members["p"].between(0, 1).all()
    # Lemma 1's prediction from each prompt's Fisher trace, which no sigma or population changes
    assert cells["prediction"].to_numpy() == pytest.approx(
        lemma1_prediction(cells["sigma"].to_numpy(), n, cells["fisher_trace"].to_numpy()))
    assert (cells.groupby("prompt")["fisher_trace"].nunique() == 1).all()
    assert len(list(store.glob("diversity-lemmas-*"))) == 1
    assert not default.exists() or not any(default.iterdir())
    forbid_loading(div)
    again = div.compute_lemmas(preset, home=store, progress=False)
    pd.testing.assert_frame_equal(again[0], cells)
    pd.testing.assert_frame_equal(again[1], members)


def test_compute_prop1_follows_the_preset_es_run_and_is_cached(smoke_store, parity, forbid_loading):
    store, default = smoke_store
    # sampled members with a sigma large enough to tell them apart: unequal rewards, so non-uniform weights
    preset = get_preset("smoke", **{"es.sigma": 0.05, "es.greedy": False})
    probes = div.compute_prop1(preset, home=store, progress=False)
    assert list(probes.columns) == ["prompt", "p_theta", "p_bar", "p_w", "p_plus", "p_next", "kl", "lift",
                                    "lemma3_err", "js_succ", "iteration", "reward_mean", "ess_min", "seed"]
    its, n_p = preset.prop1.iterations, preset.prop1.probe_prompts
    assert probes["iteration"].tolist() == [i for i in range(1, its + 1) for _ in range(n_p)]
    assert (probes["seed"] == preset.seeds[0]).all()
    # Lemma 3 holds to rounding, on weights that do lift the success probability
    assert (probes["lemma3_err"] < 1e-12).all() and (probes["lift"].abs() > 1e-3).any()
    assert probes["p_w"].to_numpy() - probes["p_bar"].to_numpy() == pytest.approx(probes["lift"].to_numpy(), abs=1e-12)
    assert (probes["kl"] >= 0).all() and probes["ess_min"].between(0, 1, inclusive="right").all()
    for col in ("p_theta", "p_bar", "p_w", "p_plus", "p_next"):
        assert probes[col].between(0, 1).all(), col
    # the fresh samples of theta+ at iteration t are the centre's samples at iteration t + 1
    by_it = probes.set_index(["iteration", "prompt"])
    for it in range(1, its):
        assert by_it.loc[it, "p_next"].tolist() == by_it.loc[it + 1, "p_theta"].tolist()
    # Proposition 1's pieces are consistent with each other
    table = est.prop1_table(probes, preset.prop1.ks)
    assert table["threshold"].to_numpy() == pytest.approx((table["k"] * np.sqrt(table["eps"] / 2)).to_numpy())
    assert (table["condition"] == (table["margin"] > table["threshold"])).all()
    assert (table["rose"] == (table["jk_next"] > table["jk_theta"])).all()
    # the trajectory is the start of the preset's ES run: the same population rewards, iteration by iteration
    run = trainer("es")(preset.config("es", seed=preset.seeds[0]), home=store, progress=False)
    per_it = probes.drop_duplicates("iteration")["reward_mean"].to_numpy()
    assert per_it == pytest.approx(run.metrics()["reward/mean"].to_numpy()[:its], abs=1e-12)
    assert len(list(store.glob("diversity-prop1-*"))) == 1
    assert not default.exists() or not any(default.iterdir())
    forbid_loading(div)
    pd.testing.assert_frame_equal(div.compute_prop1(preset, home=store, progress=False), probes)
    with pytest.raises(ValueError, match="prop1.seeds=2"):
        div.compute_prop1(get_preset("smoke", **{"prop1.seeds": 2}), home=store, progress=False)
    # a subset of the followed seeds (`prefill --trajectories`): the same rows, or none
    pd.testing.assert_frame_equal(div.compute_prop1(preset, home=store, progress=False, seeds=preset.seeds), probes)
    assert div.compute_prop1(preset, home=store, progress=False, seeds=()).empty
    with pytest.raises(ValueError, match=r"seeds \[7\] are not among the preset's followed seeds \[0\]"):
        div.compute_prop1(preset, home=store, progress=False, seeds=(7,))


def test_prop1_spec_rejects_bad_values():
    for key, value in (("prop1.seeds", 0), ("prop1.iterations", 0), ("prop1.ks", ())):
        with pytest.raises(ValueError, match=key.split(".")[1]):
            get_preset("smoke", **{key: value})


def _harmful_probes(seeds=3, iterations=10, prompts=8, seed=5):
    """Updates that lower every prompt's success by 0.02-0.10: p_w = p_plus + 0.01 = p_next = p_theta - d, the
    inputs on which Pinsker makes "fresh J_K(theta+) - bound > 0" hold for any update."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(seeds):
        for i in range(iterations):
            for p in range(prompts):
                theta = 0.3 + 0.02 * p
                drop = rng.uniform(0.02, 0.10)
                p_w = theta - drop
                rows.append({"seed": s, "iteration": i + 1, "prompt": p, "p_theta": theta, "p_bar": p_w,
                             "p_w": p_w, "p_plus": p_w - 0.01, "p_next": p_w, "kl": est.bernoulli_kl(p_w, p_w - 0.01),
                             "lift": 0.0, "lemma3_err": 1e-17, "reward_mean": 0.1, "ess_min": 0.9,
                             "js_succ": float(rng.uniform(0.0, 0.01))})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("k", [4, 16])
def test_prop1_evidence_fails_for_harmful_updates(k):
    """The failing-input test of issue 21: an update that lowers every prompt's success must not pass as
    Proposition 1's account of a Pass@K gain (the old fresh-sample bound check was `reproduced` here)."""
    probes = _harmful_probes()
    old = effect_check("old bound", est.prop1_slack(probes, k))
    assert old.status == "reproduced"  # Pinsker: the bound check cannot fail, hence no longer evidence
    deltas = pd.DataFrame([{"delta_change": 0.03, "delta_condition": 3e-4, "delta_link": 0.1}])  # MDE ~0.014
    f = div.finding({**_tables(probes=probes), "prop1": est.prop1_table(probes, (1, k)), "deltas": deltas})
    status = {c.name: c.status for c in f.checks}
    assert status[f"Pass@{k} change per iteration, fresh samples"] == "not reproduced"
    assert f.status == "not reproduced"
    assert not any(n.startswith(("Lemma", "Prop 1")) for n in status)  # reported lines, never evidence


def test_prop1_keys_leave_out_fields_added_after_the_stored_runs(monkeypatch):
    """A `diversity-prop1` run's key holds its ES config's fields but those added later at their defaults
    (`LATER_FIELDS`: `ray_address`, `report_to`, `members_at_once`), so the runs stored before those fields keep
    their identity: the key's fields are exactly those the stored runs' keys hold, so a field added to `ESConfig`
    fails here until it joins `LATER_FIELDS` (else the committed runs are no longer found: `make figures` fails)."""
    from esreason_lib.paper.studies import diversity
    from esreason_lib.paper.studies.presets import get_preset

    class Keyed(Exception):
        pass

    def keyed(kind, config, names, compute, *, seed, home=None, with_run=False):
        raise Keyed(config)

    monkeypatch.setattr(diversity, "cached", keyed)
    with pytest.raises(Keyed) as got:
        diversity.compute_prop1(get_preset("smoke"), progress=False)
    es = got.value.args[0]["es"]
    assert not set(diversity.LATER_FIELDS) & set(es)
    assert {"alpha", "sigma", "population_size", "seed", "device", "checkpoint_every"} <= set(es)
    assert set(es) == {  # the fields of the stored runs' keys
        "alpha", "antithetic", "backend", "check_every", "checkpoint_every", "device", "drift_every", "dtype",
        "gpu_memory_utilization", "gpus_per_worker", "greedy", "iterations", "keep_checkpoints", "matched_step",
        "max_new_tokens", "model", "noise", "normalization", "population_size", "prompt_order", "prompts_per_step",
        "rank", "reward_correct", "reward_formatted", "reward_invalid", "seed", "sigma", "snapshot_every", "task",
        "task_kwargs", "temperature", "train_size", "workers"}


# ----------------------------------------------------------------------------------- bounded log-prob passes


@pytest.fixture(scope="module")
def wide():
    """A one-layer random Llama with smollm2-135m's 49,152-token vocabulary (from a config: no download) and six
    rows of short left-padded prompts and right-padded completions."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=49_152, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         attn_implementation="eager")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(1)
    p_ids, c_ids = torch.randint(49_152, (6, 5), generator=g), torch.randint(49_152, (6, 7), generator=g)
    p_mask, c_mask = torch.ones(6, 5, dtype=torch.bool), torch.ones(6, 7, dtype=torch.bool)
    p_mask[1, :2] = p_mask[4, :3] = False
    c_mask[1, 3:] = c_mask[2, 5:] = c_mask[5, 1:] = False
    return model, (p_ids, p_mask, c_ids, c_mask)


@torch.no_grad()
def _old_sequence_logp(model, prompt_ids, prompt_mask, completion_ids, completion_mask, batch_size=512):
    """`sequence_logp` before its bound: `completion_logprobs` over `batch_size` rows at a time."""
    from esreason_lib.models.generation import completion_logprobs

    out = []
    for s in range(0, completion_ids.shape[0], batch_size):
        sl = slice(s, s + batch_size)
        logp, _ = completion_logprobs(model, prompt_ids[sl], prompt_mask[sl], completion_ids[sl], completion_mask[sl])
        out.append(logp.double().sum(-1).cpu().numpy())
    return np.concatenate(out)


@torch.no_grad()
def _old_full_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, batch_size=256):
    """`full_logprobs` before its bound: `batch_size` rows at a time, whatever their logits' size."""
    lc, out = completion_ids.shape[1], []
    for s in range(0, completion_ids.shape[0], batch_size):
        ids = torch.cat([prompt_ids[s:s + batch_size], completion_ids[s:s + batch_size]], 1)
        mask = torch.cat([prompt_mask[s:s + batch_size], completion_mask[s:s + batch_size]], 1).bool()
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                       logits_to_keep=lc + 1).logits[:, :-1]
        out.append(torch.log_softmax(logits.double(), dim=-1))
    return torch.cat(out)


def test_sequence_logp_bounded_equals_the_unbounded_pass(wide):
    model, batch = wide
    row = 7 * 49_152 * 14  # one row's logit bytes (models.logprobs.NO_GRAD_BYTES per entry)
    want = _old_sequence_logp(model, *batch)
    # each prompt forwarded once (models.logprobs.shared_prompt_logprobs): equal up to float rounding, in blocks of
    # any size; rows cut (2 per head call), positions cut (3 per head call), the vocabulary cut (5,000 per slice)
    for rows, budget in ((64, passes.SCORING_BYTES), (4, passes.SCORING_BYTES), (64, 2 * row),
                         (64, 3 * 49_152 * 14), (3, 5_000 * 14)):
        np.testing.assert_allclose(passes.sequence_logp(model, *batch, rows=rows, budget=budget), want, rtol=1e-6,
                                   atol=1e-5, err_msg=f"rows={rows}, budget={budget}")
    assert want[5] != 0 and np.isfinite(want).all()


def test_full_logprobs_bounded_equals_the_unbounded_pass(wide):
    model, batch = wide
    want = _old_full_logprobs(model, *batch)  # [6, 7, 49152]
    assert torch.equal(passes.full_logprobs(model, *batch), want)  # under the default budget: bit for bit
    got = passes.full_logprobs(model, *batch, budget=2 * 7 * 49_152 * passes.FULL_BYTES)  # 2 rows per forward
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(passes.full_logprobs(model, *batch, budget=1), want, rtol=1e-6, atol=1e-5)  # 1 row
