"""`esreason train grpo` on every process of a `torchrun` launch: GRPO's update data parallel (grpo/distributed.py).

    torchrun --nproc-per-node 8 scripts/torchrun_grpo.py --preset paper-easy [train grpo options]

Each process joins the process group (NCCL on CUDA, one GPU per process by LOCAL_RANK; gloo on the CPU) and runs
the same training; `policy_update` then deals each minibatch's micro-batches among the processes and sums their
gradients. Process 0 writes the run into the store ($ESREASON_HOME); the others write into a scratch store that is
removed at exit (their weights equal process 0's), seeing the store's zoo models: pretrain a zoo base model first
(`esreason pretrain NAME`, or one single-process run); hub models load from the Hugging Face cache. Started again
after a failure, every process resumes from process 0's last checkpoint (the others read its file: one machine, or
a filesystem the nodes share), and a run process 0 finds complete ends every process at once
(`grpo.distributed.shared_checkpoint`).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist


def main(argv=None) -> int:
    from esreason_lib.cli import main as cli

    argv = sys.argv[1:] if argv is None else list(argv)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if cuda else "gloo")
    from esreason_lib.paths import run_store_root

    scratch = None
    if dist.get_rank() > 0:  # only process 0 writes the run; the others see the store's zoo models
        home, scratch = run_store_root(), Path(tempfile.mkdtemp(prefix=f"esreason-rank{dist.get_rank()}-"))
        for zoo in home.glob("zoo-*"):
            (scratch / zoo.name).symlink_to(zoo)
        os.environ["ESREASON_HOME"] = str(scratch)
    try:
        return cli(["train", "grpo", *argv])
    finally:
        dist.destroy_process_group()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
