"""GRPO that fits a GPU: chunked log-probs (models.logprobs), gradient checkpointing, the memory estimate and its
refusal (grpo.memory). The estimate is compared with no measured GPU peak here (no GPU): scripts/gpu_check.py
prints both on a GPU machine."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.loop import fit_check
from esreason_lib.grpo.memory import GIB, HEADROOM, check_grpo_fits, grpo_memory
from esreason_lib.models.generation import Sampling, completion_logprobs, generate
from esreason_lib.models.hf_compat import is_checkpointing, set_checkpointing
from esreason_lib.models.logprobs import Chunks, completion_scores
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.paper.studies.presets import get_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import gpu_check_fixtures  # noqa: E402

H200 = 141 * 10**9  # bytes (NVIDIA's 141 GB); torch reports ~139.8 GiB


@pytest.fixture(scope="module")
def rollout():
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    ro = generate(model, tok, ["12+3=", "A longer prompt>"], Sampling(max_new_tokens=9), n=3, seed=1)
    return model, ro


@pytest.mark.parametrize("chunk", [1, 4, 1000])
def test_chunked_logprobs_equal_the_full_ones_with_gradients(rollout, chunk):
    model, ro = rollout
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    full, _ = completion_logprobs(model, *args, temperature=0.7)
    full.sum().backward()
    want = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    got, _ = completion_scores(model, *args, temperature=0.7, chunks=Chunks(positions=chunk))
    got.sum().backward()
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)
    assert (got[~ro.completion_mask] == 0).all()
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[k], rtol=1e-4, atol=1e-6, msg=k)
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch.testing.assert_close(completion_scores(model, *args, temperature=0.7,
                                                     chunks=Chunks(positions=chunk))[0], got.detach())
    with pytest.raises(ValueError, match="Chunks.positions must be None or a positive int, got 0"):
        Chunks(positions=0)


def test_checkpointing_and_chunks_give_the_same_update(tmp_path):
    from test_grpo import _step_once  # noqa: PLC0415 - the tiny GRPO step of the GRPO tests

    plain, m_plain = _step_once(sgd=True)
    lean, m_lean = _step_once(sgd=True, logit_chunk=2)
    for (name, a), b in zip(plain.named_parameters(), lean.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert m_lean["loss/policy"] == pytest.approx(m_plain["loss/policy"], abs=1e-6)
    for bad in ({"logit_chunk": 0}, {"gradient_checkpointing": 1}):
        with pytest.raises(ValueError, match=f"GRPOConfig.{next(iter(bad))}"):
            GRPOConfig(**bad)


def test_train_grpo_with_gradient_checkpointing_matches_without(tmp_path):
    from test_grpo import paren_config  # noqa: PLC0415
    from toy_tasks import ParenTask  # noqa: PLC0415

    tok = build_char_tokenizer()
    runs = []
    for ckpt in (False, True):
        model = tiny_random_qwen2(len(tok), seed=0)
        cfg = paren_config(iterations=2, gradient_checkpointing=ckpt)
        runs.append(train_grpo_params(cfg, model, tok, ParenTask(), tmp_path / str(ckpt)))
        assert not is_checkpointing(model)  # handed back as it came
    for k in runs[0]:
        torch.testing.assert_close(runs[0][k], runs[1][k], rtol=0, atol=0, msg=k)  # recomputation is exact on CPU


def test_checkpointing_switch(rollout):
    model, _ = rollout
    set_checkpointing(model, True)
    assert is_checkpointing(model)
    set_checkpointing(model, False)
    assert not is_checkpointing(model)


def train_grpo_params(cfg, model, tok, task, home):
    from esreason_lib.grpo.loop import train_grpo

    train_grpo(cfg, model=model, tokenizer=tok, task=task, home=home, progress=False)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _paper_model():
    """Qwen2.5-1.5B's shape with its 151,936-token vocabulary on the meta device (no memory)."""
    from transformers import Qwen2ForCausalLM

    from esreason_lib.models.zoo import qwen2_config

    config = qwen2_config(151_936, max_position_embeddings=4096, **gpu_check_fixtures.SHAPES["qwen2.5-1.5b"])
    with torch.device("meta"):
        return Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16)


def test_paper_easy_estimate_fits_one_h200():
    cfg = get_preset("paper-easy").grpo
    est = check_grpo_fits(cfg, _paper_model(), prompt_tokens=256, device_bytes=H200)
    print("paper-easy GRPO estimate (GiB):", {k: round(v, 1) for k, v in est.items()})
    assert est["total"] <= HEADROOM * H200 / GIB
    assert cfg.gradient_checkpointing and cfg.logit_chunk
    hard = get_preset("paper-hard").grpo
    print("paper-hard GRPO estimate (GiB):", {k: round(v, 1) for k, v in grpo_memory(
        hard, _paper_model(), prompt_tokens=512, device_bytes=H200).items()})


def test_a_too_large_micro_batch_is_refused_naming_the_knob():
    cfg = dataclasses.replace(get_preset("paper-easy").grpo, micro_batch_size=512)
    with pytest.raises(ValueError, match=r"set micro_batch_size=\d+ \(now 512\)") as err:
        check_grpo_fits(cfg, _paper_model(), prompt_tokens=256, device_bytes=H200)
    assert "\n" not in str(err.value)
    small = dataclasses.replace(cfg, micro_batch_size=1, gradient_checkpointing=False, logit_chunk=None)
    with pytest.raises(ValueError, match="no single knob fits it"):
        check_grpo_fits(small, _paper_model(), prompt_tokens=256, device_bytes=8 * GIB)


def test_fit_check_runs_on_cuda_models_only(rollout):
    model, _ = rollout
    assert fit_check(GRPOConfig(), model, build_char_tokenizer(), ["12+3="]) is None


def test_total_is_the_resident_memory_plus_the_largest_phase():
    est = grpo_memory(get_preset("paper-easy").grpo, _paper_model(), prompt_tokens=256, device_bytes=H200)
    n = 1_543_714_304  # Qwen2.5-1.5B's parameters (tied embeddings)
    assert est["step"] == pytest.approx(4 * n / GIB) and est["gradients"] == pytest.approx(2 * n / GIB)
    backward = est["gradients"] + est["activations"] + est["logits"]
    assert est["total"] == pytest.approx(est["weights"] + est["optimizer"]
                                         + max(est["rollouts"], backward, est["step"]))


def _qwen25(size: str):
    from transformers import Qwen2ForCausalLM

    from esreason_lib.grpo.memory import QWEN25_SHAPES, QWEN25_TIED
    from esreason_lib.models.zoo import qwen2_config

    config = qwen2_config(151_936, max_position_embeddings=4096, **QWEN25_SHAPES[size])
    config.tie_word_embeddings = QWEN25_TIED[size]
    with torch.device("meta"):
        return Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16)


def test_per_gpu_estimate_on_eight_80gb_gpus():
    """paper-easy's GRPO (2048 new tokens) on 8 x 80 GB: data parallel keeps every term whole (7B never fits);
    FSDP2 / ZeRO-3 divide weights, optimiser, gradients and step by 8, and 7B then fits with vLLM rollouts at
    micro-batches of 4 rows (the local sampler's KV cache of 512 rows alone takes 63 GiB at 7B)."""
    from esreason_lib.grpo.memory import per_gpu_memory

    H100, cfg = 80 * GIB, get_preset("paper-easy").grpo
    rows = {}
    for size in ("1.5B", "3B", "7B"):
        model = _qwen25(size)
        for backend, micro in (("local", 16), ("vllm", 16), ("vllm", 4)):
            c = dataclasses.replace(cfg, backend=backend, micro_batch_size=micro)
            kw = dict(prompt_tokens=256, gpus=8, device_bytes=H100)
            rows[size, backend, micro] = (per_gpu_memory(c, model, sharded=False, **kw)["total"],
                                          per_gpu_memory(c, model, sharded=True, **kw)["total"])
            assert rows[size, backend, micro][0] == pytest.approx(grpo_memory(c, model, prompt_tokens=256,
                                                                              device_bytes=H100)["total"])
    print("per-GPU GiB on 8 x 80 GB (data parallel, sharded):", {k: tuple(round(x, 1) for x in v)
                                                                  for k, v in rows.items()})
    limit = HEADROOM * 80
    assert rows["1.5B", "local", 16][0] < limit and rows["3B", "local", 16][0] > limit
    assert all(whole > limit for (size, _, _), (whole, _) in rows.items() if size == "7B")
    assert rows["7B", "vllm", 4][1] < limit < rows["7B", "local", 16][1]
    assert all(sharded < whole for whole, sharded in rows.values())
    n = sum(p.numel() for p in _qwen25("7B").parameters())
    assert 7.0e9 < n < 7.8e9  # Qwen2.5-7B has 7.62B parameters


def test_per_gpu_estimate_by_hand():
    """`per_gpu_memory` on numbers computed by hand: 2^28 bfloat16 parameters (0.5 GiB), a KL reference, a vLLM
    engine taking a quarter of an 80 GiB GPU, 8 processes. Data parallel: weights 1 (policy + reference) +
    optimiser 3 (two fp32 moments and the fp32 masters, 12 bytes each) + engine 20, then the largest phase, the step's
    fp32 gradients (1) = 25 GiB. Sharded: the weights, optimiser, gradients and step divided by 8 (0.125, 0.375,
    0.0625, 0.125), the engine not, and one gathered layer of weights and gradients (2 x 0.5 / 2 layers = 0.5)
    joining the backward: 20.5 + 0.0625 + 0.5 + activations and logits."""
    from types import SimpleNamespace

    from esreason_lib.grpo.memory import per_gpu_memory

    class Shape(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(2**28, dtype=torch.bfloat16, device="meta"))
            self.config = SimpleNamespace(hidden_size=64, num_attention_heads=1, head_dim=64, num_key_value_heads=1,
                                          intermediate_size=128, num_hidden_layers=2, vocab_size=128)

    cfg = GRPOConfig(group_size=2, prompts_per_step=2, micro_batch_size=2, beta=0.04, max_new_tokens=40,
                     gradient_checkpointing=True, backend="vllm", gpu_memory_utilization=0.25)
    kw = dict(prompt_tokens=24, gpus=8, device_bytes=80 * GIB)
    # 2 rows x 64 tokens: activations 128 x (2 layers x 2 bytes x 64 + one block's 2 x (6 x 64 + 64 + 2 x 64 +
    # 4 x 128) bytes), logits 128 x 128 vocabulary x 10 bytes
    small = (128 * (2 * 2 * 64 + 2 * (6 * 64 + 64 + 2 * 64 + 4 * 128)) + 128 * 128 * 10) / GIB
    whole = per_gpu_memory(cfg, Shape(), sharded=False, **kw)
    assert {k: whole[k] for k in ("weights", "optimizer", "rollouts", "gradients", "step")} == \
        {"weights": 1.0, "optimizer": 3.0, "rollouts": 20.0, "gradients": 0.5, "step": 1.0}
    assert whole["activations"] + whole["logits"] == pytest.approx(small) and whole["total"] == 25.0
    sharded = per_gpu_memory(cfg, Shape(), sharded=True, **kw)
    assert {k: sharded[k] for k in ("weights", "optimizer", "rollouts", "gradients", "step", "gathered")} == \
        {"weights": 0.125, "optimizer": 0.375, "rollouts": 20.0, "gradients": 0.0625, "step": 0.125, "gathered": 0.5}
    assert sharded["total"] == pytest.approx(20.5 + 0.0625 + 0.5 + small)
    assert per_gpu_memory(cfg, Shape(), sharded=True, **{**kw, "gpus": 1}) == whole  # one GPU: nothing to divide
    # an engine that sleeps through the update holds its 20 GiB only while sampling: the largest phase
    asleep = dataclasses.replace(cfg, engine_sleep=True)
    assert per_gpu_memory(asleep, Shape(), sharded=False, **kw)["total"] == 1.0 + 3.0 + 20.0
    assert per_gpu_memory(asleep, Shape(), sharded=True, **kw)["total"] == 0.125 + 0.375 + 20.0
