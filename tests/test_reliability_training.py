"""Trainers under corruption, divergence and concurrency, on the smoke zoo model (pretrained once into the
module's store): a bad checkpoint or a truncated saved model is never used (the run resumes from an older good
point and ends identical), non-finite weights/losses stop the run and mark it failed, a NaN base is refused,
and runs and zoo pretraining are locked."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from esreason_lib.es import core as es_module
from esreason_lib.es.config import ESConfig
from esreason_lib.es.loop import train_es
from esreason_lib.grpo import loop as grpo_module
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.loop import train_grpo
from esreason_lib.guards import NonFiniteError
from esreason_lib.models.load import load_model
from esreason_lib.models.pretrain import pretrain
from esreason_lib.models.zoo import ZOO
from esreason_lib.store.identity import config_hash
from esreason_lib.store.integrity import RunStoreWarning, sha256_file

_ES = ESConfig(model="smoke", population_size=4, sigma=0.05, alpha=1e-2, iterations=4, prompts_per_step=2,
               antithetic=True, greedy=False, reward_formatted=0.5, train_size=16, checkpoint_every=1, device="cpu",
               keep_checkpoints=True)
_GRPO = GRPOConfig(model="smoke", group_size=2, lr=1e-3, beta=0.0, prompts_per_step=2, iterations=3,
                   train_size=16, checkpoint_every=1, device="cpu", max_new_tokens=8)


def _weights(run) -> dict[str, torch.Tensor]:
    model, _ = load_model(run.model_dir)
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def es_run(isolated_store):
    run = train_es(_ES, home=isolated_store.store, progress=False)
    return run, _weights(run), [json.loads(x)["step"] for x in (run.path / "metrics.jsonl").read_text().splitlines()]


def test_a_flipped_checkpoint_is_skipped_and_the_resumed_run_ends_identical(es_run, isolated_store):
    run, weights, steps = es_run
    newest = sorted((run.path / "checkpoints").iterdir())[-1]  # step 3 (checkpoints 2 and 3 are kept)
    data = bytearray(newest.read_bytes())
    data[-100] ^= 0x01
    newest.write_bytes(bytes(data))
    (run.path / "manifest.json").unlink()  # as if killed after the last checkpoint
    with pytest.warns(RunStoreWarning, match=f"{newest.name} skipped: payload does not match its sha256"):
        again = train_es(_ES, home=isolated_store.store, progress=False)
    assert again.is_complete() and steps == [1, 2, 3, 4]
    assert [json.loads(x)["step"] for x in (run.path / "metrics.jsonl").read_text().splitlines()] == steps
    assert all(torch.equal(weights[k], v) for k, v in _weights(again).items())


def test_metrics_lines_lost_after_the_last_checkpoint_rewind_the_resume_and_lose_no_step(es_run, isolated_store):
    run, weights, steps = es_run
    lines = (run.path / "metrics.jsonl").read_text().splitlines()
    (run.path / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")  # steps 3 and 4 lost; checkpoints 2, 3 kept
    (run.path / "manifest.json").unlink()  # as if killed after the last checkpoint
    with pytest.warns(RunStoreWarning, match=r"step-000003\.pt skipped: metrics\.jsonl lacks step 3"):
        again = train_es(_ES, home=isolated_store.store, progress=False)
    assert again.is_complete()
    assert [json.loads(x)["step"] for x in (run.path / "metrics.jsonl").read_text().splitlines()] == steps
    assert all(torch.equal(weights[k], v) for k, v in _weights(again).items())


def test_a_truncated_saved_model_is_not_trusted_and_is_rebuilt(es_run, isolated_store):
    run, weights, _ = es_run
    safetensors = run.model_dir / "model.safetensors"
    digest = sha256_file(safetensors)
    safetensors.write_bytes(safetensors.read_bytes()[:1000])
    with pytest.warns(RunStoreWarning, match="model.safetensors does not match its recorded sha256"):
        assert not run.is_complete()
    with pytest.warns(RunStoreWarning, match="is marked complete but"):
        again = train_es(_ES, home=isolated_store.store, progress=False)  # resumes from its last checkpoint
    assert again.is_complete() and sha256_file(safetensors) == digest


def test_a_nan_base_model_is_refused(isolated_store):
    model, tokenizer = load_model("smoke", home=isolated_store.store)
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("nan")
    config = dataclasses.replace(_ES, iterations=1, seed=11)
    with pytest.raises(NonFiniteError, match=r"base model 'smoke': 1 non-finite weight\(s\)"):
        train_es(config, model=model, tokenizer=tokenizer, home=isolated_store.store, progress=False)


def test_es_weights_turning_nan_stop_the_run_and_mark_it_failed(isolated_store, monkeypatch):
    real = es_module.apply_update

    def diverging(params, *args):
        norm = real(params, *args)
        next(iter(params.values())).data.fill_(float("inf"))
        return norm

    monkeypatch.setattr(es_module, "apply_update", diverging)
    config = dataclasses.replace(_ES, iterations=2, seed=12)
    with pytest.raises(NonFiniteError, match="train_es iteration 1: .* non-finite weight"):
        train_es(config, home=isolated_store.store, progress=False)
    _assert_failed(isolated_store.store, "es", config)


def _assert_failed(store, kind, config):
    (path,) = [p for p in store.iterdir() if p.name.startswith(f"{kind}-")
               and json.loads((p / "config.json").read_text())["seed"] == config.seed]
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "the run is stopped" in manifest["error"]
    assert not (path / "model").exists()


@pytest.mark.parametrize("poison", ["weights", "loss"])
def test_grpo_divergence_stops_the_run_and_marks_it_failed(isolated_store, monkeypatch, poison):
    real = grpo_module.grpo_step

    def diverging(model, *args, **kwargs):
        metrics = real(model, *args, **kwargs)
        if poison == "weights":
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))
        else:
            metrics["loss/policy"] = float("nan")
        return metrics

    monkeypatch.setattr(grpo_module, "grpo_step", diverging)
    config = dataclasses.replace(_GRPO, seed=20 + len(poison))
    what = "non-finite weight" if poison == "weights" else "loss/policy = nan"
    with pytest.raises(NonFiniteError, match=f"train_grpo iteration 1: .*{what}"):
        train_grpo(config, home=isolated_store.store, progress=False)
    _assert_failed(isolated_store.store, "grpo", config)


def test_zoo_pretraining_waits_for_the_process_that_holds_it(isolated_store):
    spec = dataclasses.replace(ZOO["smoke"], steps=2, seed=5)
    folder = isolated_store.store / f"zoo-{config_hash(spec)}"
    folder.mkdir(parents=True)
    holder = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from esreason_lib.store.integrity import DirectoryLock
        lock = DirectoryLock(Path(sys.argv[1]))
        print("locked", flush=True)
        time.sleep(1.0)
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder, str(folder)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.stdout.readline().strip() == "locked"
    t0 = time.monotonic()
    with pytest.warns(RunStoreWarning, match=f"locked by PID {proc.pid}; waiting"):
        directory = pretrain(spec, home=isolated_store.store, progress=False)
    proc.wait()
    assert time.monotonic() - t0 >= 0.9 and (directory / "config.json").exists()


@pytest.mark.slow
def test_two_processes_training_one_config_log_each_step_once(isolated_store):
    config = dataclasses.replace(_ES, iterations=3, seed=30)
    script = textwrap.dedent(f"""
        import sys
        from esreason_lib.es.config import ESConfig; from esreason_lib.es.loop import train_es
        train_es(ESConfig(**{dataclasses.asdict(config)!r}), home=sys.argv[1], progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, str(isolated_store.store)],
                            env={**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1"})
    run = train_es(config, home=isolated_store.store, progress=False)
    assert proc.wait(timeout=300) == 0 and run.is_complete()
    assert [json.loads(x)["step"] for x in (run.path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_a_nan_reward_stops_train_es_and_marks_the_run_failed(tmp_path):
    """A task whose reward is nan: `tell` raises NonFiniteError, and the run's manifest says failed (not complete)."""
    from esreason_lib.es.config import ESConfig
    from esreason_lib.es.loop import train_es
    from esreason_lib.guards import NonFiniteError
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
    from esreason_lib.store.runs import Run
    from esreason_lib.training.run_entry import run_identity

    class NanReward:
        name, stop, max_new_tokens = "nan-reward", None, 3

        def examples(self, split="train", n=None, seed=0):
            return [{"id": str(i), "text": str(i)} for i in range(4)]

        def prompt(self, example, tokenizer=None):
            return example["text"] + "="

        def reward(self, completion, example):
            return float("nan")

        def is_correct(self, completion, example):
            return False

    tok = build_char_tokenizer()
    cfg = ESConfig(model="tiny-random", task="nan-reward", population_size=2, sigma=0.01, alpha=0.01, iterations=2,
                   prompts_per_step=2, checkpoint_every=0, device="cpu", backend="sequential")
    with pytest.raises(NonFiniteError, match="rewards must be finite"):
        train_es(cfg, model=tiny_random_qwen2(len(tok)), tokenizer=tok, task=NanReward(), home=tmp_path, progress=False)
    run = Run.open("es", run_identity(cfg, NanReward()), seed=cfg.seed, home=tmp_path)  # its code is in its identity
    assert not run.is_complete() and run.manifest()["status"] == "failed"
    assert "train_es iteration 1" in run.manifest()["error"]
