"""vLLM against the library's own generation on the same prompts, side by side (run in .venv-vllm: `make test-vllm`).

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python benchmarks/bench_vllm.py

Greedy completions of `--prompts` Countdown train prompts with the zoo's `qwen2-m` (the task's 24-token budget and
stop string): wall seconds and completions/s for `generation.generate` (one batch of all prompts) and for the
vLLM engine (`es_vllm.VLLMBackend.complete`, after a warm-up call that starts the engine), alternating the two
`--repeats` times and keeping each one's best; then one ES population (`--members` antithetic members x
`--step-prompts` prompts) through `SequentialBackend` and `VLLMBackend`, with their rewards compared; then one GRPO
rollout batch (`--groups` prompts x `--group-size` samples at temperature 1) through `generate` and through
`grpo_vllm.VLLMRollouts` (weight sync, sampling and the entropy forward included), best of `--repeats`.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from esreason_lib.es.backends.sequential import SequentialBackend  # noqa: E402
from esreason_lib.es.config import ESConfig  # noqa: E402
from esreason_lib.es.core import ES  # noqa: E402
from esreason_lib.models.generation import Forward, Sampling, generate  # noqa: E402
from esreason_lib.models.load import load_model  # noqa: E402
from esreason_lib.tasks import get_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--step-prompts", type=int, default=32)
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8)
    args = ap.parse_args()
    try:  # after --help: without the vllm extra, one line saying how to install it
        from esreason_lib.es.backends.vllm_engines import VLLMBackend
        from esreason_lib.models.rollouts_vllm import VLLMRollouts
    except ImportError as err:
        raise SystemExit(str(err)) from None
    torch.set_num_threads(1)
    model, tok = load_model("qwen2-m", progress=False)
    task = get_task("countdown")
    prompts = [task.prompt(ex, tok) for ex in task.examples("train", n=args.prompts, seed=0)]
    config = ESConfig(model="qwen2-m", population_size=args.members, antithetic=True, sigma=0.01, seed=0,
                      backend="vllm")
    backend = VLLMBackend.from_config(config, task, tok)
    t0 = time.perf_counter()
    backend.complete(model, prompts[:1], iteration=0)
    start_s = time.perf_counter() - t0
    best = {"library generate": np.inf, "vLLM engine": np.inf}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        ours = generate(model, tok, prompts, Sampling(greedy=True, max_new_tokens=task.max_new_tokens), stop=task.stop,
                        forward=Forward(batch_size=len(prompts))).completions
        best["library generate"] = min(best["library generate"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        theirs = backend.complete(model, prompts, iteration=0)
        best["vLLM engine"] = min(best["vLLM engine"], time.perf_counter() - t0)
    print(f"engine start {start_s:.1f} s; torch threads {torch.get_num_threads()}; load {os.getloadavg()[0]:.2f}")
    print(f"{len(prompts)} greedy completions, equal {sum(a == b for a, b in zip(ours, theirs))}/{len(prompts)}")
    for name, s in best.items():
        print(f"  {name:17s} {s:7.2f} s  {len(prompts) / s:8.1f} completions/s")
    batch = task.examples("train", n=args.step_prompts, seed=1)
    pop = ES(config, model).ask()
    for name, b in (("SequentialBackend", SequentialBackend.from_config(config, task, tok)), ("VLLMBackend", backend)):
        t0 = time.perf_counter()
        ev = b(model, pop, batch, iteration=0)
        s = time.perf_counter() - t0
        print(f"  population {args.members} x {args.step_prompts}: {name:17s} {s:6.2f} s  rewards "
              f"{np.round(ev.rewards, 4).tolist()}")
    backend.close()
    rollouts, kw = VLLMRollouts(), dict(n=args.group_size, temperature=1.0, max_new_tokens=task.max_new_tokens,
                                        stop=task.stop, seed=0)
    rollouts(model, tok, prompts[:1], **kw)  # starts the engine
    best = {"library generate": np.inf, "VLLMRollouts": np.inf}
    for _ in range(args.repeats):
        for name, sample in (("library generate", generate), ("VLLMRollouts", rollouts)):
            t0 = time.perf_counter()
            ro = sample(model, tok, prompts[: args.groups], **kw)
            best[name] = min(best[name], time.perf_counter() - t0)
            rows = len(ro.completions)
    print(f"GRPO rollout batch {args.groups} prompts x {args.group_size} samples (T=1):")
    for name, s in best.items():
        print(f"  {name:17s} {s:7.2f} s  {rows / s:8.1f} completions/s")
    rollouts.close()


if __name__ == "__main__":
    main()
