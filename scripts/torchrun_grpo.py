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

More processes than GPUs on a node (scripts/gpu_check.py's `torchrun` section on one GPU) need `SHARE_GPU_ENV=1`:
process i then uses GPU i mod count under gloo (NCCL refuses two processes on one GPU) and its LOCAL_RANK is
rewritten to that GPU, which vLLM's external launcher reads; never the way to train (gloo moves every gradient
through the host).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

SHARE_GPU_ENV = "ESREASON_TORCHRUN_SHARE_GPU"
"""Environment variable: "1" lets several processes share a GPU (module docstring)."""


def process_device(local_rank: int, gpus: int, share: bool) -> tuple[int, str]:
    """(GPU index, process-group backend) of the process `local_rank` on a node with `gpus` GPUs: its own GPU under
    NCCL, or with `share`, GPU local_rank mod `gpus` under gloo; ValueError when it has no GPU of its own unshared."""
    if gpus < 1:
        raise ValueError(f"torchrun_grpo: no CUDA device visible to LOCAL_RANK {local_rank}")
    if share:
        return local_rank % gpus, "gloo"
    if local_rank >= gpus:
        raise ValueError(f"torchrun_grpo: LOCAL_RANK {local_rank} has no GPU of its own ({gpus} visible): start at "
                         f"most {gpus} processes per node (or set {SHARE_GPU_ENV}=1 to share, for checks only)")
    return local_rank, "nccl"


def main(argv=None) -> int:
    from esreason_lib.cli import main as cli
    from esreason_lib.grpo.distributed import leave_process_group

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise SystemExit(f"torchrun_grpo: {', '.join(missing)} not set: start it under torchrun, e.g. "
                         "`torchrun --nproc-per-node 2 scripts/torchrun_grpo.py --preset smoke` (single process: "
                         "`esreason train grpo`)")
    backend = "gloo"
    if torch.cuda.is_available():
        gpu, backend = process_device(int(os.environ.get("LOCAL_RANK", 0)), torch.cuda.device_count(),
                                      os.environ.get(SHARE_GPU_ENV) == "1")
        os.environ["LOCAL_RANK"] = str(gpu)  # unchanged unless shared: vLLM's external launcher picks this GPU
        torch.cuda.set_device(gpu)
    dist.init_process_group(backend)
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
        leave_process_group()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
