"""Every log-prob and entropy pass bounded (models.logprobs): at Qwen2.5's 151,936-token vocabulary and 512 tokens,
and at a Llama's 49,152 tokens and 256, the chunked pass keeps its peak memory under a budget and equals the unchunked
values.

The peak is counted from torch's own record of every tensor the pass creates and frees, in order (the profiler's
memory timeline: `torch.profiler.profile(profile_memory=True)._memory_profile()`): the live bytes' running maximum
and the largest single tensor, tensors that existed before the pass (the weights) left out. Neither depends on the
machine's load or speed, only on the operations run."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action

from esreason_lib.models.generation import check_completion_inputs, completion_logprobs
from esreason_lib.models.logprobs import (
    GRAD_BYTES,
    NO_GRAD_BYTES,
    SCORING,
    Chunks,
    completion_scores,
    logit_bytes,
    shared_prompt_logprobs,
)

MIB = 2**20


def allocated_peak(fn) -> tuple[int, int, object]:
    """(peak live bytes, largest tensor's bytes, fn()) over the tensors `fn` creates (profiler memory timeline)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        out = fn()
    live = peak = largest = 0
    for _, action, _, size in prof._memory_profile().timeline:
        if action == Action.CREATE:
            live += size
            largest = max(largest, size)
        elif action == Action.DESTROY:
            live -= size
        peak = max(peak, live)
    return peak, largest, out


def test_allocated_peak_counts_what_is_live_at_once():
    x = torch.ones(1000, 250)  # 1e6 bytes, before the measure: not counted

    def three_then_one():
        a = x * 2  # +1e6
        b = a + 1  # +1e6
        del a  # -1e6
        c = b * 3  # +1e6: 2e6 live at most
        return c.sum()

    peak, largest, out = allocated_peak(three_then_one)
    assert out.item() == 1000 * 250 * 9
    assert largest == 10**6 and 2 * 10**6 <= peak < 2 * 10**6 + 4096  # + a few scalars


def test_logit_bytes_by_hand():
    chunks = Chunks(rows=2, positions=4, vocab=10)
    assert logit_bytes(chunks, rows=8, positions=100, vocab=1000) == 2 * 4 * 10 * NO_GRAD_BYTES
    assert logit_bytes(chunks, rows=1, positions=3, vocab=7) == 1 * 3 * 7 * NO_GRAD_BYTES  # smaller than a chunk
    assert logit_bytes(chunks, rows=8, positions=100, vocab=1000, grad=True) == 2 * 4 * 1000 * GRAD_BYTES
    assert logit_bytes(Chunks(), rows=3, positions=5, vocab=7) == 3 * 5 * 7 * NO_GRAD_BYTES
    assert SCORING.rows and SCORING.positions and SCORING.vocab and not SCORING.whole and Chunks().whole


def test_chunks_refuse_bad_values_and_the_vocabulary_under_gradients():
    for field in ("rows", "positions", "vocab"):
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match=f"Chunks.{field} must be None or a positive int, got {bad!r}"):
                Chunks(**{field: bad})
    model = _model("qwen2", vocab=11, width=8)
    ids, mask = torch.ones(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="Chunks.vocab cuts no-grad passes only .*, got 4"):
        completion_scores(model, ids, mask, ids, mask, chunks=Chunks(vocab=4))
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        completion_scores(model, ids, mask, ids, mask, temperature=0, chunks=Chunks(rows=1))


def test_both_passes_refuse_a_bad_temperature_or_mismatched_masks_in_one_line():
    """`check_completion_inputs`, which the whole pass and the chunked pass both run first."""
    ids, mask = torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool)
    check_completion_inputs(0.6, ids, mask, ids, mask)  # valid: no error
    with pytest.raises(ValueError, match=r"temperature must be > 0, got -1\.0"):
        check_completion_inputs(-1.0, ids, mask, ids, mask)
    short = torch.ones(2, 2, dtype=torch.bool)
    message = r"ids/mask shapes differ: prompt \(2, 3\) vs \(2, 3\), completion \(2, 3\) vs \(2, 2\)"
    with pytest.raises(ValueError, match=message):
        check_completion_inputs(1.0, ids, mask, ids, short)
    model = _model("qwen2", vocab=11, width=8)
    for chunks in (Chunks(), Chunks(rows=1)):
        with pytest.raises(ValueError, match=message):
            completion_scores(model, ids, mask, ids, short, chunks=chunks)


def _model(family: str, *, vocab: int, width: int = 16):
    """A one-layer random model of `family` with a `vocab`-token vocabulary and hidden width `width` (float32)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    kind, cls = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}[family]
    config = kind(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                  tie_word_embeddings=family == "qwen2", attn_implementation="eager")
    torch.manual_seed(0)
    return cls(config).eval()


def _batch(vocab: int, completion: int, prompt: int = 8):
    """Two rows: a full-length completion and one half as long (right-padded), prompts left-padded."""
    g = torch.Generator().manual_seed(1)
    p_ids = torch.randint(vocab, (2, prompt), generator=g)
    p_mask = torch.ones(2, prompt, dtype=torch.bool)
    p_mask[1, :3] = False
    c_ids = torch.randint(vocab, (2, completion), generator=g)
    c_mask = torch.ones(2, completion, dtype=torch.bool)
    c_mask[1, completion // 2:] = False
    return p_ids, p_mask, c_ids, c_mask


BUDGET = 32 * MIB
"""The chunked pass's peak at both shapes below: its largest logits (1 x 64 x 8,192 float32, 2 MiB, x ~4 with the
entropy's temporaries) plus the decoder's (eager attention over 520 positions: ~2 MiB), with room to spare."""


@pytest.mark.slow
@pytest.mark.parametrize("family,vocab,completion", [("qwen2", 151_936, 512), ("llama", 49_152, 256)])
def test_the_chunked_pass_stays_under_budget_and_equals_the_unchunked_one(family, vocab, completion):
    model = _model(family, vocab=vocab)
    batch = _batch(vocab, completion)
    chunks = Chunks(rows=1, positions=64, vocab=8192)
    with torch.no_grad():
        peak, largest, (logp, ent) = allocated_peak(
            lambda: completion_scores(model, *batch, temperature=0.7, with_entropy=True, chunks=chunks))
        one_row = [t[:1] for t in batch]
        whole_peak, whole_largest, _ = allocated_peak(
            lambda: completion_logprobs(model, *one_row, temperature=0.7, with_entropy=True))
        want = [completion_logprobs(model, *[t[i: i + 1] for t in batch], temperature=0.7, with_entropy=True)
                for i in range(2)]
    assert largest < 4 * MIB  # one chunk's float32 logits (2 MiB) or the eager attention's scores (2 x 520^2 floats)
    assert peak < BUDGET
    assert whole_largest >= completion * vocab * 4 and whole_peak > 5 * BUDGET  # one row, unchunked: seen
    torch.testing.assert_close(logp, torch.cat([w[0] for w in want]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, torch.cat([w[1] for w in want]), rtol=1e-5, atol=1e-5)
    assert (logp[1, completion // 2:] == 0).all() and (ent[1, completion // 2:] == 0).all()


def test_every_chunking_equals_the_whole_pass_on_a_small_vocabulary():
    model = _model("qwen2", vocab=37, width=8)
    batch = _batch(37, 9, prompt=4)
    with torch.no_grad():
        want = completion_logprobs(model, *batch, with_entropy=True)
        for chunks in (Chunks(rows=1), Chunks(positions=2), Chunks(vocab=5), Chunks(rows=1, positions=4, vocab=36),
                       Chunks(rows=3, positions=100, vocab=100)):
            got = completion_scores(model, *batch, with_entropy=True, chunks=chunks)
            torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6, msg=str(chunks))
            torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6, msg=str(chunks))
            assert completion_scores(model, *batch, chunks=chunks)[1] is None
        whole = completion_scores(model, *batch, with_entropy=True)  # no bound: completion_logprobs itself
        assert torch.equal(whole[0], want[0]) and torch.equal(whole[1], want[1])


def _samples_of_prompts(vocab: int, *, prompts: int = 3, samples: int = 4, prompt: int = 6, completion: int = 7):
    """`samples` rows of each of `prompts` distinct left-padded prompts (rows in order (prompt, sample), as a
    rollout's), right-padded completions of lengths 0 to `completion`."""
    g = torch.Generator().manual_seed(2)
    p_ids = torch.randint(vocab, (prompts, prompt), generator=g)
    p_mask = torch.ones(prompts, prompt, dtype=torch.bool)
    p_mask[1, :2] = False
    p_ids[1, :2] = 0  # padding
    n = prompts * samples
    c_ids = torch.randint(vocab, (n, completion), generator=g)
    lengths = torch.arange(n) % (completion + 1)  # [n] 0 .. completion
    c_mask = torch.arange(completion)[None] < lengths[:, None]
    return (p_ids.repeat_interleave(samples, 0), p_mask.repeat_interleave(samples, 0), torch.where(c_mask, c_ids, 0),
            c_mask)


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_shared_prompt_logprobs_equal_the_unshared_pass(family):
    model = _model(family, vocab=41, width=8)
    batch = _samples_of_prompts(41)
    with torch.no_grad():
        want = completion_logprobs(model, *batch)[0]  # [12, 7]
    assert (want[0] == 0).all() and (want != 0).sum() == batch[3].sum() == 34  # a row with no completion
    # blocks of every size, the head cut by positions, then by vocabulary entries
    for rows, budget in ((64, 2**30), (5, 2**30), (1, 2**30), (4, 3 * 41 * NO_GRAD_BYTES), (3, 7 * NO_GRAD_BYTES)):
        got = shared_prompt_logprobs(model, *batch, rows=rows, budget=budget)
        assert got.dtype == torch.float32 and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"rows={rows}, budget={budget}")
        assert (got[~batch[3]] == 0).all()
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=f"rows must be a positive int, got {bad!r}"):
            shared_prompt_logprobs(model, *batch, rows=bad)
    with pytest.raises(ValueError, match="budget must be a positive int"):
        shared_prompt_logprobs(model, *batch, budget=0)


@pytest.mark.slow
def test_the_shared_prompt_pass_stays_under_budget_at_the_bases_vocabulary():
    """At the pretrained base's 49,152-token vocabulary and 256 completion tokens: the pass's peak stays under
    `BUDGET` with the head cut to fit it, and its values equal the unshared pass's."""
    model = _model("llama", vocab=49_152)
    p_ids, p_mask, c_ids, c_mask = _batch(49_152, 256)
    batch = (p_ids.repeat_interleave(2, 0), p_mask.repeat_interleave(2, 0), c_ids.repeat(2, 1), c_mask.repeat(2, 1))
    peak, largest, got = allocated_peak(lambda: shared_prompt_logprobs(model, *batch, rows=2, budget=8 * MIB))
    with torch.no_grad():
        want = completion_logprobs(model, *batch)[0]
    assert largest < 8 * MIB and peak < BUDGET
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_grpo_memory_counts_the_scoring_pass_of_vllm_rollouts():
    from esreason_lib.grpo.config import GRPOConfig
    from esreason_lib.grpo.memory import GIB, grpo_memory, scoring_chunks

    model = _model("qwen2", vocab=151_936, width=16)
    config = GRPOConfig(backend="vllm", prompts_per_step=4, group_size=8, max_new_tokens=512, logit_chunk=128)
    chunks = scoring_chunks(config)
    assert chunks == Chunks(rows=SCORING.rows, positions=128, vocab=SCORING.vocab)
    est = grpo_memory(config, model, prompt_tokens=64, device_bytes=80 * GIB)
    block = 2 * (6 * 16 + 16 + 2 * 8 + 4 * 32)  # bytes per token of one layer (d 16, q 16, kv 8, ffn 32)
    want = 16 * 128 * 16_384 * NO_GRAD_BYTES + 16 * (64 + 512) * (block + 2 * 16)
    assert est["scoring"] == pytest.approx(want / GIB)
    assert est["total"] >= est["weights"] + est["optimizer"] + est["rollouts"] + est["scoring"]
    assert grpo_memory(GRPOConfig(max_new_tokens=512), model, prompt_tokens=64)["scoring"] == 0


def test_budget_chunks_and_rows_by_hand():
    from esreason_lib.models.logprobs import SCORING_BYTES, budget_chunks, budget_rows

    row = 7 * 49_152 * NO_GRAD_BYTES  # one row of 7 positions at a 49,152-entry vocabulary
    assert SCORING_BYTES == 16 * 256 * 16_384 * NO_GRAD_BYTES
    assert budget_chunks(6 * row, rows=6, positions=7, vocab=49_152) == Chunks()  # fits whole: no cut
    assert budget_chunks(6 * row - 1, rows=6, positions=7, vocab=49_152) == Chunks(rows=5)
    assert budget_chunks(2 * row, rows=6, positions=7, vocab=49_152) == Chunks(rows=2)
    assert budget_chunks(row - 1, rows=6, positions=7, vocab=49_152) == Chunks(rows=1, positions=6)
    assert budget_chunks(49_152 * NO_GRAD_BYTES - 1, rows=6, positions=7, vocab=49_152) == Chunks(
        rows=1, positions=1, vocab=49_151)
    assert budget_chunks(1, rows=6, positions=7, vocab=49_152) == Chunks(rows=1, positions=1, vocab=1)
    assert budget_chunks(1, rows=6, positions=0, vocab=49_152) == Chunks()  # no completion positions: nothing cut
    for budget in (1, 100, row - 1, 2 * row, 10**12):  # each cut keeps its head calls within the budget
        chunks = budget_chunks(budget, rows=6, positions=7, vocab=49_152)
        assert chunks.whole or logit_bytes(chunks, rows=6, positions=7, vocab=49_152) <= max(budget, NO_GRAD_BYTES)
    assert budget_rows(10 * 7 * 100 * 20, positions=7, vocab=100, bytes_per=20) == 10
    assert budget_rows(1, positions=7, vocab=100) == 1  # one row even above the budget
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=f"budget must be a positive int \\(bytes\\), got {bad!r}"):
            budget_chunks(bad, rows=1, positions=1, vocab=1)
        with pytest.raises(ValueError, match=f"budget must be a positive int \\(bytes\\), got {bad!r}"):
            budget_rows(bad, positions=1, vocab=1)
