from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

import esreason_lib.models
from esreason_lib.experiments import common
from esreason_lib.experiments import sparsity as sp
from esreason_lib.experiments.common import model_ref
from esreason_lib.training import METHODS, trainer
from esreason_lib.zoo import build_char_tokenizer, tiny_random_qwen2


def test_dedupe_tied_drops_aliases_only():
    w = torch.ones(3, 2)
    state = {"model.embed_tokens.weight": w, "lm_head.weight": w, "model.norm.weight": torch.ones(2),
             "copy": w.clone()}
    out = sp.dedupe_tied(state)
    assert list(out) == ["model.embed_tokens.weight", "model.norm.weight", "copy"]


def test_dedupe_tied_on_a_tied_model():
    model = tiny_random_qwen2(len(build_char_tokenizer()))
    model.config.tie_word_embeddings = True
    model.tie_weights()
    out = sp.dedupe_tied(model.state_dict())
    assert "lm_head.weight" not in out and "model.embed_tokens.weight" in out


def test_top_update_share_hand_computed(state_pair):
    base, tuned = state_pair
    # changed |delta|: mlp 0.1, 0.5, 0.01; norm 2.0 -> the top 50% (2 coords) are 2.0 (norm) and 0.5 (mlp)
    share = sp.top_update_share(base, tuned, top=0.5)
    assert share.to_dict() == pytest.approx({"mlp": 0.5, "norm": 0.5, "embedding": 0.0})
    assert sp.top_update_share(base, tuned, top=0.01).to_dict() == pytest.approx(
        {"mlp": 0.0, "norm": 1.0, "embedding": 0.0})
    assert sp.top_update_share(base, base).empty


def test_drift_by_module_rows_and_overall(state_pair):
    base, tuned = state_pair
    table = sp.drift_by_module(base, {("es", 0): tuned, ("grpo", 0): base})
    es = table[table["method"] == "es"].set_index("module")
    assert set(es.index) == {"embedding", "mlp", "norm", "all"}
    d2 = 0.1 ** 2 + 0.5 ** 2 + 0.01 ** 2 + 2.0 ** 2
    assert es.loc["all", "rel_l2"] == pytest.approx(np.sqrt(d2 / 36), rel=1e-6)
    assert es.loc["norm", "rel_l2"] == pytest.approx(2.0 / np.sqrt(2.0), rel=1e-6)
    assert es.loc["all", "frac_changed"] == pytest.approx(4 / 10)
    assert es.loc["mlp", "frac_changed"] == pytest.approx(3 / 4)
    assert es.loc["norm", "top_share"] == pytest.approx(1.0)
    grpo = table[table["method"] == "grpo"].set_index("module")
    assert grpo.loc["all", "rel_l2"] == 0.0 and (grpo["top_share"].drop("all") == 0).all()


def _save(model, tokenizer, path):
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _base_and_tuned(tmp_path) -> tuple[str, str]:
    """Saved refs of a tiny random Qwen2 and a copy with every weight moved by N(0, 1e-2^2) noise."""
    tok = build_char_tokenizer()
    base = tiny_random_qwen2(len(tok), seed=0)
    tuned = tiny_random_qwen2(len(tok), seed=0)
    with torch.no_grad():
        for i, p in enumerate(tuned.parameters()):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 1e-2)
    return _save(base, tok, tmp_path / "base"), _save(tuned, tok, tmp_path / "tuned")


def test_reset_models_saves_cached_runs(tmp_path):
    base_ref, tuned_ref = _base_and_tuned(tmp_path)
    table = sp.reset_models(base_ref, tuned_ref, [0.5, 0.9], home=tmp_path / "runs")
    assert list(table["mode"]) == ["magnitude", "random"] * 2
    mag = table[table["mode"] == "magnitude"]
    assert mag["sparsity"].to_numpy() == pytest.approx([0.5, 0.9], abs=0.01)
    rnd = table[table["mode"] == "random"]
    assert rnd["sparsity"].to_numpy() == pytest.approx(mag["sparsity"].to_numpy(), abs=0.02)
    # the saved magnitude model keeps exactly the large updates
    b, t, m = (sp.load_state(r) for r in (base_ref, tuned_ref, mag["ref"].iloc[0]))
    tau = mag["tau"].iloc[0]
    for name in b:
        keep = (t[name] - b[name]).abs() > tau
        assert torch.equal(m[name], torch.where(keep, t[name], b[name])), name
    again = sp.reset_models(base_ref, tuned_ref, [0.5, 0.9], home=tmp_path / "runs")
    pd.testing.assert_frame_equal(table, again)


def test_reset_models_absolute_tau_and_its_random_control_reset_the_same_count(tmp_path):
    base_ref, tuned_ref = _base_and_tuned(tmp_path)
    table = sp.reset_models(base_ref, tuned_ref, [], taus=[5e-3], home=tmp_path / "runs")
    mag, rnd = (table[table["mode"] == m].iloc[0] for m in sp.MODES)
    b, t, m, r = (sp.load_state(x) for x in (base_ref, tuned_ref, mag["ref"], rnd["ref"]))
    changed = sum(int((t[k] != b[k]).sum()) for k in b)
    small = sum(int(((t[k] != b[k]) & ((t[k] - b[k]).abs() <= 5e-3)).sum()) for k in b)
    assert mag["tau"] == 5e-3 and mag["sparsity"] == small / changed and mag["quantile"] == mag["sparsity"]
    assert 0.2 < mag["sparsity"] < 0.6  # 5e-3 against N(0, 1e-2) updates: about 38% of them
    reset = {name: sum(int(((s[k] == b[k]) & (t[k] != b[k])).sum()) for k in b) for name, s in (("mag", m), ("rnd", r))}
    assert reset == {"mag": small, "rnd": small} and rnd["sparsity"] == mag["sparsity"]


def _sweep(method, unreset, reset, rand, base):
    rows = []
    for mode, mid in (("magnitude", reset), ("random", rand)):
        rows += [{"method": method, "mode": mode, "quantile": 0.0, "sparsity": 0.0, "pass@1": unreset, "pass@K": 0.5,
                  "K": 16},
                 {"method": method, "mode": mode, "quantile": 0.5, "sparsity": 0.5, "pass@1": 0.0, "pass@K": 0.0,
                  "K": 16},
                 {"method": method, "mode": mode, "quantile": 0.9, "sparsity": 0.9, "pass@1": mid, "pass@K": 0.4,
                  "K": 16},
                 {"method": method, "mode": mode, "quantile": 1.0, "sparsity": 1.0, "pass@1": base, "pass@K": 0.3,
                  "K": 16}]
    return rows


def test_describe_sparsity_reads_the_tables(state_pair):
    base, tuned = state_pair
    drift = sp.drift_by_module(base, {("es", 0): tuned, ("grpo", 0): base})
    sweep = pd.DataFrame(_sweep("es", 0.26, 0.25, 0.19, 0.10) + _sweep("grpo", 0.3, 0.2, 0.1, 0.10))
    text = sp.describe_sparsity(drift, sweep)
    overall = 100 * np.sqrt((0.1 ** 2 + 0.5 ** 2 + 0.01 ** 2 + 2.0 ** 2) / 36)
    assert text.startswith(f"drift (relative L2) ES {overall:.2f}% vs GRPO 0.00%")
    assert ("ES: resetting the smallest 90% of changed coordinates gives pass@1 0.25 / pass@16 0.40 "
            "(unreset 0.26 / 0.50, random 90% 0.19 / 0.40, base 0.10 / 0.30)") in text
    assert "largest relative update in: ES norm, GRPO none (no update)" in text


# ------------------------------------------------------------------------------------------- the study, smoke
@pytest.fixture(scope="module")
def study(isolated_store, moving_preset):
    """The smoke preset under which both methods move (`moving_preset`: the resets have updates to reset) with ES
    and GRPO trained once into `store`; ESREASON_HOME points to a separate folder, `default`, so that anything
    written outside the given store shows up."""
    runs = {(m, s): trainer(m)(moving_preset.config(m, seed=s), home=isolated_store.store, progress=False)
            for m in METHODS for s in moving_preset.seeds}
    return SimpleNamespace(**vars(isolated_store), preset=moving_preset, runs=runs)


def _nothing_outside(study):
    return not study.default.exists() or not any(study.default.iterdir())


def _fake_evaluate(calls):
    """An `evaluate_ref` stand-in giving every reference its own score: pass@1 = 0.01 * (order of first call),
    pass@k = pass@1 + (k - 1) / 1000 (recording each call)."""
    seen: dict[str, float] = {}

    def evaluate_ref(ref, task, task_kwargs, spec, *, device, home, progress):
        calls.append({"ref": ref, "task": task, "spec": spec, "home": home})
        p1 = seen.setdefault(ref, 0.01 * (len(seen) + 1))
        return SimpleNamespace(curve=pd.DataFrame({"k": list(spec.ks),
                                                   "pass_at_k": [p1 + (k - 1) / 1000 for k in spec.ks]}))

    return evaluate_ref, seen


def test_sparsity_sweep_resets_at_the_requested_quantiles_and_scores_each_model(study, monkeypatch):
    preset, store = study.preset, study.store
    calls = []
    fake, score = _fake_evaluate(calls)
    monkeypatch.setattr(sp, "evaluate_ref", fake)
    sweep = sp.sparsity_sweep(preset, study.runs, home=store, progress=False)
    assert list(sweep.columns) == ["method", "mode", "quantile", "tau", "sparsity", "pass@1", "pass@K", "K"]
    assert list(dict.fromkeys(sweep["method"])) == list(preset.sparsity.methods)
    pd.testing.assert_frame_equal(sweep, sweep.sort_values(["method", "mode", "sparsity"], ignore_index=True))
    assert (sweep["K"] == max(preset.sparsity.eval.ks)).all()
    assert all(c["spec"] == preset.sparsity.eval and c["task"] == preset.task and c["home"] == store for c in calls)
    qs = list(preset.sparsity.quantiles)
    for method in preset.sparsity.methods:
        tuned_ref = model_ref(study.runs[method, preset.seeds[0]])
        resets = sp.reset_models(preset.base_model, tuned_ref, qs, seed=preset.seeds[0], home=store)  # cached
        rows = {mode: sweep[(sweep["method"] == method) & (sweep["mode"] == mode)].set_index("quantile")
                for mode in sp.MODES}
        for mode, table in rows.items():
            assert list(table.index) == [0.0, *qs, 1.0]
            # the endpoints: quantile 0 is the unreset tuned model, quantile 1 the base
            assert table.loc[0.0, "sparsity"] == 0.0 and table.loc[1.0, "sparsity"] == 1.0
            assert np.isnan(table.loc[0.0, "tau"]) and np.isnan(table.loc[1.0, "tau"])
            assert table.loc[0.0, "pass@1"] == pytest.approx(score[tuned_ref])
            assert table.loc[1.0, "pass@1"] == pytest.approx(score[preset.base_model])
            for q, ref in zip(resets[resets["mode"] == mode]["quantile"], resets[resets["mode"] == mode]["ref"]):
                assert table.loc[q, "pass@1"] == pytest.approx(score[ref])
                assert table.loc[q, "pass@K"] == pytest.approx(score[ref] + (max(preset.sparsity.eval.ks) - 1) / 1000)
        mag, rnd = rows["magnitude"].loc[qs], rows["random"].loc[qs]
        assert mag["sparsity"].to_numpy() == pytest.approx(qs, abs=0.01)  # the model moved: real resets
        assert rnd["sparsity"].to_numpy() == pytest.approx(mag["sparsity"].to_numpy(), abs=0.02)
        assert (mag["tau"] > 0).all() and mag["tau"].is_monotonic_increasing and rnd["tau"].isna().all()
    assert len(score) == 1 + len(preset.sparsity.methods) * (1 + 2 * len(qs))  # every model scored once
    assert _nothing_outside(study)


def test_sparsity_sweep_needs_a_run_for_every_sparsity_method(study, monkeypatch):
    monkeypatch.setattr(sp, "evaluate_ref", _fake_evaluate([])[0])
    with pytest.raises(ValueError, match="sparsity_methods names 'grpo' but runs has no \\('grpo', 0\\) entry"):
        sp.sparsity_sweep(study.preset, {("es", 0): study.runs["es", 0]}, home=study.store, progress=False)
    only_es = replace(study.preset, sparsity=replace(study.preset.sparsity, methods=("es",)))
    sweep = sp.sparsity_sweep(only_es, {("es", 0): study.runs["es", 0]}, home=study.store, progress=False)
    assert set(sweep["method"]) == {"es"} and len(sweep) == 2 * (2 + len(only_es.sparsity.quantiles))


def test_compute_drift_for_every_run_and_the_cached_sweep(study, forbid_loading):
    preset, store = study.preset, study.store
    tables = sp.compute(preset, home=store, progress=False)
    drift, sweep = tables["drift"], tables["sweep"]
    assert list(dict.fromkeys(zip(drift["method"], drift["seed"]))) == list(study.runs)
    total = drift[drift["module"] == "all"].set_index("method")
    assert len(total) == len(study.runs) and (total["update_share"] == 1.0).all()
    assert drift["frac_changed"].between(0, 1).all() and (total["rel_l2"] > 0).all()
    # the overall relative drift is the ES run's own logged ||theta - theta_0|| / ||theta_0||
    es_drift = study.runs["es", 0].metrics()["es/drift_rel"].iloc[-1]
    assert total.loc["es", "rel_l2"] == pytest.approx(es_drift, rel=1e-4)
    assert sweep["pass@1"].between(0, 1).all() and (sweep["pass@K"] >= sweep["pass@1"]).all()
    assert _nothing_outside(study)
    # training, resets and evaluations are cached: a second report trains and evaluates nothing
    forbid_loading(esreason_lib.models, common)
    n_runs = len(list(store.iterdir()))
    again = sp.compute(preset, home=store, progress=False)
    again_drift, again_sweep = again["drift"], again["sweep"]
    pd.testing.assert_frame_equal(again_drift, drift)
    pd.testing.assert_frame_equal(again_sweep, sweep)
    pd.testing.assert_frame_equal(sp.sparsity_sweep(preset, study.runs, home=store, progress=False), sweep)
    assert len(list(store.iterdir())) == n_runs
