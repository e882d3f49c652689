"""The TRL engine (`grpo.trl_engine`): the GRPOConfig mapping, the reward function, the prompt order, the store log,
the loss against the native loop's on one batch, and whole runs (one process; two under accelerate, slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("trl")

import toy_tasks  # noqa: E402

from esreason_lib.grpo.config import GRPOConfig  # noqa: E402
from esreason_lib.grpo.loop import train_grpo  # noqa: E402
from esreason_lib.grpo.loss import policy_loss  # noqa: E402
from esreason_lib.grpo.trl_engine import (  # noqa: E402
    grpo_trainer,
    prompt_dataset,
    steps_per_iteration,
    store_logger,
    task_reward,
    trl_arguments,
)
from esreason_lib.models.generation import completion_logprobs  # noqa: E402
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2  # noqa: E402
from esreason_lib.store.identity import canonical_config  # noqa: E402
from esreason_lib.store.runs import Run  # noqa: E402
from esreason_lib.training.settings import prompt_indices  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class ParenTask(toy_tasks.ParenTask):
    """The shared toy paren task, stopping at ")" (the TRL engine's reward cuts completions there)."""

    stop = ")"


def config(**kw) -> GRPOConfig:
    base = dict(model="tiny-random", task="paren", group_size=4, prompts_per_step=2, lr=3e-2, beta=0.04,
                iterations=2, checkpoint_every=0, device="cpu", seed=0, engine="trl")
    return GRPOConfig(**{**base, **kw})


def test_engine_is_left_out_of_the_identity_at_native_only():
    assert "engine" not in canonical_config(config(engine="native"))
    assert canonical_config(config())["engine"] == "trl"
    with pytest.raises(ValueError, match="engine"):
        config(engine="verl")
    with pytest.raises(ValueError, match="forward"):
        config(forward="fused")
    with pytest.raises(ValueError, match="shared_prompts"):
        config(shared_prompts=True)


def test_engine_trl_without_trl_names_the_extra(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    tok = build_char_tokenizer()
    with pytest.raises(ImportError, match=r"engine='trl' needs the `trl` extra"):
        train_grpo(config(), model=tiny_random_qwen2(len(tok)), tokenizer=tok, task=ParenTask(), home=tmp_path)
    assert not any(tmp_path.iterdir())


def test_trl_arguments_map_the_config(tmp_path):
    c = config(prompts_per_step=8, minibatch_size=4, ppo_epochs=2, micro_batch_size=4, iterations=3,
               aggregation="token-mean", scale="none", max_grad_norm=None, checkpoint_every=2)
    assert steps_per_iteration(c) == 4
    a = trl_arguments(c, tmp_path, max_new_tokens=7, world_size=2)
    assert (a.num_generations, a.per_device_train_batch_size, a.gradient_accumulation_steps) == (4, 4, 2)
    assert (a.steps_per_generation, a.num_iterations, a.max_steps, a.logging_steps) == (4, 2, 12, 4)
    assert (a.loss_type, a.scale_rewards, a.epsilon, a.beta) == ("dapo", "none", 0.2, 0.04)
    assert (a.use_bias_correction_kl, a.lr_scheduler_type, a.max_grad_norm) == (False, "constant", 0.0)
    assert (a.max_completion_length, a.save_steps, a.shuffle_dataset, a.seed) == (7, 8, False, 0)
    assert trl_arguments(c, tmp_path, max_new_tokens=7, vllm_mode="server").vllm_mode == "server"
    with pytest.raises(ValueError, match="micro_batch_size=3"):
        trl_arguments(config(micro_batch_size=3), tmp_path, max_new_tokens=4)
    with pytest.raises(ValueError, match="3 processes"):
        trl_arguments(config(), tmp_path, max_new_tokens=4, world_size=3)


def test_the_paper_preset_maps_onto_eight_processes(tmp_path):
    from dataclasses import replace

    from esreason_lib.paper.studies.presets import get_preset

    c = replace(get_preset("paper-easy").grpo, engine="trl", device="cpu")  # P 64, minibatch 32, micro 16, G 8
    a = trl_arguments(c, tmp_path, max_new_tokens=2048, world_size=8)
    assert (a.per_device_train_batch_size, a.gradient_accumulation_steps, a.steps_per_generation) == (16, 2, 4)
    assert (a.max_steps, a.num_generations, a.bf16) == (2 * c.iterations, 8, c.dtype == "bfloat16")


def test_task_reward_scores_with_the_verifier_cut_at_stop():
    task, logged = ParenTask(), {}
    examples = task.examples("train")
    reward = task_reward(task, examples)
    out = reward(["a", "b", "c"], ["(x)yy", "x", "(("], [0, 1, 2], log_metric=logged.__setitem__)
    assert out == [1.0, 0.0, 1.0]
    assert logged == {"correct_frac": pytest.approx(2 / 3)}
    assert reward.__name__ == "verifier"


def test_prompt_dataset_follows_the_native_prompt_order():
    c = config(iterations=3, prompt_order="epoch")
    prompts = [f"p{i}" for i in range(5)]
    ds = prompt_dataset(c, prompts)
    want = np.concatenate([prompt_indices(5, 2, it, 0, "grpo", "epoch") for it in range(3)])
    assert ds["example_index"] == want.tolist()
    assert ds["prompt"] == [prompts[i] for i in want]


def test_store_logger_writes_one_record_per_iteration(tmp_path):
    run = Run.open("grpo", {"x": 1}, seed=0, home=tmp_path)

    class State:
        global_step = 4

    logger = store_logger(run, 2)
    logger.on_log(None, State(), None, logs={"reward": 0.5, "kl": float("nan"), "epoch": 1.0})
    State.global_step = 5
    logger.on_log(None, State(), None, logs={"reward": 0.7})
    logger.on_log(None, State(), None, logs={"train_runtime": 3.0})
    store_logger(None, 1).on_log(None, State(), None, logs={"reward": 1.0})
    rows = run.metrics()
    assert rows["step"].tolist() == [2] and rows["reward/mean"].tolist() == [0.5]
    assert "policy/kl" not in rows


def _trainer(tmp_path, c):
    tok = build_char_tokenizer()
    tiny_random_qwen2(len(tok), seed=0).save_pretrained(tmp_path / "base")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    task = ParenTask()
    return grpo_trainer(c, model, tok, task, task.examples("train"), tmp_path / "ckpt"), model


@pytest.mark.parametrize("aggregation", ["seq-mean-token-mean", "token-mean"])
def test_trl_loss_equals_the_native_loss_on_one_batch(tmp_path, aggregation):
    """One optimiser step per generation (minibatch = the batch, one process, no accumulation), the same model,
    completions, advantages, pi_old and pi_ref, no empty completion: TRL's "grpo" / "dapo" loss equals
    `policy_loss`'s "seq-mean-token-mean" / "token-mean", clip and k3 KL live."""
    c = config(aggregation=aggregation, clip_eps=0.1, beta=0.1)
    trainer, model = _trainer(tmp_path, c)
    trainer.current_gradient_accumulation_steps = 1
    gen = torch.Generator().manual_seed(0)
    B, Lp, Lc = 8, 3, 5
    p_ids, c_ids = torch.randint(3, 90, (B, Lp), generator=gen), torch.randint(3, 90, (B, Lc), generator=gen)
    p_mask = torch.ones(B, Lp, dtype=torch.long)
    c_mask = (torch.arange(Lc)[None] < torch.tensor([5, 1, 3, 4, 2, 5, 5, 1])[:, None]).long()  # [B, Lc]
    adv = torch.randn(B, generator=gen)
    with torch.no_grad():
        logp, _ = completion_logprobs(model, p_ids, p_mask, c_ids, c_mask)  # [B, Lc]
    old = (logp + 0.3 * torch.randn(B, Lc, generator=gen)) * c_mask  # ratios beyond the clip
    ref = (logp + 0.2 * torch.randn(B, Lc, generator=gen)) * c_mask
    model.train()
    live, _ = completion_logprobs(model, p_ids, p_mask, c_ids, c_mask)
    native, _ = policy_loss(live, old, ref, adv, c_mask, 0.1, 0.1, aggregation)
    inputs = {"prompt_ids": p_ids, "prompt_mask": p_mask, "completion_ids": c_ids, "completion_mask": c_mask,
              "advantages": adv, "old_per_token_logps": old, "ref_per_token_logps": ref,
              "num_items_in_batch": c_mask.sum()}
    theirs = trainer.compute_loss(model, inputs)
    assert float(theirs.detach()) == pytest.approx(float(native), rel=1e-5, abs=1e-7)


def test_train_grpo_with_engine_trl_writes_a_complete_run(tmp_path):
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    run = train_grpo(config(), model=model, tokenizer=tok, task=ParenTask(), home=tmp_path, progress=False)
    assert run.is_complete() and (run.model_dir / "model.safetensors").is_file()
    rows = run.metrics()
    assert rows["step"].tolist() == [1, 2]
    assert {"reward/mean", "reward/correct_frac", "policy/kl", "loss/policy"} <= set(rows)
    assert not (run.path / "checkpoints").exists()
    again = train_grpo(config(), model=None, tokenizer=None, task=ParenTask(), home=tmp_path, progress=False)
    assert again.path == run.path


LAUNCHED = """
import sys
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.loop import train_grpo
cfg = GRPOConfig(model="smoke", task="addition", group_size=2, prompts_per_step=2, iterations=2, max_new_tokens=4,
                 checkpoint_every=1, device="cpu", seed=0, engine="trl", train_size=8)
run = train_grpo(cfg, home=sys.argv[1], progress=False)
from accelerate import PartialState
state = PartialState()
with open(f"{sys.argv[1]}/done-{state.process_index}.txt", "w") as fh:  # stdout would interleave the processes'
    fh.write(f"{state.num_processes} {run.path} {run.is_complete()}")
"""


@pytest.mark.slow
def test_two_processes_under_accelerate_launch_write_a_complete_run(tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2` on the CPU (accelerate's torchrun launcher; the processes
    join over gloo, `PartialState(cpu=True)`): the TRL engine on the zoo's smoke model, 2 iterations, a checkpoint
    each; both processes end with the same complete run. (`--cpu` would run one process: accelerate's CPU launcher
    starts several only through mpirun.)"""
    from esreason_lib.models.load import load_model

    load_model("smoke", device="cpu", home=tmp_path, progress=False)  # the zoo base, trained once beforehand
    script = tmp_path / "launched.py"
    script.write_text(textwrap.dedent(LAUNCHED))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "ESREASON_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                          "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                          str(script), str(tmp_path)], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    lines = [(tmp_path / f"done-{rank}.txt").read_text() for rank in (0, 1)]
    assert lines[0] == lines[1] and lines[0].startswith("2 ") and lines[0].endswith(" True")
    run_dir = Path(lines[0].split()[1])
    assert (run_dir / "model" / "model.safetensors").is_file()
    assert (run_dir / "manifest.json").is_file()
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
