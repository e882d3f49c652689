"""GRPO rollouts sampled by a vLLM engine that follows the policy (`GRPOConfig.backend="vllm"`, extra `vllm`).

As TRL's `GRPOTrainer` does with vLLM in colocate mode: one engine (`vllm_engine.Engine`) beside the trained
model samples the rollouts, and the policy's weights are copied into it (by Hugging Face name, into vLLM's fused
tensors) after each iteration's optimizer steps, before the next rollout, so every batch is sampled from the
current policy and never from a stale copy. Every `check_every`-th sync (`GRPOConfig.check_every`) compares the
engine's `weights_fingerprint` (on the device) with the policy's and raises on a difference.

The engine returns token ids only; `rollouts_from_tokens` turns them into the `generation.Rollouts` that the
library's own `generate` returns (prompts left-padded, completions right-padded with the EOS that stopped a row
kept, the text decoded by the library and cut after the stop string) and fills the per-token log-probs and
entropies with one no-grad pass of the policy, bounded in rows, positions and vocabulary entries
(`models.logprobs.completion_scores` with `chunks`, `logprobs.SCORING` by default): vLLM reports neither the
entropy nor the full distribution. Given the same tokens the two paths build the same `Rollouts`
(tests/test_grpo_vllm.py); with greedy decoding the engine's tokens equal `generate`'s (tests/vllm_parity).

Deviations from the in-process path:
- vLLM's sampler draws other random numbers than `generate` (the same temperature / top-p distribution), so a
  run's samples, and hence its numbers, differ; the backend is part of the run's identity. Row r of iteration
  t's batch is its own request seeded `derive_seed(seed, "vllm", r)` with `seed` the trainer's per-iteration
  sampling seed, so a run (and a resumed one) is deterministic wherever the engine is.
- The entropies cost one extra no-grad forward over the batch (on this CPU with qwen2-m, 0.30 s of a 0.65 s
  rollout of 32 x 8 samples, `benchmarks/bench_vllm.py`).
- pi_old in the loss is the trainer's forward (`grpo.update.policy_update`), never the engine's log-probs, so
  the engine's numerics (other kernels, bf16 sampling) do not enter the ratio: TRL's importance-sampling
  correction for that mismatch is not needed here.
- Prefix caching is on (a group's G requests share their prompt's KV blocks), and every weight copy empties
  the cache, so no block computed under old weights is reused (tested with 32-token blocks; the CPU default of
  128 is longer than the tiny tasks' prompts, so on this machine it never engages and saves nothing).
- Each sync sends the state in chunks of at most 1 GiB (`models.weight_sync`), by CUDA IPC handle when the engine
  runs in its own process on the GPU (no host copy; untested here); 0.01 s for qwen2-m on this CPU (pickled), not
  yet measured for a 1.5B model on a GPU.
"""

from __future__ import annotations

import torch

from esreason_lib.models.generation import (
    DEFAULT_SAMPLING,
    Rollouts,
    Sampling,
    cut_at_stop,
    decode_rows,
    encode_texts,
    left_pad,
    right_pad,
    special_ids,
)
from esreason_lib.models.logprobs import SCORING, Chunks, completion_scores
from esreason_lib.models.vllm_settings import process_rank_world, shard_rows
from esreason_lib.seeding import derive_seed
from esreason_lib.validation import check_positive_int


def rollouts_from_tokens(model, tokenizer, prompts: list[str], n: int, completion_tokens: list[list[int]], *,
                         temperature: float = 1.0, stop: str | None = None, chunks: Chunks = SCORING) -> Rollouts:
    """The `Rollouts` of `n` completions per prompt given as token ids ([B] lists, row i -> prompt i // n, each
    ending with the EOS that stopped it when one did), with log-probs and entropies of the `temperature`-scaled
    policy `model` (no grad, cut by `chunks`)."""
    prompt_tokens = encode_texts(tokenizer, prompts, "prompts")
    if len(completion_tokens) != len(prompt_tokens) * n:
        raise ValueError(f"completion_tokens: {len(completion_tokens)} rows for {len(prompt_tokens)} prompts x n={n}")
    pad, _ = special_ids(model, tokenizer)
    device = model.device
    p_ids, p_mask = left_pad([prompt_tokens[i // n] for i in range(len(completion_tokens))], pad, device)  # [B, Lp]
    c_ids, c_mask = right_pad(completion_tokens, pad, device)  # [B, Lc]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logprobs, entropies = completion_scores(model, p_ids, p_mask, c_ids, c_mask, temperature=temperature,
                                                    with_entropy=True, chunks=chunks)  # [B, Lc] each
    finally:
        model.train(was_training)
    texts = decode_rows(tokenizer, c_ids)
    return Rollouts(prompts=list(prompts), n=n, completions=[cut_at_stop(t, stop) for t in texts],
                    prompt_ids=p_ids, prompt_mask=p_mask, completion_ids=c_ids, completion_mask=c_mask,
                    logprobs=logprobs.float(), entropies=entropies.float())


def gathered_rows(shard: list) -> list:
    """Every process's `shard` (a list of rows), concatenated in rank order (`all_gather_object`; a collective
    under torchrun), so that each process holds the whole batch and computes the same group statistics; `shard`
    itself alone."""
    import torch.distributed as dist

    if process_rank_world()[1] == 1:
        return shard
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, shard)
    return [row for part in parts for row in part]


class VLLMRollouts:
    """A drop-in for `generation.generate` in GRPO: samples on a vLLM engine holding the policy's current weights.

    Under torchrun (`vllm_settings.process_rank_world`) every process holds its own engine on its own device
    (`vllm_settings.launcher_kwargs`) and decodes a contiguous share of the rows (`vllm_settings.shard_rows`), each
    row with the seed a single process gives it; the tokens are gathered (`gathered_rows`), and every process scores
    the whole batch, so the rollouts, advantages and updates equal a single process's.
    The engine starts on the first call (from that model and tokenizer, its context sized for that call's
    `max_new_tokens`; a later call with a larger budget starts a new one); each later call copies the model's
    weights in first.
    `check_every`: compare weight checksums every this many calls. `chunks`: the bounds of the log-prob / entropy
    pass (`models.logprobs.Chunks`). `sleep`: the engine sleeps once its tokens are drawn (before the entropy pass
    and the update) and wakes before the next call's weight copy (`GRPOConfig.engine_sleep`, CUDA only).
    `engine_seed` seeds the engine; `engine_kwargs` go to `vllm.LLM`."""

    def __init__(self, *, engine_seed: int = 0, check_every: int = 1, chunks: Chunks = SCORING, sleep: bool = False,
                 engine_kwargs: dict | None = None):
        self.engine_seed, self.check_every, self.chunks, self.sleep = engine_seed, check_every, chunks, sleep
        check_positive_int(self, "check_every")
        self.engine_kwargs = dict(engine_kwargs or {})
        self.engine = None
        self.max_new_tokens = None
        """The generation budget the engine's context (`vllm_settings.engine_max_model_len`) was sized for."""
        self.calls = 0
        """Rollout calls so far (each one a weight sync)."""

    def __call__(self, model, tokenizer, prompts: list[str], sampling: Sampling = DEFAULT_SAMPLING, *, n: int = 1,
                 stop: str | None = None, seed: int = 0) -> Rollouts:
        """`generate`'s arguments (but its `forward`) and result; `sampling.sampler` is vLLM's own. The constructor's
        `chunks` bound the no-grad log-prob / entropy pass (the engine batches its requests itself)."""
        from vllm import SamplingParams

        from esreason_lib.models.vllm_engine import Engine

        max_new_tokens, greedy = sampling.max_new_tokens, sampling.greedy
        if self.engine is not None and max_new_tokens > self.max_new_tokens:
            self.close()  # its context is too short for this budget: a new engine, sized for it
        if self.engine is None:
            self.engine = Engine(model, tokenizer, seed=self.engine_seed, prefix_caching=True,
                                 max_new_tokens=max_new_tokens, sleep_mode=self.sleep, engine_kwargs=self.engine_kwargs)
            self.max_new_tokens = int(max_new_tokens)
        else:
            if self.sleep:
                self.engine.wake()
            self.engine.load(model)
        if self.calls % self.check_every == 0:
            self.engine.check(model, f"rollout call {self.calls} (GRPO: the engine gets the policy's weights)")
        self.calls += 1
        ids = encode_texts(tokenizer, prompts, "prompts")
        rows = [ids[i // n] for i in range(len(ids) * n)]  # [B] row i -> prompt i // n
        mine = shard_rows(len(rows), *process_rank_world())  # under torchrun: this process's share of the rows
        params = [SamplingParams(temperature=0.0 if greedy else float(sampling.temperature),
                                 top_p=1.0 if greedy else sampling.top_p,
                                 max_tokens=int(max_new_tokens), stop=[stop] if stop else None,
                                 include_stop_str_in_output=True, seed=None if greedy else derive_seed(seed, "vllm", r))
                  for r in range(mine.start, mine.stop)]
        shard = [list(o.outputs[0].token_ids) for o in self.engine.generate(rows[mine], params)] if params else []
        tokens = gathered_rows(shard)  # [B] every process's share, in row order
        if self.sleep:
            self.engine.sleep()
        return rollouts_from_tokens(model, tokenizer, prompts, n, tokens, temperature=sampling.scale, stop=stop,
                                    chunks=self.chunks)

    def close(self) -> None:
        """Shut the engine down (a later call starts a new one)."""
        if self.engine is not None:
            self.engine.close()
        self.engine, self.max_new_tokens = None, None

