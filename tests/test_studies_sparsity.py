from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

import esreason_lib.models.load
from esreason_lib.methods import METHODS, trainer
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.paper.studies import common
from esreason_lib.paper.studies import sparsity as sp
from esreason_lib.paper.studies import sparsity_weights as weights
from esreason_lib.paper.studies.common import model_ref


def test_dedupe_tied_drops_aliases_only():
    w = torch.ones(3, 2)
    state = {"model.embed_tokens.weight": w, "lm_head.weight": w, "model.norm.weight": torch.ones(2),
             "copy": w.clone()}
    out = weights.dedupe_tied(state)
    assert list(out) == ["model.embed_tokens.weight", "model.norm.weight", "copy"]


def test_dedupe_tied_on_a_tied_model():
    model = tiny_random_qwen2(len(build_char_tokenizer()))
    model.config.tie_word_embeddings = True
    model.tie_weights()
    out = weights.dedupe_tied(model.state_dict())
    assert "lm_head.weight" not in out and "model.embed_tokens.weight" in out


def test_top_update_share_hand_computed(state_pair):
    base, tuned = state_pair
    # changed |delta|: mlp 0.1, 0.5, 0.01; norm 2.0 -> the top 50% (2 coords) are 2.0 (norm) and 0.5 (mlp)
    share = weights.top_update_share(base, tuned, top=0.5)
    assert share.to_dict() == pytest.approx({"mlp": 0.5, "norm": 0.5, "embedding": 0.0})
    assert weights.top_update_share(base, tuned, top=0.01).to_dict() == pytest.approx(
        {"mlp": 0.0, "norm": 1.0, "embedding": 0.0})
    assert weights.top_update_share(base, base).empty


def test_drift_by_module_rows_and_overall(state_pair):
    base, tuned = state_pair
    table = weights.drift_by_module(base, {("es", 0): tuned, ("grpo", 0): base})
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


def test_model_drift_is_drift_by_module_and_served_from_the_store_without_weights(tmp_path, monkeypatch):
    import shutil

    base_ref, tuned_ref = _base_and_tuned(tmp_path)
    home = tmp_path / "runs"
    first = weights.model_drift(base_ref, tuned_ref, ("es", 1), home=home)
    direct = weights.drift_by_module(weights.load_state(base_ref), {("es", 1): weights.load_state(tuned_ref)})
    pd.testing.assert_frame_equal(first, direct, check_dtype=False)
    shutil.rmtree(tuned_ref)  # `make figures` on a result bundle: tables, no weights
    monkeypatch.setenv("ESREASON_STORED_ONLY", "1")
    pd.testing.assert_frame_equal(weights.model_drift(base_ref, tuned_ref, ("es", 1), home=home), first)


def test_reset_models_saves_cached_runs(tmp_path):
    base_ref, tuned_ref = _base_and_tuned(tmp_path)
    table = weights.reset_models(base_ref, tuned_ref, [0.5, 0.9], home=tmp_path / "runs")
    assert list(table["mode"]) == ["magnitude", "random"] * 2
    assert list(table["threshold"]) == ["q=0.5", "q=0.5", "q=0.9", "q=0.9"]
    mag = table[table["mode"] == "magnitude"]
    assert mag["sparsity"].to_numpy() == pytest.approx([0.5, 0.9], abs=0.01)
    rnd = table[table["mode"] == "random"]
    assert rnd["sparsity"].to_numpy() == pytest.approx(mag["sparsity"].to_numpy(), abs=0.02)
    # the saved magnitude model keeps exactly the large updates
    b, t, m = (weights.load_state(r) for r in (base_ref, tuned_ref, mag["ref"].iloc[0]))
    tau = mag["tau"].iloc[0]
    for name in b:
        keep = (t[name] - b[name]).abs() > tau
        assert torch.equal(m[name], torch.where(keep, t[name], b[name])), name
    again = weights.reset_models(base_ref, tuned_ref, [0.5, 0.9], home=tmp_path / "runs")
    pd.testing.assert_frame_equal(table, again)


def test_reset_models_absolute_tau_and_its_random_control_reset_the_same_count(tmp_path):
    base_ref, tuned_ref = _base_and_tuned(tmp_path)
    table = weights.reset_models(base_ref, tuned_ref, [], taus=[5e-3], home=tmp_path / "runs")
    mag, rnd = (table[table["mode"] == m].iloc[0] for m in sp.MODES)
    b, t, m, r = (weights.load_state(x) for x in (base_ref, tuned_ref, mag["ref"], rnd["ref"]))
    changed = sum(int((t[k] != b[k]).sum()) for k in b)
    small = sum(int(((t[k] != b[k]) & ((t[k] - b[k]).abs() <= 5e-3)).sum()) for k in b)
    assert mag["tau"] == 5e-3 and mag["sparsity"] == small / changed and mag["quantile"] == mag["sparsity"]
    assert mag["threshold"] == rnd["threshold"] == "tau=0.005"
    assert 0.2 < mag["sparsity"] < 0.6  # 5e-3 against N(0, 1e-2) updates: about 38% of them
    reset = {name: sum(int(((s[k] == b[k]) & (t[k] != b[k])).sum()) for k in b) for name, s in (("mag", m), ("rnd", r))}
    assert reset == {"mag": small, "rnd": small} and rnd["sparsity"] == mag["sparsity"]


PROBLEMS = 40


def _problems(reset, unreset, rand, seeds=(0, 1, 2), labels=("q=0.9",), method="es") -> pd.DataFrame:
    """Per-problem pass@1 of a base (0.1 on average, varying by problem) and of `method`'s unreset, magnitude and
    random models at each threshold label: the base plus `unreset`, `reset` or `rand`, plus a per-seed offset of
    +-0.002 shared by a seed's models."""
    base = 0.1 + np.linspace(-0.05, 0.05, PROBLEMS)
    rows = [("base", -1, "base", "", 1.0, base)]
    for i, seed in enumerate(seeds):
        off = 0.002 * (i - 1)
        rows.append((method, seed, "unreset", "", 0.0, base + unreset + off))
        for label in labels:
            rows += [(method, seed, "magnitude", label, 0.9, base + reset + off),
                     (method, seed, "random", label, 0.9, base + rand + off)]
    return pd.DataFrame([{"method": m, "seed": s, "mode": mode, "threshold": label, "quantile": q,
                          "tau": np.nan, "sparsity": q, "problem_id": f"p{j}", "pass@1": v, "pass@K": v + 0.3,
                          "K": 16} for m, s, mode, label, q, vals in rows for j, v in enumerate(vals)])


def _drift(es_all=0.071, grpo_all=0.0237, es_modules=None) -> pd.DataFrame:
    es_modules = es_modules or {"mlp": 0.08, "norm": 0.05, "attention": 0.04}
    rows = [{"method": "es", "seed": s, "module": m, "rel_l2": v} for s in (0, 1) for m, v in
            {**es_modules, "all": es_all}.items()]
    rows += [{"method": "grpo", "seed": 0, "module": m, "rel_l2": v} for m, v in
             {"mlp": 0.03, "norm": 0.0, "attention": 0.01, "all": grpo_all}.items()]
    return pd.DataFrame(rows)


def _tables(problems, drift=None, checked=("q=0.9",)):
    return sp.SparsityTables(drift=_drift() if drift is None else drift, problems=problems, checked=checked,
                             margin_fraction=0.25, delta_pass1=0.01, delta_keep=0.0025)


def test_reset_checks_hand_computed():
    checks = sp.reset_checks(_tables(_problems(reset=0.10, unreset=0.11, rand=0.02)), "es")
    assert [c.name for c in checks] == ["ES reset q=0.9 - base Pass@1",
                                        "ES reset q=0.9 keeps >= 75% of the gain, Pass@1",
                                        "ES reset q=0.9 - random reset of the same count, Pass@1"]
    # keeps: reset - 0.75 unreset - 0.25 base = 0.10 - 0.75 * 0.11 (the margin is a quarter of the 0.11 gain)
    assert [c.effect for c in checks] == pytest.approx([0.10, 0.10 - 0.0825, 0.08])
    assert [c.delta for c in checks] == [0.01, 0.0025, 0.01] and [c.threshold for c in checks] == [0.0] * 3
    # paired by seed: the per-seed offset cancels in reset - random
    assert checks[2].ci_low == pytest.approx(0.08) and checks[2].ci_high == pytest.approx(0.08)
    assert all(c.n_seeds == 3 and c.status == "reproduced" for c in checks)


def test_the_primary_check_on_the_reset_axis_is_read_against_the_kept_share_of_the_gain():
    checks = sp.reset_checks(_tables(_problems(reset=0.10, unreset=0.11, rand=0.02)), "es")
    y, low, high, line = sp.primary_on_reset_axis(checks)
    assert (y, line) == pytest.approx((0.10, 0.75 * 0.11))  # reset - base, against 75% of the 0.11 gain
    assert (low - line, high - line) == pytest.approx((checks[1].ci_low, checks[1].ci_high))
    assert low <= y <= high and (low > line) == (checks[1].ci_low > 0)


def test_a_reset_equal_to_the_random_reset_is_not_evidence():
    """Alternative explanation: any reset of that many coordinates keeps the gain (the small updates are not
    special). The magnitude reset scores exactly like the random one."""
    result = sp.finding(_tables(_problems(reset=0.10, unreset=0.11, rand=0.10)))
    assert result.checks[2].status == "smaller than delta" and result.tests[1].primary is result.checks[2]
    assert result.tests[1].status == "smaller than delta" and result.status == "reproduced", result.sentence


def test_a_reset_equal_to_the_noise_control_is_not_evidence():
    """Alternative explanation: moving as far at random gives the same Pass@1 (noise-injection control)."""
    problems = _problems(reset=0.10, unreset=0.11, rand=0.02)
    noise = problems[problems["mode"] == "magnitude"].assign(mode="noise", threshold="")
    result = sp.finding(_tables(pd.concat([problems, noise], ignore_index=True)))
    assert [c.name for c in result.checks][-1] == "ES reset q=0.9 - noise-injection control, Pass@1"
    assert result.checks[-1].status == "smaller than delta" and result.checks[-1] in result.tests[1].secondary
    below = sp.finding(_tables(pd.concat([problems, noise.assign(**{"pass@1": noise["pass@1"] - 0.1})])))
    assert below.checks[-1].status == "reproduced" and below.status == "reproduced"


def test_the_margin_is_a_fraction_of_the_gain_tested():
    """A reset that loses 0.02 of a 0.03 gain (two thirds of it) did not keep the gain; of a 0.11 gain it did."""
    small = sp.reset_checks(_tables(_problems(reset=0.01, unreset=0.03, rand=-0.05)))
    assert small[1].status == "not reproduced"
    large = sp.reset_checks(_tables(_problems(reset=0.09, unreset=0.11, rand=0.02)))
    assert large[1].status == "reproduced"


@pytest.mark.parametrize("reset, unreset, rand, failing", [
    (-0.05, -0.04, -0.10, 0),  # the reset falls below the base
    (0.10, 0.15, 0.02, 1),  # the reset loses 0.05, a third of the 0.15 gain > the margin's quarter
    (0.10, 0.11, 0.15, 2),  # the random reset of the same count does better
])
def test_finding_not_reproduced_when_one_check_fails(reset, unreset, rand, failing):
    result = sp.finding(_tables(_problems(reset, unreset, rand)))
    statuses = [c.status for c in result.checks]
    assert statuses[failing] == "not reproduced"
    if failing:  # (below the base, the reset also keeps none of a negative "gain")
        assert [s for i, s in enumerate(statuses) if i != failing] == ["reproduced", "reproduced"]
    test = 1 if failing == 2 else 0  # the random reset is the control's primary; the others the paper's test's
    assert result.tests[test].status == "not reproduced" or failing == 0  # the base check is a secondary
    if failing == 1:
        assert result.status == "not reproduced"
        assert result.sentence.startswith("Resetting ES's smallest updates loses its task gain (contradicts")


def test_finding_reproduced_states_the_drift_beside_the_paper():
    result = sp.finding(_tables(_problems(0.10, 0.11, 0.02)))
    assert result.status == "reproduced"
    assert result.sentence.startswith(
        "Resetting ES's smallest updates keeps its task gain; ES relative L2 drift 7.10% = 3.0x GRPO's 2.37%, "
        "below the paper's 40-44x; ES's largest relative updates in mlp and norm, unlike the paper (norm and "
        "attention); paper test (the reset keeps the gain): ES reset q=0.9 keeps >= 75% of the gain")
    paper_like = sp.finding(_tables(_problems(0.10, 0.11, 0.02),
                                    drift=_drift(es_all=0.42, grpo_all=0.01,
                                                 es_modules={"mlp": 0.01, "norm": 0.5, "attention": 0.3})))
    assert "42.0x GRPO's 1.00%, within the paper's 40-44x; ES's largest relative updates in norm and attention, " \
           "as the paper" in paper_like.sentence


def test_finding_checks_every_checked_threshold_and_is_not_resolved_with_one_seed():
    labels = ("q=0.9", "tau=0.0005")
    result = sp.finding(_tables(_problems(0.10, 0.11, 0.02, labels=labels), checked=labels))
    assert len(result.checks) == 6 and "tau=0.0005" in result.checks[3].name and result.status == "reproduced"
    one = sp.finding(_tables(_problems(0.10, 0.11, 0.02, seeds=(0,))))
    assert one.status == "undecidable at this design" and one.sentence.startswith("Whether resetting ES's smallest")
    with pytest.raises(ValueError, match="no rows"):
        sp.reset_checks(_tables(_problems(0.1, 0.1, 0.0), checked=("q=0.5",)))


def test_sweep_means_over_seeds_with_shared_endpoints():
    sweep = _tables(_problems(0.10, 0.11, 0.02)).sweep
    assert list(sweep.columns) == ["method", "mode", "threshold", "quantile", "tau", "sparsity", "pass@1", "pass@K",
                                   "K", "seeds"]
    for mode, mid in (("magnitude", 0.2), ("random", 0.12)):
        rows = sweep[sweep["mode"] == mode]
        assert rows["sparsity"].tolist() == [0.0, 0.9, 1.0]
        assert rows["pass@1"].tolist() == pytest.approx([0.21, mid, 0.1])
        assert rows["seeds"].tolist() == [3, 3, 1] and set(rows["method"]) == {"es"}


def test_drift_summary_orders_moved_modules():
    d = sp.drift_summary(_drift()).set_index("method")
    assert d.loc["es", "rel_l2"] == pytest.approx(0.071) and d.loc["es", "modules"] == ("mlp", "norm", "attention")
    assert d.loc["grpo", "modules"] == ("mlp", "attention")  # norm did not move


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
    """An `evaluate_ref` stand-in over three problems giving every reference its own scores: c = (0, 1, 2) + the
    order of the reference's first call, capped at n (recording each call)."""
    seen: dict[str, int] = {}

    def evaluate_ref(ref, task, task_kwargs, spec, *, device, home, progress):
        calls.append({"ref": ref, "task": task, "spec": spec, "home": home})
        order = seen.setdefault(ref, len(seen))
        c = [min(spec.n_samples, i + order) for i in range(3)]
        return SimpleNamespace(table=pd.DataFrame({"problem_id": ["p0", "p1", "p2"], "n": spec.n_samples, "c": c}))

    return evaluate_ref, seen


def test_compute_scores_every_seed_and_reset_per_problem(study, monkeypatch):
    preset, store = replace(study.preset, seeds=(0, 1)), study.store
    calls = []
    fake, order = _fake_evaluate(calls)
    monkeypatch.setattr(sp, "evaluate_ref", fake)
    tables = sp.compute(preset, home=store, progress=False)
    p = tables.problems
    assert list(p.columns) == sp.PROBLEM_COLUMNS and tables.checked == ("q=0.9",) and tables.margin_fraction == 0.25
    assert all(c["spec"] == preset.sparsity.eval and c["task"] == preset.task and c["home"] == store for c in calls)
    qs = list(preset.sparsity.quantiles)
    models = p.drop_duplicates(["method", "seed", "mode", "threshold"])
    # every model scored once: the base, each method's unreset and resets per seed, ES's noise control per seed
    assert len(models) == len(order) == 1 + 2 * 2 * (1 + 2 * len(qs)) + 2
    assert (p.groupby(["method", "seed", "mode", "threshold"]).size() == 3).all()  # three problems each
    n = preset.sparsity.eval.n_samples
    for method in preset.sparsity.methods:
        for seed in preset.seeds:
            tuned_ref = model_ref(trainer(method)(preset.config(method, seed=seed), home=store, progress=False))
            resets = weights.reset_models(preset.base_model, tuned_ref, qs, seed=seed, home=store)  # cached
            rows = p[(p["method"] == method) & (p["seed"] == seed)]
            unreset = rows[rows["mode"] == "unreset"]
            assert unreset["pass@1"].tolist() == pytest.approx([min(n, i + order[tuned_ref]) / n for i in range(3)])
            assert (unreset["sparsity"] == 0.0).all() and (unreset["threshold"] == "").all()
            for r in resets.itertuples():
                got = rows[(rows["mode"] == r.mode) & (rows["threshold"] == r.threshold)]
                assert got["pass@1"].tolist() == pytest.approx([min(n, i + order[r.ref]) / n for i in range(3)])
                assert (got["sparsity"] == r.sparsity).all() and (got["quantile"] == r.quantile).all()
            mag = resets[resets["mode"] == "magnitude"]
            # the model moved: real resets, about the quantile or more (ties at tau are reset too), never all
            assert (mag["sparsity"].to_numpy() >= np.array(qs) - 0.01).all() and (mag["sparsity"] < 1).all()
    base = p[p["mode"] == "base"]
    assert set(base["method"]) == {"base"} and set(base["seed"]) == {-1} and (base["sparsity"] == 1.0).all()
    assert set(zip(tables.drift["method"], tables.drift["seed"])) == {(m, s) for m in ("es", "grpo") for s in (0, 1)}
    assert sp.finding(tables).status == "undecidable at this design"  # two seeds < MIN_SEEDS: never reproduced
    assert _nothing_outside(study)


def test_compute_rejects_an_unknown_sparsity_method(study, monkeypatch):
    monkeypatch.setattr(sp, "evaluate_ref", _fake_evaluate([])[0])
    bad = replace(study.preset, sparsity=replace(study.preset.sparsity, methods=("es", "ppo")))
    with pytest.raises(ValueError, match="sparsity.methods names 'ppo'"):
        sp.compute(bad, home=study.store, progress=False)


def test_compute_drift_for_every_run_and_the_cached_sweep(study, forbid_loading):
    preset, store = study.preset, study.store
    tables = sp.compute(preset, home=store, progress=False)
    drift, sweep = tables.drift, tables.sweep
    assert list(dict.fromkeys(zip(drift["method"], drift["seed"]))) == list(study.runs)
    total = drift[drift["module"] == "all"].set_index("method")
    assert len(total) == len(study.runs) and (total["update_share"] == 1.0).all()
    assert drift["frac_changed"].between(0, 1).all() and (total["rel_l2"] > 0).all()
    # the overall relative drift is the ES run's own logged ||theta - theta_0|| / ||theta_0||
    es_drift = study.runs["es", 0].metrics()["es/drift_rel"].iloc[-1]
    assert total.loc["es", "rel_l2"] == pytest.approx(es_drift, rel=1e-4)
    assert sweep["pass@1"].between(0, 1).all() and (sweep["pass@K"] >= sweep["pass@1"]).all()
    assert _nothing_outside(study)
    # training, resets and evaluations are cached: a second compute trains and evaluates nothing
    forbid_loading(esreason_lib.models.load, common)
    n_runs = len(list(store.iterdir()))
    again = sp.compute(preset, home=store, progress=False)
    pd.testing.assert_frame_equal(again.drift, drift)
    pd.testing.assert_frame_equal(again.problems, tables.problems)
    assert sp.finding(again) == sp.finding(tables)
    assert len(list(store.iterdir())) == n_runs


def test_finding_without_drift_states_no_ratio():
    still = _drift(es_all=0.0, es_modules={"mlp": 0.0, "norm": 0.0, "attention": 0.0})
    sentence = sp.finding(_tables(_problems(0.0, 0.0, 0.0), drift=still)).sentence
    assert "ES relative L2 drift 0.00%, GRPO's 2.37%: no ratio (a method did not move); paper test" in sentence
    assert "largest" not in sentence
