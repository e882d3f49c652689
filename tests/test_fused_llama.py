"""The fused forward (`models.fused_qwen2`) on the Llama family (SmolLM2's architecture: no biases, tied embeddings,
grouped-query attention) against Hugging Face's `LlamaForCausalLM` on a tiny random model: logits to float
tolerance, and the same greedy tokens through `generate`."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from esreason_lib.models.fused_qwen2 import FusedQwen2, check_fusable, model_weights
from esreason_lib.models.generation import Forward, Sampling, generate, mask_positions
from esreason_lib.models.zoo import build_char_tokenizer


def tiny_random_llama(vocab_size: int, **overrides) -> LlamaForCausalLM:
    """A random Llama shaped like SmolLM2 in miniature: 48 wide, 2 layers, 6 heads of 8, 2 KV heads, tied
    embeddings, rope theta 1e5; weights drawn at std 0.2 and norm weights around 1 (so that the norms' folding
    matters and the distributions are peaked)."""
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=128,
                         rope_theta=1e5, tie_word_embeddings=True, initializer_range=0.2, **overrides)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def llama():
    tok = build_char_tokenizer()
    return tiny_random_llama(len(tok)), tok


def test_llama_is_fusable_without_biases_only(llama):
    model, _ = llama
    check_fusable(model, "here")
    with pytest.raises(TypeError, match="config.attention_bias=True"):
        check_fusable(tiny_random_llama(32, attention_bias=True), "here")
    with pytest.raises(TypeError, match="config.mlp_bias=True"):
        check_fusable(tiny_random_llama(32, mlp_bias=True), "here")
    fused = model_weights(model)
    assert all(layer[1] is None for layer in fused[2:])  # no qkv bias folded
    assert fused[1].shape == (1, 48, model.config.vocab_size)  # the tied head, final norm folded in


def test_fused_llama_logits_match_hf_prefill_and_steps(llama):
    """A left-padded prefill, then three decode steps with one row compacted away: the fused forward's last-position
    logits equal `LlamaForCausalLM`'s (full recomputation of the same sequences) to float tolerance."""
    model, tok = llama
    torch.manual_seed(1)
    ids = torch.randint(3, len(tok), (3, 7))  # [R, L]
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, :3] = False  # row 1 left-padded by 3
    net = FusedQwen2(model, model_weights(model), capacity=12)
    causal = torch.ones(7, 7, dtype=torch.bool).tril() & mask[:, None, None, :]
    got = net(ids[None], mask_positions(mask)[None], causal, None)[0]  # [R, V]
    net.length = 7
    rows = torch.arange(3)
    for step in range(3):
        with torch.no_grad():
            want = model(input_ids=ids, attention_mask=mask.long(), position_ids=mask_positions(mask)).logits[:, -1]
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), float((got - want).abs().max())
        if step == 1:  # drop row 0 from the running batch and the cache
            rows = rows[1:]
            net.select(torch.tensor([[1, 2]]))
            ids, mask = ids[1:], mask[1:]
        tok_next = got[-len(rows):].argmax(-1)  # [r]
        ids, mask = torch.cat([ids, tok_next[:, None]], 1), torch.cat([mask, torch.ones(len(rows), 1).bool()], 1)
        pos = mask_positions(mask)[:, -1:]
        got = net(tok_next[None, :, None], pos[None], mask[:, None, None, :], None)[0]
        net.length += 1


@pytest.mark.parametrize("forward", ["fused", "native"])
def test_generate_on_llama_gives_hf_greedy_tokens(llama, forward):
    model, tok = llama
    prompts = ["12 + 34 =", "x", "hello world", "7*8="]
    hf = generate(model, tok, prompts, Sampling(greedy=True, max_new_tokens=16))
    fused = generate(model, tok, prompts, Sampling(greedy=True, max_new_tokens=16), forward=Forward(kind=forward))
    assert torch.equal(hf.completion_ids, fused.completion_ids)
    assert torch.allclose(hf.logprobs, fused.logprobs, atol=1e-4)
    assert torch.allclose(hf.entropies, fused.entropies, atol=1e-4)
