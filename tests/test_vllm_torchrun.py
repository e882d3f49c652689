"""vLLM under torchrun without vLLM: `vllm_settings.launcher_kwargs` and `shard_rows` by hand, and two gloo processes
whose `models.vllm_engine.Engine` (the real class) starts a stand-in `vllm.LLM` that records its arguments and
answers each request with a token drawn from the request's seed: each process's engine runs with
`distributed_executor_backend="external_launcher"` and a seed of its own, decodes only its share of the rows,
and both processes end with the single process's rollouts. The engine itself: tests/vllm_parity (`make test-vllm`)
and scripts/gpu_check.py's torchrun section."""

from __future__ import annotations

import os
import pickle
import sys
import types

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from esreason_lib.models.vllm_settings import launcher_kwargs, process_rank_world, shard_rows
from esreason_lib.seeding import derive_seed


def test_launcher_kwargs_and_shards_by_hand():
    assert launcher_kwargs(7, 0, 1) == {} and process_rank_world() == (0, 1)
    assert launcher_kwargs(7, 1, 2) == {"distributed_executor_backend": "external_launcher",
                                        "seed": derive_seed(7, "vllm-rank", 1)}
    assert launcher_kwargs(7, 0, 2)["seed"] != launcher_kwargs(7, 1, 2)["seed"]
    assert [shard_rows(10, r, 4) for r in range(4)] == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 10)]
    assert [shard_rows(2, r, 4) for r in range(4)] == [slice(0, 1), slice(1, 2), slice(2, 2), slice(2, 2)]
    assert shard_rows(5, 0, 1) == slice(0, 5)


class FakeLLM:
    """`vllm.LLM`'s surface as `Engine` uses it: records its kwargs and every batch it decodes."""

    fingerprint = None  # the driver's `weights_fingerprint`, answered to `es_checksum`

    def __init__(self, **kwargs):
        self.kwargs, self.batches = kwargs, []
        FakeLLM.made.append(self)

    def collective_rpc(self, name, args):
        method, _ = pickle.loads(args[0])
        answer = {"es_bind": "cpu", "es_checksum": FakeLLM.fingerprint}.get(method)
        return [pickle.dumps(answer)]

    def reset_prefix_cache(self):
        return True

    def generate(self, prompts, params, use_tqdm=False):
        self.batches.append(len(prompts))
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=[3 + p["seed"] % 20, 4])])
                for p in params]


def _worker(rank: int, world: int, init: str, out: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    FakeLLM.made = []
    sys.modules["vllm"] = types.SimpleNamespace(LLM=FakeLLM, SamplingParams=lambda **kw: kw)
    sys.modules["cloudpickle"] = pickle
    from esreason_lib.grpo.distributed import leave_process_group
    from esreason_lib.models.rollouts_vllm import VLLMRollouts
    from esreason_lib.models.sampling import Sampling
    from esreason_lib.models.weights import weights_fingerprint
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    FakeLLM.fingerprint = weights_fingerprint(model)
    ro = VLLMRollouts(engine_seed=11)(model, tok, ["1+2=", "3*4=", "5"], Sampling(max_new_tokens=4), n=3, seed=2)
    (llm,) = FakeLLM.made
    torch.save({"ids": ro.completion_ids, "logprobs": ro.logprobs, "batches": llm.batches,
                "kwargs": {k: llm.kwargs.get(k) for k in ("distributed_executor_backend", "seed")}}, f"{out}.{rank}")
    if world > 1:
        leave_process_group()


@pytest.mark.slow
def test_two_processes_each_decode_their_share_on_their_own_engine_and_gather_the_batch(tmp_path):
    mp.spawn(_worker, args=(1, "", str(tmp_path / "alone")), nprocs=1)
    mp.spawn(_worker, args=(2, f"file://{tmp_path / 'rendezvous'}", str(tmp_path / "pair")), nprocs=2)
    alone = torch.load(f"{tmp_path / 'alone'}.0")
    pair = [torch.load(f"{tmp_path / 'pair'}.{r}") for r in range(2)]
    assert alone["kwargs"] == {"distributed_executor_backend": None, "seed": 11} and alone["batches"] == [9]
    for rank, got in enumerate(pair):
        assert got["kwargs"] == {"distributed_executor_backend": "external_launcher",
                                 "seed": derive_seed(11, "vllm-rank", rank)}
        assert got["batches"] == [5 if rank == 0 else 4]  # rows 0-4 and 5-8 of the 9
        assert torch.equal(got["ids"], alone["ids"])  # each row sampled with its own seed, then gathered
        torch.testing.assert_close(got["logprobs"], alone["logprobs"])
