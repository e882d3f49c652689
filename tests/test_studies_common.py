"""Shared experiment pieces: model references and the cached evaluation of a reference.

Evaluations use the smoke zoo model (pretrained once per module into a temporary run store) under a small
EvalSpec; ESREASON_HOME points to a second, separate folder so that anything written outside the given store
shows up.
"""

from pathlib import Path

import pandas as pd
import pytest

import esreason_lib.models.load
from esreason_lib.evaluation import CURVE_COLUMNS, PROBLEM_COLUMNS, EvalSpec
from esreason_lib.paper.studies import common
from esreason_lib.paper.studies.common import evaluate_ref, model_ref
from esreason_lib.store.runs import Run
from esreason_lib.tasks import get_task

SPEC = EvalSpec(n_problems=3, n_samples=2, ks=(1, 2), n_boot=20)


# ------------------------------------------------------------------------------------------- model_ref
def test_model_ref_of_a_run_is_its_saved_model_directory(tmp_path):
    run = Run.open("es", {"seed": 0, "iterations": 1}, seed=0, home=tmp_path)
    ref = model_ref(run)
    assert isinstance(ref, str)
    assert ref == str(run.model_dir) == str(tmp_path / run.path.name / "model")


def test_model_ref_passes_zoo_names_hub_ids_and_paths_through_as_strings():
    assert model_ref("smoke") == "smoke"
    assert model_ref("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"
    ref = model_ref(Path("/some/dir/model"))
    assert isinstance(ref, str) and ref == "/some/dir/model"


# ------------------------------------------------------------------------------------------- evaluate_ref
@pytest.fixture(scope="module")
def evaluated(isolated_store):
    """(store, default store, EvalResult of the smoke model on countdown under SPEC, evaluated into store)."""
    store = isolated_store.store
    return store, isolated_store.default, evaluate_ref("smoke", "countdown", {}, SPEC, home=store, progress=False)


def test_evaluate_ref_tables_have_the_documented_columns_and_ranges(evaluated):
    _, _, result = evaluated
    table, curve = result.table, result.curve
    assert tuple(table.columns) == PROBLEM_COLUMNS and tuple(curve.columns) == CURVE_COLUMNS
    ids = [str(ex["id"]) for ex in get_task("countdown").examples("test", n=SPEC.n_problems, seed=SPEC.seed)]
    assert table["problem_id"].tolist() == ids  # the task's held-out draw for the spec's seed
    assert (table["n"] == SPEC.n_samples).all()
    assert ((table["c"] >= 0) & (table["c"] <= table["n"])).all()
    assert (table["distinct_correct"] <= table["c"]).all()
    assert curve["k"].tolist() == list(SPEC.ks)
    p = curve["pass_at_k"]
    assert ((p >= 0) & (p <= 1)).all() and p.is_monotonic_increasing
    assert ((curve["ci_low"] <= p + 1e-12) & (p <= curve["ci_high"] + 1e-12)).all()
    assert p.iloc[0] == pytest.approx((table["c"] / table["n"]).mean())  # pass@1 = mean c / n


def test_evaluate_ref_is_one_complete_eval_run_in_the_given_store_only(evaluated):
    store, default, result = evaluated
    evals = sorted(store.glob("eval-*"))
    assert len(evals) == 1
    run = Run.open("eval", {"model": "smoke", "task": "countdown", "task_kwargs": {}, "eval": SPEC},
                   seed=SPEC.seed, home=store)
    assert run.path == evals[0] and run.is_complete()
    assert run.manifest()["eval/pass@1"] == pytest.approx(float(result.curve["pass_at_k"].iloc[0]))
    assert list(store.glob("zoo-*")), "the zoo base was not pretrained into the given store"
    assert not default.exists() or not any(default.iterdir()), "evaluate_ref wrote outside its store"


def test_evaluate_ref_reloads_a_finished_evaluation_without_loading_a_model(evaluated, forbid_loading):
    store, _, result = evaluated
    forbid_loading(common, esreason_lib.models.load)
    again = evaluate_ref("smoke", "countdown", {}, SPEC, home=store, progress=False)
    pd.testing.assert_frame_equal(again.table, result.table)
    pd.testing.assert_frame_equal(again.curve, result.curve)
    assert len(list(store.glob("eval-*"))) == 1


def test_evaluate_ref_with_a_model_in_memory_is_cached_under_the_given_ref(evaluated, forbid_loading):
    store, _, result = evaluated
    model, tokenizer = esreason_lib.models.load.load_model("smoke", home=store, progress=False)
    forbid_loading(common, esreason_lib.models.load)
    mem = evaluate_ref("smoke-in-memory", "countdown", {}, SPEC, home=store, progress=False, model=model,
                       tokenizer=tokenizer)
    pd.testing.assert_frame_equal(mem.table, result.table)  # the same model and seed: the same samples
    assert len(list(store.glob("eval-*"))) == 2  # but its own cache entry, keyed by the ref
    cached = evaluate_ref("smoke-in-memory", "countdown", {}, SPEC, home=store, progress=False)
    pd.testing.assert_frame_equal(cached.table, mem.table)


# ------------------------------------------------------------------------------------------- run_cost
def test_run_cost_sums_last_generations_and_step_seconds_over_stages(tmp_path):
    es = Run.open("es", {"seed": 0, "iterations": 2}, seed=0, home=tmp_path)
    es.log(1, {"es/generations": 6, "time/step_s": 0.5})
    es.log(2, {"es/generations": 12, "time/step_s": 0.25})
    grpo = Run.open("grpo", {"seed": 0, "iterations": 1}, seed=0, home=tmp_path)
    grpo.log(1, {"grpo/generations": 4, "time/step_s": 1.0})
    untimed = Run.open("grpo", {"seed": 1, "iterations": 1}, seed=1, home=tmp_path)
    untimed.log(1, {"reward/mean": 0.0})
    assert common.run_cost([es]) == {"generations": 12, "seconds": 0.75}
    assert common.run_cost([es, grpo]) == {"generations": 16, "seconds": 1.75}
    cost = common.run_cost([untimed])
    assert cost["generations"] == 0 and cost["seconds"] != cost["seconds"]  # nan: no step time logged
