"""Rank-safe resume under torchrun (grpo.distributed.shared_checkpoint): two gloo processes, killed mid-run and
started again, resume together from process 0's checkpoint and end bit-identical to an uninterrupted pair; a
complete run returns on both processes at once. Process 1 writes into a store of its own, fresh at every start,
as scripts/torchrun_grpo.py's scratch store is."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))

ITERATIONS, KILL_AT = 4, 2


def _worker(rank: int, world: int, init: str, home: str, phase: str, out: str) -> None:
    from test_grpo import ParenTask, paren_config

    import esreason_lib.grpo.loop as loop
    from esreason_lib.grpo.distributed import leave_process_group
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    if phase == "killed":  # both processes die as iteration KILL_AT starts (its checkpoint is on disk)
        step = loop.grpo_step

        def dying_step(*args, **kw):
            if args[8] == KILL_AT:  # the iteration
                os._exit(17)
            return step(*args, **kw)

        loop.grpo_step = dying_step
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    config = paren_config(iterations=ITERATIONS, checkpoint_every=1, prompts_per_step=2, group_size=4)
    store = home if rank == 0 else f"{home}-rank{rank}-{phase}"  # process 1: a fresh scratch store every start
    run = loop.train_grpo(config, model=model, tokenizer=tok, task=ParenTask(), home=store, progress=False)
    base = dict(tiny_random_qwen2(len(tok), seed=0).named_parameters())
    torch.save({"params": {k: v.detach().clone() for k, v in model.named_parameters()},
                "trained": any(not torch.equal(v, base[k]) for k, v in model.named_parameters()),
                "complete": run.is_complete()}, f"{out}.{rank}")
    leave_process_group()


def _launch(tmp_path: Path, home: Path, phase: str) -> list[dict] | None:
    """Both processes' saved results, or None when they were killed."""
    out = tmp_path / f"{phase}.out"
    init = f"file://{tmp_path / f'rendezvous-{phase}'}"
    try:
        mp.spawn(_worker, args=(2, init, str(home), phase, str(out)), nprocs=2, join=True)
    except mp.ProcessExitedException as err:
        assert phase == "killed" and err.exit_code == 17, err
        return None
    return [torch.load(f"{out}.{r}") for r in range(2)]


@pytest.mark.slow
def test_two_killed_processes_resume_together_and_a_complete_run_ends_both(tmp_path):
    straight = _launch(tmp_path, tmp_path / "straight", "straight")
    assert _launch(tmp_path, tmp_path / "resumed", "killed") is None
    assert sorted(p.name for p in (tmp_path / "resumed").glob("grpo-*/checkpoints/*")) == ["step-000001.pt",
                                                                                           "step-000002.pt"]
    resumed = _launch(tmp_path, tmp_path / "resumed", "resumed")
    for rank in range(2):
        for name, want in straight[0]["params"].items():
            assert torch.equal(resumed[rank]["params"][name], want), (rank, name)
            assert torch.equal(straight[rank]["params"][name], want), (rank, name)
    assert resumed[0]["complete"] and resumed[0]["trained"] and resumed[1]["trained"]
    again = _launch(tmp_path, tmp_path / "resumed", "again")  # complete: both return at once, neither trains
    assert again[0]["complete"] and not again[0]["trained"] and not again[1]["trained"]
