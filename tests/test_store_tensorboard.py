"""store/tensorboard.py: the metrics the store writes, mirrored as TensorBoard scalars when ESREASON_TENSORBOARD is
set (off by default)."""

from __future__ import annotations

import math

import pytest

from esreason_lib.store import runs as R
from esreason_lib.store import tensorboard as tb


def test_off_unless_the_setting_names_a_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(tb.ENV, raising=False)
    assert tb.tensorboard_dir() is None
    monkeypatch.setenv(tb.ENV, " ")
    assert tb.tensorboard_dir() is None
    monkeypatch.setenv(tb.ENV, str(tmp_path))
    assert tb.tensorboard_dir() == tmp_path


def test_only_finite_numbers_become_scalars():
    record = {"step": 3, "reward/mean": 0.5, "es/generations": 12, "policy/kl": math.nan, "flag": True, "note": "x"}
    assert tb.scalars(record) == {"reward/mean": 0.5, "es/generations": 12.0}


def test_a_logged_run_without_the_setting_writes_no_events(monkeypatch, tmp_path):
    monkeypatch.delenv(tb.ENV, raising=False)
    run = R.Run.open("grpo", {"x": 1}, seed=0, home=tmp_path / "store")
    run.log(0, {"reward/mean": 0.5})
    assert not any(p.name.startswith("events.out") for p in tmp_path.rglob("*"))


def test_the_store_writes_event_files_from_its_records(monkeypatch, tmp_path):
    pytest.importorskip("tensorboard", reason="TensorBoard is optional (pip install tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv(tb.ENV, str(tmp_path / "tb"))
    run = R.Run.open("es", {"x": 2}, seed=0, home=tmp_path / "store")
    for step in range(3):
        run.log(step, {"reward/mean": step / 10, "policy/kl": math.nan})
    events = EventAccumulator(str(tmp_path / "tb" / run.path.name))
    events.Reload()
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("reward/mean")] == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert list(run.metrics()["reward/mean"]) == pytest.approx([0.0, 0.1, 0.2])  # metrics.jsonl unchanged
