"""Execution settings (checkpoint_every, Ray workers, a backend among the bit-identical ones) are not part of a run's
identity: a stored run is found whichever of them trained it, including runs stored before they left it."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from esreason_lib.es.backends.base import EXACT_BACKENDS
from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.store.identity import canonical_json, config_hash, execution
from esreason_lib.store.runs import Run, run_exists


@dataclasses.dataclass(frozen=True)
class _Cfg:
    lr: float = 0.1
    every: int = dataclasses.field(default=5, metadata=execution())
    engine: str = dataclasses.field(default="exact", metadata=execution(exact=("exact", "also-exact")))


def test_execution_fields_leave_the_identity_unless_their_value_changes_results():
    assert config_hash(_Cfg()) == config_hash(_Cfg(every=50)) == config_hash(_Cfg(engine="also-exact"))
    assert config_hash(_Cfg(engine="approximate")) != config_hash(_Cfg())
    assert config_hash(_Cfg(lr=0.2)) != config_hash(_Cfg())
    assert '"every":5' in canonical_json(_Cfg(), legacy=True) and "every" not in canonical_json(_Cfg())


def test_es_and_grpo_identities_ignore_how_they_are_computed():
    base = ESConfig(model="smoke", iterations=2)
    same = [dataclasses.replace(base, backend=b) for b in EXACT_BACKENDS if b != "batched" or base.greedy]
    same += [dataclasses.replace(base, workers=7), dataclasses.replace(base, checkpoint_every=1)]
    assert {config_hash(c) for c in same} == {config_hash(base)}
    assert config_hash(dataclasses.replace(base, backend="vllm")) != config_hash(base)
    grpo = GRPOConfig(model="smoke", iterations=2)
    assert config_hash(dataclasses.replace(grpo, checkpoint_every=3)) == config_hash(grpo)
    assert config_hash(dataclasses.replace(grpo, backend="vllm")) != config_hash(grpo)  # vLLM samples differ


def _complete(run: Run) -> None:
    run.model_dir.mkdir(exist_ok=True)
    (run.model_dir / "model.safetensors").write_bytes(b"weights")
    run.finish()


def test_a_run_is_found_whichever_execution_settings_trained_it(tmp_path):
    trained = ESConfig(model="smoke", iterations=2, backend="sequential", workers=3, checkpoint_every=1)
    _complete(Run.open("es", trained, seed=trained.seed, home=tmp_path))
    wanted = dataclasses.replace(trained, backend="batched", workers=2, checkpoint_every=25)
    assert run_exists("es", wanted, home=tmp_path)
    assert Run.open("es", wanted, seed=wanted.seed, home=tmp_path).path == Run.open(
        "es", trained, seed=trained.seed, home=tmp_path).path
    assert not run_exists("es", dataclasses.replace(trained, backend="vllm"), home=tmp_path)


def test_runs_stored_under_the_old_identity_are_still_found(tmp_path):
    config = ESConfig(model="smoke", iterations=2, checkpoint_every=5)
    run = Run.open("es", config, seed=config.seed, home=tmp_path)
    _complete(run)
    # move it where the identity that still held execution settings put it (its config.json as then written)
    import json

    from esreason_lib.store.identity import stored_config

    old = stored_config("es", config, legacy=True)
    old_path = tmp_path / ("es-" + hashlib.sha256(json.dumps(old, sort_keys=True, separators=(',', ':')).encode())
                           .hexdigest()[:10])
    assert old_path != run.path
    run.path.rename(old_path)
    (old_path / "config.json").write_text(json.dumps(old))
    manifest = json.loads((old_path / "manifest.json").read_text())
    (old_path / "manifest.json").write_text(json.dumps({**manifest, "config": old,
                                                         "config_hash": old_path.name.split("-", 1)[1]}))
    assert run_exists("es", config, home=tmp_path)
    assert Run.open("es", config, seed=config.seed, home=tmp_path).path == old_path


@pytest.mark.parametrize("value", [0, 1, 25])
def test_checkpoint_every_still_validates(value):
    assert ESConfig(checkpoint_every=value).checkpoint_every == value
