"""GRPO's update over several processes (`torch.distributed`, launched with `torchrun`): data parallel.

Every process holds the whole policy, samples the same rollouts (the same seeds and weights), and in each
optimiser step forwards only its share of the micro-batches (`my_parts`: micro-batch j goes to process j mod
world). `reduce_step` then sums the gradients and the step's metrics over the processes (`all_reduce`, SUM): each
micro-batch's loss was already weighted by its share of the minibatch (`grpo.loop.policy_update`), so the sum is
the single-process gradient of `grpo.loss.policy_loss`, unchanged, up to float summation order; every process
then takes the same optimiser step and the replicas stay equal. This is DDP's scheme written out, kept inside
`policy_update` so that the loss, its aggregation and the metrics stay one code path. FSDP2 (`fully_shard`), which
would also shard the weights and optimiser state, needs reduce-scatter, which the CPU backend gloo lacks, so it
cannot be tested here; `grpo.memory.per_gpu_memory` says what fits without it.

`policy_update` shards itself whenever `torch.distributed` is initialised with more than one process. Without
`micro_batch_size` a minibatch is cut into one micro-batch per process. `main` runs `train_grpo` on every process
of a `torchrun` launch; process 0 writes the run, the others write into a scratch store removed at exit
(docs/scale-out.md has the command). Rollouts are not sharded: each process samples the whole batch.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


def data_parallel() -> tuple[int, int] | None:
    """(rank, world size) when `torch.distributed` is initialised with several processes, else None."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return dist.get_rank(), dist.get_world_size()


def micro_batch_rows(rows: int, micro_batch_size: int | None, shard: tuple[int, int] | None) -> int | None:
    """Rows per micro-batch for a minibatch of `rows` forwarded rows: `micro_batch_size`, or without one the whole
    minibatch (one process) or an equal share per process."""
    if micro_batch_size is not None or shard is None:
        return micro_batch_size
    return max(math.ceil(rows / shard[1]), 1)


def my_parts(parts: list, shard: tuple[int, int] | None) -> list:
    """The micro-batches this process forwards: all of them alone, else every world-th from its rank."""
    return parts if shard is None else parts[shard[0]::shard[1]]


STEP_METRICS = ("loss/policy", "policy/clip_frac", "policy/kl", "policy/ratio_mean")
"""The additive metrics of one optimiser step (`grpo.loop.policy_update`); a process that forwarded no row lacks
policy/ratio_mean."""


def reduce_step(params: list[torch.Tensor], metrics: dict[str, float]) -> dict[str, float]:
    """Sum the gradients of `params` (None counts as zeros) and the step's `STEP_METRICS` over the processes (a
    metric some process lacks counts 0 there and is kept when any process has it); returns the summed metrics.
    In place on the gradients."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
    values = [metrics.get(k, 0.0) for k in STEP_METRICS] + [float(k in metrics) for k in STEP_METRICS]
    total = torch.tensor(values, dtype=torch.float64)  # [2M]: sums, then how many processes had each
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    sums, present = total[:len(STEP_METRICS)].tolist(), total[len(STEP_METRICS):].tolist()
    return {k: v for k, v, n in zip(STEP_METRICS, sums, present) if n > 0}
