"""Sequential post-training: budget splits and stages by hand, and a two-stage smoke chain with cache reuse.

Runs go to ESREASON_HOME=tmp_path; the smoke zoo model pretrains there in about a second.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from esreason_lib.methods import METHODS, sequence_stages, split_budget, train_sequence
from esreason_lib.paper.studies.presets import get_preset


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path))
    torch.set_num_threads(1)
    return tmp_path


# ------------------------------------------------------------------------------------------- split_budget
@pytest.mark.parametrize("total, fractions, want", [
    (100, (0.5, 0.5), (50, 50)),
    (10, (0.5, 0.5), (5, 5)),
    (11, (0.5, 0.5), (5, 6)),  # odd: the last stage takes the remainder
    (3, (0.5, 0.5), (1, 2)),
    (2, (0.5, 0.5), (1, 1)),
    (234, (0.5, 0.5), (117, 117)),
    (10, (0.3, 0.7), (3, 7)),
    (100, (0.29, 0.71), (29, 71)),  # 100 * 0.29 == 28.999999999999996 in floats
    (8, (0.25, 0.75), (2, 6)),
    (10, (1 / 3, 1 / 3, 1 / 3), (3, 3, 4)),
    (3, (1 / 3, 1 / 3, 1 / 3), (1, 1, 1)),
    (7, (1.0,), (7,)),
])
def test_split_budget_by_hand(total, fractions, want):
    assert split_budget(total, fractions) == want


def test_split_budget_default_and_sum():
    assert split_budget(5) == (2, 3)
    for total in range(2, 60):
        for fractions in ((0.5, 0.5), (0.1, 0.9), (0.2, 0.3, 0.5), (0.7, 0.3)):
            if total < len(fractions):
                continue
            parts = split_budget(total, fractions)
            assert sum(parts) == total and len(parts) == len(fractions) and all(p >= 0 for p in parts)
            assert all(abs(p - total * f) < 1 + 1e-9 for p, f in zip(parts[:-1], fractions))


@pytest.mark.parametrize("total, fractions, pattern", [
    (1, (0.5, 0.5), r"total must be an int >= the number of stages \(2\), got 1"),
    (0, (1.0,), r"stages \(1\), got 0"),
    (-4, (0.5, 0.5), r"got -4"),
    (True, (0.5, 0.5), r"got True"),
    (10.0, (0.5, 0.5), r"got 10\.0"),
    ("10", (0.5, 0.5), r"got '10'"),
    (10, (0.6, 0.6), r"fractions must be positive and sum to 1, got \(0\.6, 0\.6\)"),
    (10, (1.0, 0.0), r"fractions must be positive .*got \(1\.0, 0\.0\)"),
    (10, (1.5, -0.5), r"got \(1\.5, -0\.5\)"),
    (10, (), r"fractions .*got \(\)"),
])
def test_split_budget_rejects_bad_input(total, fractions, pattern):
    with pytest.raises(ValueError, match=pattern):
        split_budget(total, fractions)


# ------------------------------------------------------------------------------------------- sequence_stages
def test_sequence_stages_by_hand():
    assert METHODS == ("es", "grpo")
    assert sequence_stages(["grpo", "es"], 100) == [("grpo", 50), ("es", 50)]
    assert sequence_stages(("grpo", "es"), 5) == [("grpo", 2), ("es", 3)]
    assert sequence_stages(["es", "grpo"], 5) == [("es", 2), ("grpo", 3)]
    assert sequence_stages(["es", "grpo"], 2) == [("es", 1), ("grpo", 1)]
    assert sequence_stages(["es"], 7) == [("es", 7)]
    assert sequence_stages(["grpo", "es", "grpo"], 10) == [("grpo", 3), ("es", 3), ("grpo", 4)]
    assert sequence_stages(["grpo", "es"], 10, (0.2, 0.8)) == [("grpo", 2), ("es", 8)]
    # per-method budgets: each stage takes its share of its own method's budget
    assert sequence_stages(["grpo", "es"], {"es": 7, "grpo": 20}) == [("grpo", 10), ("es", 4)]
    assert sequence_stages(["es", "grpo"], {"es": 5, "grpo": 5}) == sequence_stages(["es", "grpo"], 5)


@pytest.mark.parametrize("order, total, fractions, pattern", [
    (["grpo", "adam"], 10, None, r"method 'adam' is not one of \('es', 'grpo'\)"),
    (["ES", "grpo"], 10, None, r"method 'ES' is not one of"),
    ([], 10, None, r"order must name at least one method, got \[\]"),
    (["grpo", "es"], 1, None, r"total must be an int >= the number of stages \(2\), got 1"),
    (["grpo", "es"], 10, (0.3, 0.3, 0.4), r"fractions must give one share per stage of \('grpo', 'es'\), "
                                          r"got \(0\.3, 0\.3, 0\.4\)"),
    (["grpo", "es"], 10, (1.0,), r"one share per stage .*got \(1\.0,\)"),
    (["grpo", "es"], 10, (0.9, 0.9), r"fractions must be positive and sum to 1, got \(0\.9, 0\.9\)"),
])
def test_sequence_stages_rejects_bad_input(order, total, fractions, pattern):
    with pytest.raises(ValueError, match=pattern):
        sequence_stages(order, total, fractions)


# ------------------------------------------------------------------------------------------- train_sequence
@pytest.mark.parametrize("stages, pattern", [
    ([], r"stages must name at least one \(method, budget\) pair"),
    ([("adam", 1)], r"stage method 'adam' is not one of \('es', 'grpo'\)"),
    ([("es", 0)], r"stage 'es' budget must be a positive int, got 0"),
    ([("grpo", True)], r"stage 'grpo' budget must be a positive int, got True"),
    ([("es", 1.5)], r"got 1\.5"),
    ([("es", 1), ("adam", 1)], r"stage method 'adam'"),  # a bad later stage: nothing is trained first
    ([("grpo", 1), ("es", 0)], r"stage 'es' budget .*got 0"),
])
def test_train_sequence_rejects_bad_stages_before_training(stages, pattern, home):
    smoke = get_preset("smoke")
    with pytest.raises(ValueError, match=pattern):
        train_sequence(stages, es=smoke.es, grpo=smoke.grpo, progress=False)
    assert list(home.iterdir()) == []


def test_train_sequence_chains_stages_and_reuses_finished_runs(home, monkeypatch):
    smoke = get_preset("smoke")
    es = dataclasses.replace(smoke.es, sigma=0.01, iterations=99)  # iterations is replaced by the stage budget
    stages = sequence_stages(["grpo", "es"], 2)
    runs = train_sequence(stages, es=es, grpo=smoke.grpo, progress=False)

    assert [r.kind for r in runs] == ["grpo", "es"] and all(r.path.parent == home for r in runs)
    first, second = runs
    assert first.config["model"] == "smoke" and first.config["iterations"] == 1
    assert second.config["model"] == f"run:{first.path.name}/model"  # stage 2 starts from stage 1's saved model
    assert second.config["iterations"] == 1 and second.config["sigma"] == 0.01
    assert first.config["lr"] == smoke.grpo.lr and second.config["alpha"] == smoke.es.alpha
    for run in runs:
        assert run.is_complete() and run.metrics()["step"].tolist() == [1]
        assert (run.model_dir / "config.json").exists()
    stage1_weights = (first.model_dir / "model.safetensors").read_bytes()

    # rerun: both runs come back from the store untouched; no model is even loaded
    files = {r.path: {name: (r.path / name).read_bytes() for name in ("metrics.jsonl", "manifest.json")}
             for r in runs}

    def no_loading(*args, **kwargs):
        raise AssertionError("a finished stage was retrained")

    import esreason_lib.models.load

    monkeypatch.setattr(esreason_lib.models.load, "load_model", no_loading)  # both trainers load through it
    again = train_sequence(stages, es=es, grpo=smoke.grpo, progress=False)
    assert [r.path for r in again] == [r.path for r in runs]
    for r in again:
        assert {name: (r.path / name).read_bytes() for name in files[r.path]} == files[r.path]
    assert (first.model_dir / "model.safetensors").read_bytes() == stage1_weights
    started = json.loads((second.path / "started.json").read_text())
    assert started["resumed"] == []  # reopening a complete run records nothing (a read-only store serves it)

    # an explicit base_model: starting ES from stage 1's model is exactly the cached stage 2
    (only,) = train_sequence([("es", 1)], es=es, grpo=smoke.grpo, base_model=first.model_dir, progress=False)
    assert only.path == second.path


def test_train_sequence_other_order_and_home(home, tmp_path):
    smoke = get_preset("smoke")
    other = tmp_path / "elsewhere"
    runs = train_sequence([("es", 1), ("grpo", 2)], es=smoke.es, grpo=smoke.grpo, home=other, progress=False)
    assert [r.kind for r in runs] == ["es", "grpo"] and all(r.path.parent == other for r in runs)
    assert runs[0].config["model"] == "smoke" and runs[1].config["model"] == f"run:{runs[0].path.name}/model"
    assert runs[1].config["iterations"] == 2 and runs[1].metrics()["step"].tolist() == [1, 2]
    assert not [p for p in home.iterdir() if p.name.startswith(("es-", "grpo-"))]  # no run in the default store
