"""GRPO's data-parallel update (grpo/distributed.py): 2 gloo processes spawned from the test take the same
optimiser steps as one process, to fp32 tolerance, over several rollout batches."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.distributed import (
    data_parallel,
    fully_sharded,
    leave_process_group,
    micro_batch_rows,
    my_parts,
    shard_model,
)
from esreason_lib.grpo.update import policy_update
from esreason_lib.models.optim import master_weight_adamw
from esreason_lib.models.zoo import tiny_random_qwen2

VOCAB, ITERATIONS = 40, 3


def _config(micro_batch_size):
    """4 prompts x G=4, minibatches of 2 prompts, 2 epochs, KL on: 4 optimiser steps per batch."""
    return GRPOConfig(group_size=4, prompts_per_step=4, minibatch_size=2, ppo_epochs=2, beta=0.04, lr=1e-2,
                      micro_batch_size=micro_batch_size, max_grad_norm=1.0)


def _batch(iteration: int):
    """A random scored batch (rows grouped by prompt): prompts left-padded, completions right-padded."""
    g = torch.Generator().manual_seed(iteration)
    B, Lp, Lc = 16, 5, 6
    p_ids, c_ids = torch.randint(3, VOCAB, (B, Lp), generator=g), torch.randint(3, VOCAB, (B, Lc), generator=g)
    p_mask = (torch.arange(Lp) >= torch.randint(0, 2, (B, 1), generator=g)).long()  # [B, Lp]
    c_mask = (torch.arange(Lc) < torch.randint(1, Lc + 1, (B, 1), generator=g)).long()  # [B, Lc]
    return p_ids * p_mask, p_mask, c_ids * c_mask, c_mask, torch.randn(B, generator=g)


def _train(micro_batch_size, sharded: bool = False):
    """The policy after `ITERATIONS` batches of `policy_update` (data parallel when torch.distributed is up; with
    `sharded`, the policy and the reference fully sharded, FSDP2)."""
    torch.manual_seed(0)
    model = tiny_random_qwen2(VOCAB, seed=0)
    model.config.pad_token_id = 0
    ref = copy.deepcopy(model).eval()
    if sharded:
        model, ref = shard_model(model), shard_model(ref)
        assert fully_sharded(model) and fully_sharded(ref)
    cfg = _config(micro_batch_size)
    opt = master_weight_adamw(model, lr=cfg.lr)
    steps = []
    for t in range(ITERATIONS):
        steps += policy_update(model, ref, opt, *_batch(t), cfg)
    state = {k: getattr(v, "full_tensor", lambda v=v: v)() for k, v in model.state_dict().items()}  # DTensors whole
    return {k: v.detach().clone() for k, v in state.items()}, steps


def _worker(rank: int, world: int, init: str, micro_batch_size, sharded: bool, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        assert data_parallel() == (rank, world)
        torch.save(_train(micro_batch_size, sharded), f"{out}.{rank}")
    finally:
        leave_process_group()
        assert not dist.is_initialized()


@pytest.mark.parametrize("micro_batch_size, sharded", [(None, False), (3, False), (None, True), (3, True)])
def test_two_gloo_processes_take_the_single_process_steps(tmp_path, micro_batch_size, sharded):
    """Data parallel, and FSDP2 (`shard_model`): with micro-batches of 3 rows a minibatch's 8 rows make 3 parts,
    so under FSDP2 one process runs a stand-in forward and backward in each step."""
    torch.set_num_threads(1)
    want, want_steps = _train(micro_batch_size)
    out = str(tmp_path / "state")
    mp.spawn(_worker, args=(2, f"file://{tmp_path / 'rendezvous'}", micro_batch_size, sharded, out), nprocs=2,
             join=True)
    (s0, steps0), (s1, steps1) = (torch.load(f"{out}.{r}") for r in (0, 1))
    assert len(steps0) == len(want_steps) == ITERATIONS * 4
    moved = False
    for name, w in want.items():
        assert torch.equal(s0[name], s1[name]), name  # the replicas stay bit-identical
        # a key bias has gradient 0 in exact arithmetic (softmax ignores it): AdamW normalises the rounding noise
        # of either sum order into steps of ~lr * 1e-3, so it gets a looser bound (measured: 1.2e-5 after 12 steps)
        atol = 1e-4 if name.endswith("k_proj.bias") else 5e-6  # others measured <= 2.5e-6
        torch.testing.assert_close(s0[name], w, atol=atol, rtol=1e-5, msg=name)
        moved |= not torch.equal(w, tiny_random_qwen2(VOCAB, seed=0).state_dict()[name])
    assert moved
    for ours, theirs in zip(steps0, want_steps):
        assert ours.keys() == theirs.keys()
        for key in ours:
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key


def test_micro_batches_are_dealt_round_robin():
    parts = [slice(0, 3), slice(3, 6), slice(6, 8)]
    assert my_parts(parts, None) == parts
    assert my_parts(parts, (0, 2)) == [parts[0], parts[2]] and my_parts(parts, (1, 2)) == [parts[1]]
    assert my_parts(parts, (1, 4)) == [parts[1]] and my_parts(parts, (3, 4)) == []
    assert micro_batch_rows(8, None, None) is None and micro_batch_rows(8, 3, (0, 2)) == 3
    assert my_parts(parts, (1, 2), lockstep=True) == [parts[1], None]  # FSDP2: a stand-in keeps the step count
    assert my_parts(parts, (3, 4), lockstep=True) == [None] and my_parts(parts, None, lockstep=True) == parts
    assert my_parts([], (1, 2), lockstep=True) == []
    assert micro_batch_rows(8, None, (0, 3)) == 3 and micro_batch_rows(0, None, (0, 2)) == 1
    assert data_parallel() is None  # not initialised in this process
