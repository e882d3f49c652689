"""`esreason train grpo` with `GRPOConfig.engine = "trl"` on every process of an `accelerate launch`: TRL's
`GRPOTrainer` (`grpo/trl_engine.py`) with DeepSpeed ZeRO-3 or FSDP from configs/accelerate/.

    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml scripts/trl_grpo.py --preset paper-easy

The main process writes the run into the store ($ESREASON_HOME, on a file system every machine sees); the others
read the same base model after it (docs/gpus.md, "GRPO past 1.5B").
"""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    from esreason_lib.cli import main as cli

    argv = sys.argv[1:] if argv is None else list(argv)
    return cli(["train", "grpo", *argv, "--set", "engine='trl'"])


if __name__ == "__main__":
    sys.exit(main())
