"""Settings of a vLLM engine that are decided without vLLM installed (so the main test suite checks them): its
context length, and its arguments and share of the rows under torchrun.

The context length (`max_model_len`). vLLM defaults it to the model's `max_position_embeddings` (32,768 for
Qwen2.5-1.5B-Instruct, 131,072 for DeepSeek-R1-Distill-Qwen-1.5B) and sizes its KV-cache profile by it. The paper
artifact runs its engines with `max_model_len` 4096 beside 2048 new tokens (`configs/easy_qwen25_1p5b.yaml` of
yunpengba7/understanding-es): the prompt gets the other 2048. `engine_max_model_len` keeps that split for any
generation budget: `PROMPT_TOKENS` for the prompt plus the caller's `max_new_tokens`, never beyond the model's
positions (vLLM refuses a longer context). A prompt longer than `PROMPT_TOKENS` is refused by the engine
(vLLM's own error); GSM8K's and MATH's chat prompts take a few hundred tokens.
"""

from __future__ import annotations

from esreason_lib.seeding import derive_seed
from esreason_lib.validation import is_int

PROMPT_TOKENS = 2048
"""Tokens of context left for the prompt: the artifact's `max_model_len` 4096 less its 2048 new tokens."""


def engine_max_model_len(max_new_tokens: int, max_positions: int | None) -> int:
    """The `max_model_len` of an engine generating up to `max_new_tokens` tokens: `PROMPT_TOKENS` +
    `max_new_tokens`, capped at the model's `max_positions` (its config's `max_position_embeddings`; None: no cap).
    E.g. 2048 new tokens on Qwen2.5-1.5B give the artifact's 4096."""
    for name, value in (("max_new_tokens", max_new_tokens), ("max_positions", max_positions)):
        if not (value is None and name == "max_positions") and not (is_int(value) and value >= 1):
            raise ValueError(f"engine_max_model_len: {name} must be a positive int, got {value!r}")
    length = PROMPT_TOKENS + int(max_new_tokens)
    return length if max_positions is None else min(length, int(max_positions))


def process_rank_world() -> tuple[int, int]:
    """(rank, world size) of this process in an initialised `torch.distributed` group (a `torchrun` launch), else
    (0, 1)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def launcher_kwargs(seed: int, rank: int, world: int) -> dict:
    """The `vllm.LLM` arguments of an engine in process `rank` of `world` (torchrun): none alone; under several
    processes, as TRL's colocate mode and verl run it, `distributed_executor_backend="external_launcher"` (the
    engine runs inside this process, on its current device, beside the initialised process group, instead of
    starting workers of its own) and a seed per rank (`derive_seed(seed, "vllm-rank", rank)`: the ranks' engines
    draw apart; a row's sample still follows its own request seed)."""
    if world == 1:
        return {}
    return {"distributed_executor_backend": "external_launcher", "seed": derive_seed(int(seed), "vllm-rank", rank)}


def shard_rows(rows: int, rank: int, world: int) -> slice:
    """The rows process `rank` of `world` decodes of a batch of `rows`: a contiguous share of ceil(rows / world)
    (the last ones shorter, possibly empty)."""
    share = -(-rows // world)
    return slice(min(rank * share, rows), min((rank + 1) * share, rows))
