"""Tests for esreason_lib.models.generation: shapes, KV-cache equivalence, logprob consistency, stopping, seeding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from esreason_lib.models.generation import Forward, Rollouts, Sampling, completion_logprobs, generate, sequence_logprobs
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

PROMPTS = ["03 12 07>022=", "A12+5=", "Sxq", "hello world, longer prompt!"]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    m = tiny_random_qwen2(len(tok), seed=0)
    # sharpen the random model a little so that EOS and repeated patterns actually occur
    with torch.no_grad():
        m.lm_head.weight.mul_(8.0)
    return m.eval()


def _check_consistency(ro: Rollouts, pad: int):
    B = len(ro.prompts) * ro.n
    assert len(ro.completions) == B
    assert ro.prompt_ids.shape == ro.prompt_mask.shape and ro.prompt_ids.shape[0] == B
    assert ro.completion_ids.shape == ro.completion_mask.shape == ro.logprobs.shape == ro.entropies.shape
    assert ro.completion_ids.shape[0] == B
    assert ro.prompt_mask.dtype == torch.bool and ro.completion_mask.dtype == torch.bool
    assert ro.logprobs.dtype == torch.float32 and ro.entropies.dtype == torch.float32
    # left-padded prompts, right-padded completions (mask is a prefix)
    pm, cm = ro.prompt_mask.long(), ro.completion_mask.long()
    assert torch.all(pm[:, 1:] >= pm[:, :-1]) and torch.all(pm[:, -1] == 1)
    assert torch.all(cm[:, 1:] <= cm[:, :-1])
    assert torch.all(ro.prompt_ids[~ro.prompt_mask] == pad)
    assert torch.all(ro.completion_ids[~ro.completion_mask] == pad)
    assert torch.all(ro.logprobs[~ro.completion_mask] == 0) and torch.all(ro.entropies[~ro.completion_mask] == 0)
    assert torch.all(ro.logprobs[ro.completion_mask] <= 0)
    assert torch.all(ro.entropies[ro.completion_mask] >= -1e-6)


def test_shapes_grouping_and_prompt_index(model, tok):
    ro = generate(model, tok, PROMPTS, Sampling(max_new_tokens=7), n=3, seed=1, forward=Forward(batch_size=5))
    _check_consistency(ro, tok.pad_token_id)
    assert ro.n == 3 and ro.prompts == PROMPTS
    np.testing.assert_array_equal(ro.prompt_index(), np.repeat(np.arange(4), 3))
    assert ro.completion_ids.shape[1] <= 7
    for i in range(len(ro.completions)):
        p = ro.prompt_ids[i][ro.prompt_mask[i]].tolist()
        assert tok.decode(p) == PROMPTS[i // 3]


def test_seed_determinism(model, tok):
    a = generate(model, tok, PROMPTS, Sampling(max_new_tokens=8), n=4, seed=3)
    b = generate(model, tok, PROMPTS, Sampling(max_new_tokens=8), n=4, seed=3)
    c = generate(model, tok, PROMPTS, Sampling(max_new_tokens=8), n=4, seed=4)
    assert a.completions == b.completions
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.logprobs, b.logprobs)
    assert a.completions != c.completions


def test_eval_mode_restored_and_no_grad(model, tok):
    model.train()
    try:
        ro = generate(model, tok, PROMPTS[:1], Sampling(max_new_tokens=3))
        assert model.training
        assert not ro.logprobs.requires_grad
    finally:
        model.eval()


@pytest.mark.parametrize("greedy,temperature", [(False, 1.0), (False, 0.7), (True, 1.0), (True, 0.5)])
def test_generate_logprobs_match_completion_logprobs(model, tok, greedy, temperature):
    ro = generate(model, tok, PROMPTS, Sampling(greedy=greedy, temperature=temperature, max_new_tokens=10), n=2, seed=0,
                  forward=Forward(batch_size=3))
    t_eff = 1.0 if greedy else temperature  # greedy reports the T=1 distribution
    with torch.no_grad():
        logp, ent = completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                        ro.completion_mask, temperature=t_eff, with_entropy=True)
    torch.testing.assert_close(logp, ro.logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, ro.entropies, atol=1e-5, rtol=0)


def test_completion_logprobs_is_differentiable(model, tok):
    ro = generate(model, tok, PROMPTS[:2], Sampling(max_new_tokens=5), n=2)
    logp, ent = completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    assert ent is None and logp.requires_grad
    logp.sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    model.zero_grad(set_to_none=True)


def _greedy_reference(model, tok, prompt, steps):
    """Single-prompt greedy decoding with a full forward per step (no cache, no padding)."""
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    out = []
    with torch.no_grad():
        for _ in range(steps):
            nxt = int(model(input_ids=ids, use_cache=False).logits[0, -1].argmax())
            out.append(nxt)
            if nxt == tok.eos_token_id:
                break
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return out


def test_kv_cache_greedy_equals_uncached_and_unpadded_reference(model, tok):
    cached = generate(model, tok, PROMPTS, Sampling(greedy=True, max_new_tokens=12), forward=Forward(use_cache=True))
    uncached = generate(model, tok, PROMPTS, Sampling(greedy=True, max_new_tokens=12), forward=Forward(use_cache=False))
    assert torch.equal(cached.completion_ids, uncached.completion_ids)
    torch.testing.assert_close(cached.logprobs, uncached.logprobs, atol=1e-5, rtol=0)
    for i, p in enumerate(PROMPTS):  # left padding and batching do not change any row
        ref = _greedy_reference(model, tok, p, 12)
        assert cached.completion_ids[i][cached.completion_mask[i]].tolist() == ref


def test_sampling_cached_equals_uncached(model, tok):
    a = generate(model, tok, PROMPTS, Sampling(max_new_tokens=8), n=3, seed=5, forward=Forward(use_cache=True))
    b = generate(model, tok, PROMPTS, Sampling(max_new_tokens=8), n=3, seed=5, forward=Forward(use_cache=False))
    assert torch.equal(a.completion_ids, b.completion_ids)


def test_tiny_top_p_equals_greedy(model, tok):
    g = generate(model, tok, PROMPTS, Sampling(greedy=True, max_new_tokens=10), n=1)
    s = generate(model, tok, PROMPTS, Sampling(top_p=1e-6, temperature=1.0, max_new_tokens=10), n=1, seed=9)
    assert torch.equal(g.completion_ids, s.completion_ids)
    torch.testing.assert_close(g.logprobs, s.logprobs, atol=1e-6, rtol=0)


def test_top_p_restricts_support(model, tok):
    """With top_p < 1 every sampled token lies in the nucleus of its step's distribution."""
    ro = generate(model, tok, PROMPTS, Sampling(top_p=0.5, max_new_tokens=6), n=4, seed=2)
    with torch.no_grad():
        ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1)
        mask = torch.cat([ro.prompt_mask, ro.completion_mask], 1)
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    lc = ro.completion_ids.shape[1]
    probs = logits[:, -lc - 1:-1].float().softmax(-1)  # [B, Lc, V]
    tp = probs.gather(-1, ro.completion_ids[..., None]).squeeze(-1)  # [B, Lc]
    mass_before = (probs * (probs > tp[..., None])).sum(-1)  # mass of strictly more likely tokens
    assert torch.all(mass_before[ro.completion_mask] < 0.5 + 1e-5)


def test_eos_handling_and_decoding(model, tok):
    ro = generate(model, tok, PROMPTS, Sampling(max_new_tokens=20), n=8, seed=0)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    lengths = ro.completion_mask.sum(1)
    saw_eos = 0
    for i in range(len(ro.completions)):
        toks = ro.completion_ids[i, : lengths[i]].tolist()
        assert eos not in toks[:-1]  # EOS, if any, is the last real token
        if toks[-1] == eos:
            saw_eos += 1
        else:
            assert len(toks) == 20
        assert ro.completions[i] == tok.decode([t for t in toks if t not in (eos, pad)])
    assert saw_eos > 0  # the sharpened random model does emit EOS


def test_stop_string(model, tok):
    free = generate(model, tok, PROMPTS, Sampling(max_new_tokens=16), n=4, seed=7)
    # pick a 2-char string that occurs in some completion, not at its very start
    text = next(c for c in free.completions if len(c) >= 4)
    stop = text[1:3]
    ro = generate(model, tok, PROMPTS, Sampling(max_new_tokens=16), n=4, seed=7, stop=stop)
    n_hit = 0
    for full, cut, m in zip(free.completions, ro.completions, ro.completion_mask.sum(1).tolist()):
        if stop in full:
            n_hit += 1
            assert cut == full[: full.index(stop) + len(stop)]
            assert m == len(cut)  # char tokenizer: one token per char, nothing generated after the stop
        else:
            assert cut == full
    assert n_hit >= 1


def test_stop_string_spanning_many_tokens_is_cut(model, tok):
    ro = generate(model, tok, ["Sxq"], Sampling(max_new_tokens=16), n=16, seed=11, stop="a")
    for c in ro.completions:
        assert c.count("a") <= 1 and (not c or "a" not in c or c.endswith("a"))


def test_batch_size_chunking_and_zero_rows_padding(model, tok):
    g1 = generate(model, tok, PROMPTS, Sampling(greedy=True, max_new_tokens=9), forward=Forward(batch_size=1))
    g2 = generate(model, tok, PROMPTS, Sampling(greedy=True, max_new_tokens=9), forward=Forward(batch_size=512))
    assert g1.completions == g2.completions
    torch.testing.assert_close(g1.logprobs, g2.logprobs, atol=1e-5, rtol=0)
    assert torch.equal(g1.prompt_mask, g2.prompt_mask)


def test_sequence_logprobs_matches_generation(model, tok):
    ro = generate(model, tok, PROMPTS, Sampling(max_new_tokens=30, temperature=0.8), n=2, seed=1)
    prompts = [ro.prompts[i] for i in ro.prompt_index()]
    finished = [i for i in range(len(prompts)) if ro.completion_ids[i, ro.completion_mask[i].sum() - 1]
                == tok.eos_token_id]
    assert finished
    slp = sequence_logprobs(model, tok, [prompts[i] for i in finished], [ro.completions[i] for i in finished],
                            temperature=0.8, batch_size=3)
    assert slp.shape == (len(finished),) and slp.dtype == np.float64
    np.testing.assert_allclose(slp, ro.logprobs[finished].sum(1).double().numpy(), atol=1e-4)


def test_sequence_logprobs_prefers_likely_completion(model, tok):
    g = generate(model, tok, PROMPTS[:2], Sampling(greedy=True, max_new_tokens=5))
    lp = sequence_logprobs(model, tok, PROMPTS[:2] * 2, g.completions + ["~~~~~", "~~~~~"])
    assert np.all(lp[:2] > lp[2:])


@pytest.mark.parametrize("kwargs,match", [({"n": 0}, "n must"), ({"stop": ""}, "stop")])
def test_generate_validates_arguments(model, tok, kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate(model, tok, PROMPTS, **kwargs)


@pytest.mark.parametrize("make,match", [
    (lambda: Sampling(temperature=0.0), "Sampling.temperature must be > 0 when sampling, got 0.0"),
    (lambda: Sampling(top_p=0.0), "Sampling.top_p must be in"), (lambda: Sampling(top_p=1.5), "Sampling.top_p"),
    (lambda: Sampling(max_new_tokens=0), "Sampling.max_new_tokens must be a positive int, got 0"),
    (lambda: Sampling(max_new_tokens=True), "Sampling.max_new_tokens"), (lambda: Sampling(greedy=1), "greedy"),
    (lambda: Sampling(sampler="x"), "Sampling.sampler must be one of"),
    (lambda: Forward(kind="compiled"), "Forward.kind must be one of"),
    (lambda: Forward(batch_size=0), "Forward.batch_size must be a positive int, got 0"),
    (lambda: Forward(kind="fused", use_cache=False), "Forward.use_cache"),
    (lambda: Forward(share_prefixes=True), "Forward.share_prefixes must be a bool, False with kind 'hf'"),
])
def test_sampling_and_forward_name_the_bad_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_sampling_scale_and_greedy_ignore_temperature():
    assert Sampling(temperature=0.5).scale == 0.5 and Sampling(greedy=True, temperature=0.5).scale == 1.0
    assert Sampling(greedy=True, temperature=0.0).scale == 1.0  # greedy needs no positive temperature


def test_generate_takes_whole_objects(model, tok):
    with pytest.raises(TypeError, match="sampling must be a Sampling, got dict"):
        generate(model, tok, PROMPTS, {"greedy": True})
    with pytest.raises(TypeError, match="forward must be a Forward, got str"):
        generate(model, tok, PROMPTS, forward="fused")


def test_generate_rejects_empty_prompt_and_str(model, tok):
    with pytest.raises(ValueError, match="prompts\\[1\\]"):
        generate(model, tok, ["ab", ""], Sampling(max_new_tokens=2))
    with pytest.raises(TypeError, match="prompts"):
        generate(model, tok, "abc", Sampling(max_new_tokens=2))
    with pytest.raises(ValueError, match="empty"):
        generate(model, tok, [], Sampling(max_new_tokens=2))
    with pytest.raises(ValueError, match="differ in length"):
        sequence_logprobs(model, tok, ["a"], ["b", "c"])


def test_non_finite_logits_sample_uniformly_instead_of_crashing(tok):
    broken = tiny_random_qwen2(len(tok), seed=3)
    with torch.no_grad():
        broken.lm_head.weight.fill_(float("nan"))
    ro = generate(broken, tok, PROMPTS[:2], Sampling(max_new_tokens=4), n=2, seed=0)
    assert len(ro.completions) == 4
    torch.testing.assert_close(ro.logprobs[ro.completion_mask],
                               torch.full((int(ro.completion_mask.sum()),), -float(np.log(len(tok)))))


def test_decode_rows_decodes_each_row_like_batch_decode():
    from esreason_lib.models.generation import decode_rows
    from esreason_lib.models.zoo import build_char_tokenizer

    tok = build_char_tokenizer()
    a, b = tok.convert_tokens_to_ids(["1", "+"])
    ids = torch.tensor([[a, b, a], [a, b, a], [b, b, tok.pad_token_id]])  # [3, 3], rows 0 and 1 equal
    assert decode_rows(tok, ids) == ["1+1", "1+1", "++"] == tok.batch_decode(ids.tolist(), skip_special_tokens=True)
    wide = ids.repeat(1, 20)  # [3, 60]: too wide for one int64 key per row, the 2-D unique path
    assert decode_rows(tok, wide) == tok.batch_decode(wide.tolist(), skip_special_tokens=True)
    assert decode_rows(tok, ids[:0]) == []
    spaced = torch.tensor([tok.convert_tokens_to_ids(["1", " ", ",", "2"])])  # [1, 4] "1 ,2"
    assert decode_rows(tok, spaced) == ["1 ,2"]  # the backend path: no clean-up configured
    cleaning = build_char_tokenizer()
    cleaning.clean_up_tokenization_spaces = True  # batch_decode's own path, which then removes " ,"
    assert decode_rows(cleaning, spaced) == cleaning.batch_decode(spaced.tolist(), skip_special_tokens=True) == ["1,2"]


def test_prompt_helpers_hand_computed(model, tok):
    from esreason_lib.models.generation import (
        cut_at_stop,
        encode_texts,
        left_pad,
        mask_positions,
        right_pad,
        special_ids,
    )

    pad, eos = special_ids(model, tok)
    assert pad == tok.pad_token_id and tok.eos_token_id in eos
    one, plus = tok.convert_tokens_to_ids(["1", "+"])
    assert encode_texts(tok, ["1+", "1"], "prompts") == [[one, plus], [one]] and encode_texts(tok, [], "x") == []
    with pytest.raises(TypeError, match="prompts must be a list of str"):
        encode_texts(tok, "1+", "prompts")
    ids, mask = left_pad([[5, 6], [7], []], 0, "cpu")
    assert ids.tolist() == [[5, 6], [0, 7], [0, 0]] and mask.tolist() == [[True, True], [False, True], [False, False]]
    assert mask_positions(mask).tolist() == [[0, 1], [0, 0], [0, 0]]
    ids, mask = right_pad([[5, 6], [7], []], 0, "cpu")
    assert ids.tolist() == [[5, 6], [7, 0], [0, 0]] and mask.tolist() == [[True, True], [True, False], [False, False]]
    ids, mask = right_pad([[], []], 9, "cpu", width=1)  # no token at all: one masked column
    assert ids.tolist() == [[9], [9]] and not mask.any()
    gap = torch.tensor([[False, True, True, False, True]])
    assert mask_positions(gap).tolist() == [[0, 0, 1, 1, 2]]  # a position repeats over an inner gap
    assert cut_at_stop("a=1</answer> junk", "</answer>") == "a=1</answer>"
    assert cut_at_stop("a=1", "</answer>") == "a=1" and cut_at_stop("a=1", None) == "a=1"


def test_stop_end_tokens_marks_the_tokens_holding_the_stops_last_character(tok):
    from esreason_lib.models.generation import stop_end_tokens

    table = stop_end_tokens(tok, "</answer>", len(tok) + 2, "cpu")  # two ids the tokenizer does not know
    texts = [tok.decode([i], skip_special_tokens=True) for i in range(len(tok))]
    assert table[: len(tok)].tolist() == [">" in t for t in texts] and int(table[: len(tok)].sum()) == 1
    assert table[len(tok):].all()  # unknown ids are always checked
    assert stop_end_tokens(tok, "ab\u00e9", len(tok), "cpu").all()  # not plain ASCII: every token is checked

    class Slotted:  # no __weakref__: the table is built for the call, not cached
        __slots__ = ("inner",)

        def __init__(self, inner):
            self.inner = inner

        def __len__(self):
            return len(self.inner)

        def batch_decode(self, rows, skip_special_tokens=True):
            return self.inner.batch_decode(rows, skip_special_tokens=skip_special_tokens)

        _decode, clean_up_tokenization_spaces = None, True  # batch_decode, not the Rust fast path

    assert torch.equal(stop_end_tokens(Slotted(tok), "</answer>", len(tok), "cpu"), table[: len(tok)])


@pytest.mark.parametrize("forward", ["hf", "fused"])
def test_stop_check_on_the_last_tokens_only_changes_nothing(model, tok, monkeypatch, forward):
    """Decoding only the rows whose newest token holds the stop's last character gives what checking every
    running row gives, bit for bit, for the stops that end many completions."""
    import esreason_lib.models.generation as generation

    free = generate(model, tok, PROMPTS, Sampling(max_new_tokens=16), n=8, seed=3)
    stops = {c[i: i + 2] for c in free.completions for i in range(1, len(c) - 2)}
    stops = sorted(stops, key=lambda s: -sum(s in c for c in free.completions))[:3]
    for stop in stops:
        fast = generate(model, tok, PROMPTS, Sampling(max_new_tokens=16), n=8, seed=3, stop=stop,
                        forward=Forward(kind=forward))
        with monkeypatch.context() as m:
            m.setattr(generation, "stop_end_tokens", lambda tokenizer, stop, v, device: torch.ones(v, dtype=torch.bool))
            every = generate(model, tok, PROMPTS, Sampling(max_new_tokens=16), n=8, seed=3, stop=stop,
                             forward=Forward(kind=forward))
        assert fast.completions == every.completions and sum(stop in c for c in fast.completions) >= 2
        assert torch.equal(fast.completion_ids, every.completion_ids) and torch.equal(fast.logprobs, every.logprobs)
