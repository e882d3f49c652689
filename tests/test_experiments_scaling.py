"""The population-scaling study (notebook 06): pure pieces on hand-computable tables, and training and evaluation
on the smoke preset."""

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import esreason_lib.models
from esreason_lib.experiments import common
from esreason_lib.experiments import scaling as S
from esreason_lib.experiments.common import evaluate_ref
from esreason_lib.zoo import num_parameters
from esreason_lib.presets import get_preset


def test_tail_mean_and_smoothing_window():
    assert S.tail_mean([0, 0, 0, 0, 0, 0, 0, 0, 1, 3]) == 2.0  # last 20% of 10 = 2 values
    assert S.tail_mean([1, 2, 3], frac=0.2) == 3.0  # ceil(0.6) = 1 value
    assert S.tail_mean([4.0]) == 4.0
    assert math.isnan(S.tail_mean([]))
    assert S.smoothing_window(16) == 3 and S.smoothing_window(2) == 1 and S.smoothing_window(50) == 10


def test_settings_come_from_the_preset():
    smoke, paper = get_preset("smoke"), get_preset("paper-easy")
    assert smoke.scaling.prompts_per_step == 4 and paper.scaling.prompts_per_step == paper.es.prompts_per_step
    assert (smoke.scaling.eval.n_samples, smoke.scaling.eval.ks) == (1, (1,))
    tiny = get_preset("tiny")
    assert tiny.es.population_size in tiny.scaling.populations


def test_check_task_kwargs_rejects_a_task_the_zoo_models_never_saw():
    S.check_task_kwargs(get_preset("tiny"))  # zoo defaults == countdown defaults
    S.check_task_kwargs(get_preset("paper-easy"))  # not countdown: nothing to check
    with pytest.raises(ValueError, match="qwen2-s.*pretrained on countdown"):
        S.check_task_kwargs(get_preset("tiny", task_kwargs={"high": 20}))


def test_ablations_share_the_zscore_run():
    assert S.ABLATIONS["zscore"] == {"normalization": "zscore"}
    antithetic = get_preset("tiny").es.antithetic
    twin = "antithetic" if antithetic else "plain"
    assert {**S.ABLATIONS[twin], "antithetic": antithetic} == {**S.ABLATIONS["zscore"], "antithetic": antithetic}


def _problems(acc: dict[tuple[str, int], list[int]]) -> pd.DataFrame:
    return pd.concat([pd.DataFrame({"model": m, "N": n, "problem_id": [f"p{i}" for i in range(len(v))],
                                    "greedy_correct": np.asarray(v, float)}) for (m, n), v in acc.items()],
                     ignore_index=True)


def test_population_gaps_paired_by_problem():
    probs = _problems({("s", 4): [0, 0, 1, 1], ("s", 32): [1, 1, 1, 0],
                       ("l", 4): [1, 0, 1, 0], ("l", 32): [1, 0, 1, 0]})
    gaps = S.population_gaps(probs, 4, 32)
    assert gaps["model"].tolist() == ["s", "l"]
    # s: d = [1, 1, 0, -1], mean 0.25, std(ddof=1) = sqrt(11/12), se = that / 2
    assert gaps.loc[0, "gap"] == pytest.approx(0.25)
    assert gaps.loc[0, "se"] == pytest.approx(math.sqrt(11 / 12) / 2)
    assert gaps.loc[1, "gap"] == 0.0 and gaps.loc[1, "se"] == 0.0


@pytest.mark.parametrize("gap, se, want", [
    ([0.3, 0.2, 0.1], [0.01] * 3, "yes"),
    ([0.3, 0.4, 0.1], [0.01] * 3, "partly"),
    ([0.1, 0.0, 0.2], [0.01] * 3, "no"),
    ([0.10, 0.09, 0.08], [0.03] * 3, "yes (within noise)"),
    ([0.1], [0.01], "n/a (one size)"),
])
def test_gap_trend(gap, se, want):
    assert S.gap_trend(pd.DataFrame({"model": list("abc")[:len(gap)], "gap": gap, "se": se})) == want


def _summary():
    rows = []
    for model, params, accs in (("s", 130_000, [0.1, 0.2, 0.4]), ("l", 3_300_000, [0.3, 0.5, 0.55])):
        for n, acc in zip((0, 4, 32), accs):
            rows.append({"model": model, "params": params, "N": n, "heldout": acc,
                         "generations": np.nan if n == 0 else n * 10, "center_tail": acc})
    return pd.DataFrame(rows)


def test_table6_shape():
    t = S.table6(_summary())
    assert t.index.tolist() == ["s (0.13M)", "l (3.30M)"]
    assert t.columns.tolist() == ["base", "N=4", "N=32"]
    assert t.loc["l (3.30M)", "N=32"] == 0.55


def test_describe_scaling_is_computed_from_the_tables():
    summary = _summary()
    probs = _problems({("s", 4): [1, 0, 0, 0, 0], ("s", 32): [1, 1, 1, 0, 0],
                       ("l", 4): [1, 1, 0, 0, 0], ("l", 32): [1, 1, 1, 0, 0]})
    ablation = pd.DataFrame({"ablation": ["zscore", "rank", "none", "antithetic", "plain"],
                             "heldout": [0.31, 0.29, 0.2, 0.31, 0.28]})
    text = S.describe_scaling(summary, probs, ablation, 16)
    assert text.startswith("held-out greedy accuracy after 16 ES iterations, gap N=32 - N=4: s +0.40±0.24, "
                           "l +0.20±0.20 (shrinks with size: yes (within noise); N=32 used 8x the generations")
    assert text.endswith("after 16 iterations on the base, normalization zscore 0.31 / rank 0.29 / none 0.20; "
                         "antithetic 0.31 vs plain 0.28")
    assert "after 150 iterations on the base" in S.describe_scaling(summary, probs, ablation, 16, 150)
    assert "N=32 used 8x the generations of N=4; base accuracy s 0.10 / l 0.30); " in text
    no_base = S.describe_scaling(summary[summary["N"] > 0], probs, ablation, 16)
    assert "base accuracy" not in no_base and "N=32 used 8x the generations of N=4); " in no_base


def test_ablation_iterations():
    assert get_preset("tiny").scaling.ablation_iterations == 150
    assert get_preset("smoke").scaling.ablation_iterations == get_preset("smoke").scaling.iterations


# ------------------------------------------------------------------------------------------- the study, smoke
@pytest.fixture(scope="module")
def study(isolated_store):
    """The smoke preset's scaling cells trained once into `store`; ESREASON_HOME points to a separate folder,
    `default`, so that anything written outside the given store shows up."""
    preset = get_preset("smoke")
    return SimpleNamespace(**vars(isolated_store), preset=preset,
                           runs=S.scaling_runs(preset, home=isolated_store.store, progress=False))


def _nothing_outside(study):
    return not study.default.exists() or not any(study.default.iterdir())


def test_scaling_runs_one_es_run_per_model_and_population(study, forbid_loading):
    preset, runs = study.preset, study.runs
    assert list(runs) == [("smoke", 2), ("smoke", 4)]  # (model, N) in preset order
    for (model, n), run in runs.items():
        assert run.kind == "es" and run.is_complete() and run.path.parent == study.store
        cfg = run.config
        assert (cfg["model"], cfg["population_size"], cfg["iterations"], cfg["prompts_per_step"], cfg["seed"]) == (
            model, n, preset.scaling.iterations, preset.scaling.prompts_per_step, preset.seeds[0])
        assert (cfg["sigma"], cfg["normalization"]) == (preset.es.sigma, preset.es.normalization)  # the rest: es
        metrics = run.metrics()
        assert len(metrics) == preset.scaling.iterations
        # antithetic pairs or not, an iteration costs N completions per prompt
        assert metrics["es/generations"].iloc[-1] == n * preset.scaling.prompts_per_step * preset.scaling.iterations
    assert _nothing_outside(study)
    forbid_loading(esreason_lib.models)  # a trainer that runs loads its base
    assert {k: r.path for k, r in S.scaling_runs(preset, home=study.store, progress=False).items()} == {
        k: r.path for k, r in runs.items()}


def test_scaling_runs_and_ablation_runs_reject_a_task_the_zoo_model_never_saw(tmp_path):
    preset = get_preset("smoke", task_kwargs={"high": 20})
    for train_all in (S.scaling_runs, S.ablation_runs):
        with pytest.raises(ValueError, match="'smoke' was pretrained on countdown"):
            train_all(preset, home=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())  # checked before anything is trained


def test_ablation_runs_share_the_zscore_run_with_the_scaling_cell(study, forbid_loading):
    preset = study.preset
    runs = S.ablation_runs(preset, home=study.store, progress=False)
    assert list(runs) == list(S.ABLATIONS)
    for label, run in runs.items():
        cfg = run.config
        assert cfg["normalization"] == S.ABLATIONS[label]["normalization"]
        assert cfg["antithetic"] == S.ABLATIONS[label].get("antithetic", preset.es.antithetic)
        assert (cfg["model"], cfg["population_size"], cfg["iterations"], cfg["prompts_per_step"]) == (
            preset.base_model, preset.es.population_size, preset.scaling.ablation_iterations, preset.scaling.prompts_per_step)
        assert run.is_complete()
    # smoke samples antithetically: "antithetic" is the "zscore" run, which is the base model's scaling cell at
    # N = preset.es.population_size (same iterations), so it is trained once
    assert preset.es.antithetic and preset.es.population_size in preset.scaling.populations
    cell = study.runs[preset.base_model, preset.es.population_size]
    assert runs["zscore"].path == runs["antithetic"].path == cell.path
    assert len({run.path for run in runs.values()}) == 4
    forbid_loading(esreason_lib.models)
    assert {k: r.path for k, r in S.ablation_runs(preset, home=study.store, progress=False).items()} == {
        k: r.path for k, r in runs.items()}


def test_ablation_runs_with_their_own_iterations_are_not_the_scaling_cell(study):
    preset = get_preset("smoke", **{"scaling.ablation_iterations": 1})
    runs = S.ablation_runs(preset, home=study.store, progress=False)
    assert all(run.config["iterations"] == 1 and len(run.metrics()) == 1 for run in runs.values())
    assert runs["zscore"].path != study.runs[preset.base_model, preset.es.population_size].path


def _fake_evaluate(greedy, calls):
    """An `evaluate_ref` stand-in: ref's greedy_correct per problem from `greedy`, pass@1 = mean / 2."""

    def evaluate_ref(ref, task, task_kwargs, spec, *, device, home, progress):
        calls.append({"ref": ref, "task": task, "spec": spec, "home": home})
        g = greedy[ref]
        table = pd.DataFrame({"problem_id": [f"p{i}" for i in range(len(g))], "greedy_correct": g})
        return SimpleNamespace(table=table, curve=pd.DataFrame({"k": [1], "pass_at_k": [np.mean(g) / 2]}))

    return evaluate_ref


def test_evaluate_runs_summary_and_per_problem_table(study, monkeypatch):
    preset, run = study.preset, study.runs["smoke", 4]
    greedy = {"smoke": [True, False, False, False], str(run.model_dir): [True, True, False, True]}
    calls = []
    monkeypatch.setattr(S, "evaluate_ref", _fake_evaluate(greedy, calls))
    summary, problems = S.evaluate_runs(preset, {("smoke", 0): "smoke", ("smoke", 4): run}, ("model", "N"),
                                        home=study.store, progress=False)
    assert list(summary.columns) == ["model", "N", "heldout", "pass@1", "generations", "center_tail", "pop_tail"]
    assert summary["heldout"].tolist() == [0.25, 0.75] and summary["pass@1"].tolist() == [0.125, 0.375]
    metrics = run.metrics()
    assert summary[["generations", "center_tail", "pop_tail"]].iloc[0].isna().all()  # a name: no run metrics
    assert summary.loc[1, "generations"] == metrics["es/generations"].iloc[-1]
    assert summary.loc[1, "center_tail"] == S.tail_mean(metrics["reward/center"])
    assert summary.loc[1, "pop_tail"] == S.tail_mean(metrics["reward/mean"])
    assert list(problems.columns) == ["model", "N", "problem_id", "greedy_correct"]
    assert list(zip(problems["model"], problems["N"])) == [("smoke", 0)] * 4 + [("smoke", 4)] * 4
    assert problems["greedy_correct"].tolist() == [1, 0, 0, 0, 1, 1, 0, 1]
    assert all(c["spec"] == preset.scaling.eval and c["task"] == preset.task and c["home"] == study.store
               for c in calls)
    # labels that are not tuples (the ablations) become the single key column
    summary, problems = S.evaluate_runs(preset, {"zscore": run}, ("ablation",), progress=False)
    assert summary["ablation"].tolist() == ["zscore"] and set(problems["ablation"]) == {"zscore"}


def test_scaling_report_adds_the_base_models_and_params(study, forbid_loading):
    preset, store = study.preset, study.store
    runs = dict(reversed(study.runs.items()))  # sorted by (params, N) whatever the input order
    summary, problems = S.scaling_report(preset, runs, home=store, progress=False)
    assert list(summary.columns) == ["model", "params", "N", "heldout", "pass@1", "generations", "center_tail",
                                     "pop_tail"]
    assert summary["N"].tolist() == [0, 2, 4] and (summary["model"] == "smoke").all()
    params = num_parameters(esreason_lib.models.load_model("smoke", home=store, progress=False)[0])
    assert (summary["params"] == params).all()
    assert np.isnan(summary.loc[0, "generations"]) and summary["generations"].tolist()[1:] == [16, 32]
    spec = preset.scaling.eval
    assert len(problems) == 3 * spec.n_problems and set(problems["greedy_correct"]) <= {0.0, 1.0}
    per_cell = problems.groupby(["model", "N"])["greedy_correct"].mean()
    assert summary.set_index(["model", "N"])["heldout"].to_dict() == pytest.approx(per_cell.to_dict())
    base = evaluate_ref("smoke", preset.task, preset.task_kwargs, spec, home=store, progress=False)  # cached
    assert summary.loc[0, "heldout"] == pytest.approx(base.table["greedy_correct"].astype(float).mean())
    assert _nothing_outside(study)
    forbid_loading(common)  # every evaluation is cached
    again, again_problems = S.scaling_report(preset, runs, home=store, progress=False)
    pd.testing.assert_frame_equal(again, summary)
    pd.testing.assert_frame_equal(again_problems, problems)
