"""GRPO's update over several processes (`torch.distributed`, launched with `torchrun`): data parallel, or
fully sharded (FSDP2).

Every process holds the whole policy, samples the same rollouts (the same seeds and weights), and in each
optimiser step forwards only its share of the micro-batches (`my_parts`: micro-batch j goes to process j mod
world). `reduce_step` then sums the gradients and the step's metrics over the processes (`all_reduce`, SUM): each
micro-batch's loss was already weighted by its share of the minibatch (`grpo.update.policy_update`), so the sum is
the single-process gradient of `grpo.loss.policy_loss`, unchanged, up to float summation order; every process
then takes the same optimiser step and the replicas stay equal. This is DDP's scheme written out, kept inside
`policy_update` so that the loss, its aggregation and the metrics stay one code path.

Fully sharded (`shard_model`: `torch.distributed.fsdp.fully_shard` on every decoder layer, then the whole model,
as FSDP2 / ZeRO-3 do): each process keeps 1/world of every parameter, gradient and AdamW state, a forward or
backward gathers one layer at a time, and the backward's reduce-scatter sums the gradients (divide factor 1:
the micro-batch weights already make the sum the single-process gradient). The micro-batches are dealt as
above; since every forward and backward is a collective, a process with fewer micro-batches than another runs a
stand-in forward (and a backward of 0 x its loss) for each one it lacks, so all of them meet in every collective.
Only the step's metrics are then summed (`reduce_step` with no parameters). Two gloo processes take the
single-process steps to fp32 tolerance (tests/test_grpo_distributed.py; torch 2.13's gloo runs FSDP2's
all-gather and reduce-scatter on CPU). What is not built: `train_grpo` / `main` do not shard (rollouts, the vLLM
weight copy and saving would read the sharded parameters; `grpo.memory.per_gpu_memory` estimates what sharding
would fit).

Every process starts from the same state and iteration (`shared_checkpoint`): process 0 decides whether its run
is complete (then every process returns) and which checkpoint to resume from, and the others read that checkpoint
from process 0's file (one machine, or a filesystem the nodes share), so a restarted `torchrun` resumes every rank
at the same iteration and ends them together (tests/test_grpo_resume_ranks.py: two gloo processes killed
mid-run and restarted end bit-identical to an uninterrupted pair).

`policy_update` shards itself whenever `torch.distributed` is initialised with more than one process. Without
`micro_batch_size` a minibatch is cut into one micro-batch per process. `main` runs `train_grpo` on every process
of a `torchrun` launch; process 0 writes the run, the others write into a scratch store removed at exit
(docs/scale-out.md has the command). Local rollouts are not sharded (each process samples the whole
batch); vLLM rollouts are (`models.rollouts_vllm.VLLMRollouts`: each process decodes its share, then gathers).
"""

from __future__ import annotations

import gc
import math

import torch
import torch.distributed as dist


def data_parallel() -> tuple[int, int] | None:
    """(rank, world size) when `torch.distributed` is initialised with several processes, else None."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return dist.get_rank(), dist.get_world_size()


def leave_process_group() -> None:
    """`torch.distributed.destroy_process_group`, after a garbage collection: FSDP2's modules (`shard_model`) sit in
    reference cycles, and left to interpreter exit they were freed after the group was gone, their gloo work
    aborting the process ("terminate called without an active exception"; measured: 4 of 54 sharded runs of
    tests/test_grpo_distributed.py's worker on a loaded machine, 0 of 40 with the collection first)."""
    gc.collect()
    dist.destroy_process_group()


def from_rank0(value):
    """`value` as process 0 holds it, on every process (`broadcast_object_list`; a collective: every process
    calls it); `value` itself without several processes."""
    if data_parallel() is None:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def shared_checkpoint(run, resume: bool) -> tuple[int, dict] | None:
    """(step, state) every process resumes `run` from: process 0's latest checkpoint (None without `resume` or
    when it has none), which the other processes read from process 0's file (`run` there is their own copy of
    the same run, e.g. a scratch store's); `run.latest_checkpoint()` alone. A collective under several processes."""
    if data_parallel() is None:
        return run.latest_checkpoint() if resume else None
    found = run.latest_checkpoint() if resume and dist.get_rank() == 0 else None
    where = from_rank0(None if found is None else (found[0], str(run.checkpoint_path(found[0]))))
    if where is None or dist.get_rank() == 0:
        return found
    step, path = where
    return step, run.read_checkpoint(step, path)


def shard_model(model):
    """`model` fully sharded over the initialised process group (FSDP2, module docstring): `fully_shard` on each
    module of `model.model.layers` (a Qwen2 / Llama-style decoder), then on `model`, with gradients summed, not
    averaged, over the processes; returns `model` (its class becomes an `FSDPModule`). End the process group with
    `leave_process_group`, which frees these modules first."""
    from torch.distributed.fsdp import fully_shard

    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"shard_model: {type(model).__name__} has no model.layers to shard layer by layer")
    for module in (*layers, model):
        fully_shard(module)
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)  # a plain SUM: gloo has no PREMUL_SUM (measured)
    return model


def fully_sharded(model) -> bool:
    """Whether `model` was sharded by `fully_shard` (`shard_model`)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def micro_batch_rows(rows: int, micro_batch_size: int | None, shard: tuple[int, int] | None) -> int | None:
    """Rows per micro-batch for a minibatch of `rows` forwarded rows: `micro_batch_size`, or without one the whole
    minibatch (one process) or an equal share per process."""
    if micro_batch_size is not None or shard is None:
        return micro_batch_size
    return max(math.ceil(rows / shard[1]), 1)


def my_parts(parts: list, shard: tuple[int, int] | None, lockstep: bool = False) -> list:
    """The micro-batches this process forwards: all of them alone, else every world-th from its rank; with
    `lockstep` (a fully sharded model) padded with None to as many as the process with the most has."""
    if shard is None:
        return parts
    mine = parts[shard[0]::shard[1]]
    return mine + [None] * (math.ceil(len(parts) / shard[1]) - len(mine)) if lockstep else mine


STEP_METRICS = ("loss/policy", "policy/clip_frac", "policy/kl", "policy/ratio_mean")
"""The additive metrics of one optimiser step (`grpo.update.policy_update`); a process that forwarded no row lacks
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
