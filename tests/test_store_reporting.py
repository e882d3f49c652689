"""store/reporting.py: `report_to` (TensorBoard, Weights & Biases) for every trainer, outside the run's identity."""

from __future__ import annotations

import sys
import types

import pytest

from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.store import reporting
from esreason_lib.store.identity import canonical_config
from esreason_lib.store.runs import Run
from esreason_lib.store.tensorboard import ENV


@pytest.fixture(autouse=True)
def _no_open_wandb_runs(monkeypatch):
    monkeypatch.setattr(reporting, "_WANDB", {})  # each test opens its own (stand-in) W&B runs


def test_report_targets_normalise_and_name_the_field():
    assert reporting.report_targets("wandb") == ("wandb",)
    assert reporting.report_targets(["wandb", "tensorboard", "wandb"]) == ("tensorboard", "wandb")
    assert reporting.report_targets("none") == () == reporting.report_targets(())
    with pytest.raises(ValueError, match=r"GRPOConfig.report_to=\['mlflow'\]: 'mlflow'"):
        GRPOConfig(report_to=["mlflow"])
    with pytest.raises(ValueError, match="ESConfig.report_to=3"):
        ESConfig(report_to=3)


def test_report_to_is_no_part_of_any_identity():
    plain, told = GRPOConfig(), GRPOConfig(report_to=("tensorboard", "wandb"))
    assert told.report_to == ("tensorboard", "wandb")
    assert canonical_config(plain) == canonical_config(told)
    assert canonical_config(plain, legacy=True) == canonical_config(told, legacy=True)
    assert "report_to" not in canonical_config(told, legacy=True)


class FakeWandb(types.ModuleType):
    def __init__(self):
        super().__init__("wandb")
        self.inits, self.logged = [], []

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return types.SimpleNamespace(log=lambda data, step: self.logged.append((step, data)))


def test_wandb_gets_each_record_once_per_run(monkeypatch, tmp_path):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv(reporting.WANDB_PROJECT, "proj")
    run = Run.open("grpo", {"x": 1}, seed=0, home=tmp_path)
    run.report_to = ("wandb",)
    run.log(1, {"reward/mean": 0.5, "note": "x"})
    run.log(2, {"reward/mean": 0.75})
    assert [(k["project"], k["id"], k["config"]) for k in fake.inits] == [("proj", run.path.name, run.config)]
    assert fake.logged == [(1, {"reward/mean": 0.5}), (2, {"reward/mean": 0.75})]


def test_wandb_missing_is_one_import_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)
    run = Run.open("grpo", {"x": 2}, seed=0, home=tmp_path)
    run.report_to = ("wandb",)
    with pytest.raises(ImportError, match="report_to includes 'wandb'"):
        run.log(1, {"reward/mean": 0.5})


def test_tensorboard_goes_to_the_setting_or_the_store(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(reporting, "mirror", lambda name, step, record, folder: seen.append((name, step, folder)))
    monkeypatch.delenv(ENV, raising=False)
    run = Run.open("es", {"x": 3}, seed=0, home=tmp_path / "store")
    run.log(1, {"reward/mean": 0.5})  # not asked for: nothing
    run.report_to = ("tensorboard",)
    run.log(2, {"reward/mean": 0.5})
    monkeypatch.setenv(ENV, str(tmp_path / "tb"))
    run.log(3, {"reward/mean": 0.5})
    assert seen == [(run.path.name, 2, tmp_path / "store" / "tensorboard"), (run.path.name, 3, tmp_path / "tb")]


def test_a_native_grpo_run_reports_its_records(monkeypatch, tmp_path):
    from test_grpo import ParenTask, _fresh, paren_config

    from esreason_lib.grpo.loop import train_grpo

    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    model, tok = _fresh()
    run = train_grpo(paren_config(iterations=2, report_to="wandb"), model=model, tokenizer=tok, task=ParenTask(),
                     home=tmp_path, progress=False)
    assert [step for step, _ in fake.logged] == [1, 2]
    assert fake.logged[0][1]["reward/mean"] == run.metrics()["reward/mean"].iloc[0]
