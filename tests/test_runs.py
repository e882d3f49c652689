"""The run store, always under tmp_path."""

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from esreason_lib import paths
from esreason_lib.store import identity as RI
from esreason_lib.store import integrity
from esreason_lib.store import runs as R


@dataclasses.dataclass(frozen=True)
class _Cfg:
    lr: float = 0.1
    """learning rate"""
    sizes: tuple = (1, 2)
    """a tuple (stored as a list)"""
    seed: int = 0
    """run seed"""


def test_config_hash_canonical():
    a = RI.config_hash(_Cfg())
    assert len(a) == 10 and all(ch in "0123456789abcdef" for ch in a)
    assert a == RI.config_hash({"seed": 0, "sizes": [1, 2], "lr": 0.1})  # dataclass == dict, keys sorted
    assert a != RI.config_hash(_Cfg(lr=0.2))
    assert RI.canonical_config({"p": Path("/x"), "n": np.int64(3), "t": (1, (2,))}) == \
        {"p": "/x", "n": 3, "t": [1, [2]]}
    with pytest.raises(TypeError, match="config.bad"):
        RI.config_hash({"bad": object()})
    with pytest.raises(TypeError, match="dataclass instance or a dict"):
        RI.config_hash([1, 2])


def test_added_option_at_its_default_keeps_the_identity():
    """A field added with `ADDED_OPTION` leaves the hash of every config at its default unchanged."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class _Later(_Cfg):
        noise: str = dataclasses.field(default="full", metadata=RI.ADDED_OPTION)

    assert RI.config_hash(_Later()) == RI.config_hash(_Cfg())
    assert RI.config_hash(_Later(noise="lowrank")) != RI.config_hash(_Cfg())
    assert RI.canonical_config(_Later(noise="lowrank"))["noise"] == "lowrank"


def test_run_store_root(monkeypatch, tmp_path):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path))
    assert paths.run_store_root() == tmp_path
    monkeypatch.delenv("ESREASON_HOME")
    assert paths.run_store_root() == paths.REPO_ROOT / "runs"


def test_stored_only_reopens_complete_runs_and_names_a_missing_one(monkeypatch, tmp_path):
    done = R.Run.open("eval", {"seed": 0, "x": 1}, seed=0, home=tmp_path)
    done.finish()
    R.Run.open("eval", {"seed": 0, "x": 2}, seed=0, home=tmp_path)  # started, never finished
    monkeypatch.setenv(R.STORED_ONLY, "1")
    assert R.Run.open("eval", {"seed": 0, "x": 1}, seed=0, home=tmp_path).is_complete()
    for x in (2, 3):
        with pytest.raises(R.MissingResult, match=f"the eval run {tmp_path}/eval-\\w+ is not complete.*\"x\": ?{x}"):
            R.Run.open("eval", {"seed": 0, "x": x}, seed=0, home=tmp_path)
    assert len(list(tmp_path.iterdir())) == 2  # nothing created for x=3


def test_open_layout_and_reopen(tmp_path):
    run = R.Run.open("es", _Cfg(), seed=0, home=tmp_path)
    assert run.path == tmp_path / f"es-{RI.config_hash(_Cfg())}"
    assert run.config == {"lr": 0.1, "sizes": [1, 2], "seed": 0} and run.kind == "es"
    assert json.loads((run.path / "config.json").read_text()) == run.config
    started = json.loads((run.path / "started.json").read_text())
    assert started["seed"] == 0 and started["started"]
    assert run.model_dir == run.path / "model"
    assert not run.is_complete() and not R.run_exists("es", _Cfg(), home=tmp_path)
    run.log(0, {"reward/mean": 0.5})
    again = R.Run.open("es", _Cfg(), seed=0, home=tmp_path)  # never wipes
    assert again.path == run.path and len(again.metrics()) == 1
    assert json.loads((run.path / "started.json").read_text())["started"] == started["started"]
    with pytest.raises(ValueError, match="seed=1 disagrees"):
        R.Run.open("es", _Cfg(), seed=1, home=tmp_path)
    R.Run.open("grpo", {"a": 1}, seed=3, home=tmp_path)
    with pytest.raises(ValueError, match="started with seed=3"):
        R.Run.open("grpo", {"a": 1}, seed=4, home=tmp_path)


@pytest.mark.parametrize("kind", ["", "ES", "a/b", "../x", "a b", None, "x" * 65])
def test_bad_kind(kind, tmp_path):
    with pytest.raises(ValueError, match="kind must be a simple slug"):
        R.Run.open(kind, {}, seed=0, home=tmp_path)


def test_log_metrics_and_truncate(tmp_path):
    run = R.Run.open("grpo", {"x": 1}, seed=0, home=tmp_path)
    assert run.metrics().empty and "step" in run.metrics().columns
    for step in range(5):
        run.log(step, {"reward/mean": np.float32(step / 10), "policy/kl": torch.tensor(step * 1.0)})
    df = run.metrics()
    assert isinstance(df, pd.DataFrame) and list(df["step"]) == [0, 1, 2, 3, 4]
    assert df["reward/mean"].iloc[3] == pytest.approx(0.3) and df["policy/kl"].iloc[4] == 4.0
    run.truncate_metrics(2)
    assert list(run.metrics()["step"]) == [0, 1, 2]
    with open(run.path / "metrics.jsonl", "a") as fh:  # a line torn by a crash
        fh.write('{"step": 3, "rew')
    run.log(3, {"reward/mean": 1.0})
    with pytest.warns(integrity.RunStoreWarning, match=r"metrics\.jsonl:4: not a JSON object"):
        assert list(run.metrics()["step"]) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="step"):
        run.log(4, {"step": 1})
    with pytest.raises(ValueError, match="metric 'v' must be a number"):
        run.log(4, {"v": [1, 2]})


def test_checkpoints_keep_last_two(tmp_path):
    run = R.Run.open("es", {"x": 2}, seed=0, home=tmp_path)
    assert run.latest_checkpoint() is None
    for step in range(1, 11):
        run.log(step, {"reward/mean": 0.0})
    for step in (1, 2, 10):
        path = run.save_checkpoint(step, {"theta": torch.full((3,), float(step)), "rng": [step]})
        assert path.name == f"step-{step:06d}.pt"
    names = sorted(p.name for p in (run.path / "checkpoints").iterdir())
    assert names == ["step-000002.pt", "step-000010.pt"]
    step, state = run.latest_checkpoint()
    assert step == 10 and torch.equal(state["theta"], torch.full((3,), 10.0)) and state["rng"] == [10]
    (run.path / "checkpoints" / "step-000010.pt").write_bytes(b"corrupt")
    with pytest.warns(integrity.RunStoreWarning, match=r"step-000010\.pt skipped: not a sealed esreason file"):
        assert run.latest_checkpoint()[0] == 2  # falls back to the previous one


def test_tables(tmp_path):
    run = R.Run.open("eval", {"x": 3}, seed=0, home=tmp_path)
    assert run.read_table("per_problem") is None
    df = pd.DataFrame({"id": ["a", "b"], "correct": [1, 0]})
    path = run.write_table("per_problem", df)
    assert path == run.path / "results" / "per_problem.csv"
    pd.testing.assert_frame_equal(run.read_table("per_problem"), df)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(ValueError, match="table name"):
        run.write_table("../evil", df)


def test_finish_manifest(tmp_path):
    run = R.Run.open("es", _Cfg(), seed=0, home=tmp_path)
    run.model_dir.mkdir(exist_ok=True)
    (run.model_dir / "model.safetensors").write_bytes(b"w")
    run.finish(wall_s=1.5)
    manifest = run.manifest()
    assert manifest["status"] == "complete" and manifest["seed"] == 0 and manifest["kind"] == "es"
    assert manifest["config"] == run.config and manifest["config_hash"] == RI.config_hash(_Cfg())
    assert set(manifest["versions"]) == {"python", "torch", "transformers", "numpy", "esreason"}
    assert manifest["versions"]["torch"] and manifest["versions"]["numpy"] == np.__version__
    assert manifest["git_sha"] is None or len(manifest["git_sha"]) >= 40
    assert manifest["started"] and manifest["ended"] and manifest["wall_s"] == 1.5
    assert run.is_complete() and R.run_exists("es", _Cfg(), home=tmp_path)
    assert not R.run_exists("es", _Cfg(lr=0.5), home=tmp_path)
    with pytest.raises(ValueError, match="reserved"):
        run.finish(status="complete", seed=3)
    run.finish(status="failed")
    assert not run.is_complete() and not R.run_exists("es", _Cfg(), home=tmp_path)


def test_opening_a_complete_run_hashes_each_model_file_once(tmp_path, monkeypatch):
    run = R.Run.open("es", _Cfg(), seed=0, home=tmp_path)
    run.model_dir.mkdir(exist_ok=True)
    for name in ("weights.bin", "config.json"):
        (run.model_dir / name).write_bytes(name.encode() * 1000)
    run.finish()
    monkeypatch.setattr(integrity, "_SETTLED_NS", 50_000_000)  # files older than 50 ms are remembered
    time.sleep(0.1)
    calls = []
    real = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file", lambda path: calls.append(path.name) or real(path))
    assert R.run_exists("es", _Cfg(), home=tmp_path)  # what check_training_config asks first
    opened = R.Run.open("es", _Cfg(), seed=0, home=tmp_path, lock=True)
    assert opened.is_complete() and sorted(calls) == ["config.json", "weights.bin"]  # once each, not 3-4 times
    flipped = run.model_dir / "weights.bin"
    data = bytearray(flipped.read_bytes())
    data[7] ^= 1
    flipped.write_bytes(bytes(data))  # same size, new mtime and ctime: hashed again, and refused
    with pytest.warns(integrity.RunStoreWarning, match="weights.bin does not match"):
        assert not opened.is_complete()
    assert calls.count("weights.bin") == 2


def test_zoo_versions_join_the_run_identity(tmp_path, monkeypatch):
    from dataclasses import replace

    from esreason_lib.models import zoo
    from esreason_lib.store.identity import config_hash, with_zoo_versions
    from esreason_lib.store.runs import Run

    assert with_zoo_versions({"model": "not-a-zoo-name", "x": [1]}) == {"model": "not-a-zoo-name", "x": [1]}
    tagged = with_zoo_versions({"model": "smoke", "nested": {"refs": ["qwen2-s"]}})
    assert tagged["zoo_versions"] == {"smoke": config_hash(zoo.ZOO["smoke"]),
                                      "qwen2-s": config_hash(zoo.ZOO["qwen2-s"])}
    before = Run.open("es", {"model": "smoke"}, seed=0, home=tmp_path)
    assert before.config["zoo_versions"] == {"smoke": config_hash(zoo.ZOO["smoke"])}
    assert Run.open("es", {"model": "smoke"}, seed=0, home=tmp_path).path == before.path
    monkeypatch.setitem(zoo.ZOO, "smoke", replace(zoo.ZOO["smoke"], steps=31))  # the recipe changes
    assert Run.open("es", {"model": "smoke"}, seed=0, home=tmp_path).path != before.path
    assert "zoo_versions" not in Run.open("zoo", {"name": "smoke"}, seed=0, home=tmp_path).config


def test_an_identity_without_a_registered_zoo_is_refused(monkeypatch):
    """The package registers the zoo's versions at import; without them an identity could name another run."""
    from esreason_lib.store import identity

    monkeypatch.setattr(identity, "_ZOO_VERSIONS", [])
    with pytest.raises(RuntimeError, match="a run's identity needs the model zoo's versions, and none is registered"):
        identity.with_zoo_versions({"model": "smoke"})
    identity.register_zoo_versions(lambda: {"smoke": "0123456789"})
    assert identity.with_zoo_versions({"model": "smoke"})["zoo_versions"] == {"smoke": "0123456789"}


def test_package_versions_names_the_stack():
    import platform

    import esreason_lib

    versions = RI.package_versions()
    assert set(versions) == {"python", "esreason", "torch", "transformers", "numpy"}
    assert versions["python"] == platform.python_version() and versions["esreason"] == esreason_lib.__version__
    assert versions["numpy"] == np.__version__ and versions["torch"].split("+")[0] == torch.__version__.split("+")[0]
