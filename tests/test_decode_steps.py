"""Generation's parts on hand-computable cases: `sampling.next_tokens` (one decode step's draw), `tokens.StopRule`
(which rows a step finishes), and `decode_steps.make_step`'s step objects, each against the model's own forward of
the whole sequence (prefill, steps, and a row dropped between steps)."""

from __future__ import annotations

import math

import pytest
import torch

from esreason_lib.models.decode_steps import FusedStep, HFRecomputeStep, HFStep, SharedPrefixStep, make_step
from esreason_lib.models.fused_qwen2 import KVBuffers, model_weights
from esreason_lib.models.sampling import Forward, Sampling, next_tokens, top_p_filter
from esreason_lib.models.tokens import StopRule, left_pad, mask_positions
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2


def test_next_tokens_greedy_and_inverse_cdf_by_hand():
    last = torch.tensor([[0.0, math.log(3.0)]])  # probabilities 1/4, 3/4
    tok, logp, entropy = next_tokens(last, Sampling(greedy=True, temperature=0.5), None, None)
    assert tok.tolist() == [1]  # greedy ignores the temperature
    torch.testing.assert_close(logp, torch.tensor([math.log(0.75)]))  # the chosen token's
    torch.testing.assert_close(entropy, torch.tensor([-(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]))
    inverse = Sampling(sampler="inverse-cdf")
    assert next_tokens(last.expand(2, 2), inverse, None, torch.tensor([0.2, 0.3]))[0].tolist() == [0, 1]
    nucleus = Sampling(sampler="inverse-cdf", top_p=0.5)  # the 3/4 token alone reaches 0.5
    assert next_tokens(last, nucleus, None, torch.tensor([0.0]))[0].tolist() == [1]
    hot = next_tokens(last.expand(2, 2), Sampling(sampler="inverse-cdf", temperature=2.0), None,
                      torch.tensor([0.0, 0.99]))  # logits / 2: probabilities 1 / (1 + sqrt 3), sqrt 3 / (1 + sqrt 3)
    assert hot[0].tolist() == [0, 1]
    torch.testing.assert_close(hot[1].exp(), torch.tensor([1 / (1 + math.sqrt(3)), math.sqrt(3) / (1 + math.sqrt(3))]))


def test_top_p_filter_keeps_the_smallest_top_set():
    probs = torch.tensor([[0.1, 0.6, 0.3]])
    assert torch.equal(top_p_filter(probs, 0.6), torch.tensor([[0.0, 0.6, 0.0]]))  # 0.6 alone reaches 0.6
    assert torch.equal(top_p_filter(probs, 0.7), torch.tensor([[0.0, 0.6, 0.3]]))
    assert torch.equal(top_p_filter(probs, 1e-9), torch.tensor([[0.0, 0.6, 0.0]]))  # never an empty set


def test_stop_rule_finishes_eos_rows_and_completed_stop_strings():
    tok = build_char_tokenizer()
    ids = {c: tok.convert_tokens_to_ids(c) for c in "a=>"}
    rule = StopRule(tok, "=>", {1}, len(tok), "cpu")
    tokens = torch.tensor([[ids["a"], ids["="], ids[">"]],  # completes "=>" at step 2
                           [ids["a"], ids["a"], 1],  # EOS at step 2
                           [ids["="], ids["a"], ids[">"]]])  # ">" without "=" before it
    done = rule.finished(torch.zeros(3, dtype=torch.bool), tokens[:, 2], torch.ones(3, dtype=torch.bool), tokens,
                         torch.arange(3), 2)
    assert done.tolist() == [True, True, False]
    assert StopRule(tok, None, {1}, len(tok), "cpu").window == 0


@pytest.fixture(scope="module")
def tiny():
    tok = build_char_tokenizer()
    return tiny_random_qwen2(len(tok), seed=0), tok


def test_make_step_picks_the_class_forward_names(tiny):
    model, _ = tiny
    weights, buffers = model_weights(model), KVBuffers()
    picks = {Forward(): HFStep, Forward(use_cache=False): HFRecomputeStep, Forward(kind="fused"): FusedStep,
             Forward(kind="native", share_prefixes=True): SharedPrefixStep}
    for forward, cls in picks.items():
        assert type(make_step(model, forward, weights, 16, buffers)) is cls, forward


@pytest.mark.parametrize("forward", [Forward(), Forward(kind="fused"), Forward(kind="fused", share_prefixes=True)])
def test_steps_follow_the_whole_sequence_forward(tiny, forward):
    """Two prompts (one left-padded) x 2 rows each: prefill, a step, dropping row 0, another step; every step's logits
    equal the model's forward of each row's whole sequence (float tolerance)."""
    model, tok = tiny
    ids, mask = left_pad([tok.encode("12+3=", add_special_tokens=False), tok.encode("7>", add_special_tokens=False)],
                         0, "cpu")
    expand = torch.tensor([0, 0, 1, 1])
    step = make_step(model, forward, model_weights(model), ids.shape[1] + 2, KVBuffers())
    seq, attn = ids[expand], mask[expand]

    def want():
        with torch.no_grad():
            return model(input_ids=seq, attention_mask=attn, position_ids=mask_positions(attn)).logits[:, -1]

    with torch.no_grad():
        torch.testing.assert_close(step.prefill(ids, mask, expand), want(), atol=1e-5, rtol=1e-4)
        new = torch.tensor([5, 6, 5, 7])  # rows 0 and 1 share a prompt and a token: one prefix when shared
        seq, attn = torch.cat([seq, new[:, None]], 1), torch.cat([attn, torch.ones(4, 1, dtype=torch.bool)], 1)
        torch.testing.assert_close(step.step(new, torch.ones(4, dtype=torch.bool)), want(), atol=1e-5, rtol=1e-4)
        keep = torch.tensor([1, 2, 3])
        step.select(keep)
        seq, attn, new = seq[keep], attn[keep], torch.tensor([8, 8, 9])
        live = torch.tensor([True, False, True])  # row 2 finished: its padding token is a masked key
        seq, attn = torch.cat([seq, new[:, None]], 1), torch.cat([attn, live[:, None]], 1)
        got = step.step(new, live)
    torch.testing.assert_close(got[live], want()[live], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["fused", "native"])
@pytest.mark.parametrize("share", [False, True])
def test_fused_steps_write_the_kv_cache_in_place(tiny, monkeypatch, kind, share):
    """The fused forward's KV cache is allocated once at the chunk's capacity: decode steps write each new position
    into it (the same storage step after step) and concatenate nothing bigger than the [r, L] key mask."""
    model, tok = tiny
    ids, mask = left_pad([tok.encode("12+3=", add_special_tokens=False), tok.encode("7>", add_special_tokens=False)],
                         0, "cpu")
    expand, capacity = torch.tensor([0, 0, 1, 1]), ids.shape[1] + 4
    step = make_step(model, Forward(kind=kind, share_prefixes=share), model_weights(model), capacity, KVBuffers())
    cats, cat = [], torch.cat
    monkeypatch.setattr(torch, "cat", lambda ts, *a, **k: cats.append(sum(t.numel() for t in ts)) or cat(ts, *a, **k))
    with torch.no_grad():
        step.prefill(ids, mask, expand)
        step.step(torch.tensor([5, 6, 7, 8]), torch.ones(4, dtype=torch.bool))  # shared: the 2 prompts' rows part
        storage = [t.data_ptr() for kv in step.net.cache for t in kv]
        assert all(t.shape[-2] == capacity for kv in step.net.cache for t in kv)
        for token in (torch.tensor([1, 2, 3, 4]), torch.tensor([9, 9, 9, 9])):
            step.step(token, torch.ones(4, dtype=torch.bool))  # every row its own prefix: no cache row moves
            assert [t.data_ptr() for kv in step.net.cache for t in kv] == storage
    assert cats and max(cats) <= 4 * capacity  # the key mask's growth alone


def test_no_function_on_the_generation_path_takes_more_than_eight_parameters():
    """The wall issue 46 drew: `Sampling` and `Forward` pass whole from an `EvalSpec` to the decode loop."""
    import inspect

    from esreason_lib.evaluation import _evaluate, evaluate
    from esreason_lib.models import decode_steps, generation
    from esreason_lib.models.rollouts_vllm import VLLMRollouts

    path = [evaluate, _evaluate, generation.generate, generation.Generator.__init__,
            generation.Generator.__call__, generation._decode_chunk, next_tokens, StopRule.finished, make_step,
            VLLMRollouts.__call__, *(getattr(cls, name) for cls in (decode_steps.HFStep, decode_steps.FusedStep,
                                                                   decode_steps.SharedPrefixStep)
                                     for name in ("prefill", "step", "select"))]
    for fn in path:
        assert len(inspect.signature(fn).parameters) <= 8, fn.__qualname__
