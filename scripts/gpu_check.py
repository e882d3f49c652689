"""GPU readiness check: one ES step, one GRPO step, (with the `ray` extra) one single-worker Ray ES step and (with
the `vllm` extra) one ES step scored on a vLLM engine and one GRPO step with vLLM rollouts, of the `paper-easy`
preset on a random Qwen2 in bfloat16, with step times and peak GPU memory.

Everything is the preset's own (GSM8K task and reward, bfloat16, greedy ES, GRPO's beta, micro-batching and two
minibatches per rollout) except the sizes: one iteration of `--population` members (ES) or groups of 2 (GRPO) on
`--prompts` prompts of at most `--max-new-tokens` tokens. The model is random, with the character tokenizer:
`--shape tiny` is a tiny Qwen2 (87k parameters, head size 32: plumbing), `--shape qwen2.5-1.5b` has
Qwen2.5-1.5B's architecture (1.3B parameters without the vocabulary: realistic time and memory). The GSM8K rows
are synthetic ("What is a + b?", "#### a+b") and written with the run store to a temporary folder (the machine
needs no data and no network); everything is removed afterwards. `scripts/gpu_check.sh` runs this on a CUDA
machine; `--device cpu` runs the same code anywhere (the test suite does, with the tiny shape).

Prints one line per check (seconds of the step as the trainer logs it, wall seconds including model build and
set-up, peak GPU memory allocated by this process's torch in MiB (a vLLM engine's own memory is not in it), the
step's mean reward) and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

SHAPES = {
    "tiny": dict(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128,
                 tie_word_embeddings=False),  # head size 32: the smallest vLLM's attention kernels take
    "qwen2.5-1.5b": dict(hidden_size=1536, num_layers=28, num_heads=12, num_kv_heads=2, intermediate_size=8960,
                         tie_word_embeddings=True),
}
"""Random model shapes (Qwen2 keyword arguments of `zoo.qwen2_config`)."""


def write_gsm8k(root: Path, n: int = 64) -> None:
    """`n` synthetic GSM8K-format rows ("What is a + b?", "... #### a+b") as `root/gsm8k/{train,test}.jsonl`."""
    (root / "gsm8k").mkdir(parents=True, exist_ok=True)
    pairs = [(a, a % 7 + 2) for a in range(3, 3 + n)]
    rows = [{"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"} for a, b in pairs]
    for split in ("train", "test"):
        (root / "gsm8k" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_model(shape: str, device: str, tokenizer):
    """A random Qwen2 of `shape` in bfloat16 on `device` (seed 0)."""
    import torch
    from transformers import Qwen2ForCausalLM

    from esreason_lib.models.zoo import qwen2_config

    config = qwen2_config(len(tokenizer), max_position_embeddings=4096, **SHAPES[shape])
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 1
    model.generation_config.bos_token_id = None
    return model.eval()


def run_check(name: str, args, make_config, trainer) -> dict:
    """Build a fresh model, run one training iteration of `make_config()` with `trainer`, and measure it."""
    import torch

    from esreason_lib.models.zoo import build_char_tokenizer

    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    tokenizer = build_char_tokenizer()
    model = build_model(args.shape, args.device, tokenizer)
    run = trainer(make_config(), model=model, tokenizer=tokenizer, progress=False)
    if cuda:
        torch.cuda.synchronize()
    row = run.metrics().iloc[-1]
    return {"check": name, "step_s": float(row["time/step_s"]), "wall_s": time.perf_counter() - t0,
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
            "reward_mean": float(row["reward/mean"])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="torch device (default cuda)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--population", type=int, default=4, help="ES members (even: antithetic pairs)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (even: two GRPO minibatches)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray check even when ray is installed")
    parser.add_argument("--no-vllm", action="store_true", help="skip the vLLM checks even when vllm is installed")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="esreason-gpu-check-"))
    os.environ["ESREASON_HOME"], os.environ["ESREASON_DATA"] = str(work / "runs"), str(work / "data")
    write_gsm8k(work / "data")
    import torch

    from esreason_lib.es.loop import train_es
    from esreason_lib.grpo.loop import train_grpo
    from esreason_lib.studies.presets import get_preset

    preset = get_preset("paper-easy")
    small = dict(iterations=1, prompts_per_step=args.prompts, max_new_tokens=args.max_new_tokens, train_size=64,
                 device=args.device, checkpoint_every=0)
    checks = [("es", lambda: preset.config("es", population_size=args.population, **small), train_es),
              ("grpo", lambda: preset.config("grpo", group_size=2, minibatch_size=max(1, args.prompts // 2),
                                             **small), train_grpo)]
    try:
        import ray
    except ImportError:
        ray = None
        print("gpu_check: ray is not installed: the Ray check is skipped (pip install -e '.[ray]')")
    if ray is not None and not args.no_ray:
        checks.append(("es-ray-1-worker", lambda: preset.config("es", population_size=args.population,
                                                                backend="ray", workers=1, **small), train_es))
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        print("gpu_check: vllm is not installed: the vLLM checks are skipped (pip install -e '.[vllm]')")
    elif not args.no_vllm:
        checks += [("es-vllm", lambda: preset.config("es", population_size=args.population, backend="vllm",
                                                     **small), train_es),
                   ("grpo-vllm", lambda: preset.config("grpo", group_size=2, minibatch_size=max(1, args.prompts // 2),
                                                       backend="vllm", **small), train_grpo)]
    print(f"gpu_check: torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else "")
          + f", shape {args.shape}, paper-easy: {args.population} members / groups of 2 x {args.prompts} prompts")
    results, failed = [], []
    for name, make_config, trainer in checks:
        try:
            if name.startswith("es-ray"):
                ray.init(num_cpus=2, num_gpus=torch.cuda.device_count() if args.device.startswith("cuda") else 0,
                         include_dashboard=False, ignore_reinit_error=True)
            results.append(run_check(name, args, make_config, trainer))
            r = results[-1]
            memory = "n/a (cpu)" if r["peak_gpu_mib"] is None else f"{r['peak_gpu_mib']:.0f} MiB"
            print(f"  {name:16s} step {r['step_s']:8.2f} s   wall {r['wall_s']:8.2f} s   peak GPU memory {memory}"
                  f"   reward/mean {r['reward_mean']:.3f}")
        except Exception:  # noqa: BLE001 (report every check, then fail)
            failed.append(name)
            print(f"  {name:16s} FAILED\n{traceback.format_exc()}", file=sys.stderr)
        finally:
            if name.startswith("es-ray"):
                ray.shutdown()
    if args.json is not None:
        args.json.write_text(json.dumps({"device": args.device, "shape": args.shape, "results": results,
                                         "failed": failed}, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    print("gpu_check: " + ("ok" if not failed else f"FAILED: {', '.join(failed)}"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
