"""The fast population path, threads and training cost, side by side in one run (a script, not a test):

    .venv/bin/python benchmarks/bench_fast.py fast      # sequential / fast and native population (N = 8, 16, 32)
    .venv/bin/python benchmarks/bench_fast.py flops     # model FLOP/s of a fast, native step / 1-thread fp32 peak
    .venv/bin/python benchmarks/bench_fast.py threads   # 1 vs 2 torch threads: ES step, GRPO sampling and backward
    .venv/bin/python benchmarks/bench_fast.py training  # a tiny-preset ES (batched, fast) and GRPO iteration
    .venv/bin/python benchmarks/bench_fast.py evaluation  # one tiny evaluation: model modules vs fused forward
    .venv/bin/python benchmarks/bench_fast.py powered_training  # one run of each kind in the powered plan

Same inputs as `bench_es.py` (qwen2-s-habit, 128 Countdown train prompts, antithetic populations, greedy, one
thread unless stated). The `threads` rows compare wall time (process CPU time counts both threads), so they need
an otherwise idle machine; `training` times `--iterations` iterations of each run and scales them to the preset's
150 (checkpoints and the final save excluded).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from bench_es import _best, _inputs, _peak_matmul_flops, _population

GOALS = {"fast": ">= 4 at N=32; rows >= 0.995, Spearman >= 0.99", "flops": ">= 0.40",
         "threads": "adopt 2 threads if > 1", "training": "none (a cost)"}


def fast(args) -> list[str]:
    """Sequential vs the fast and native population paths at each N (timed alternately in one round), with each
    path's agreement with the sequential one."""
    from esreason_lib.es.backends.fast import FastBackend, NativeBackend, agreement
    from esreason_lib.es.backends.sequential import SequentialBackend
    from esreason_lib.es.noise import perturbed
    from esreason_lib.models.generation import Sampling, generate
    from esreason_lib.params import named_params

    model, tok, task, ex = _inputs(args.model, args.prompts)
    seq = SequentialBackend(task, tok)
    paths = {"fast": FastBackend(task, tok), "native": NativeBackend(task, tok)}
    rows = []
    for n in args.populations:
        _, pop = _population(n, args.sigma, model)
        out = {}
        fns = {"sequential": lambda: out.__setitem__("sequential", seq(model, pop, ex, iteration=0))}
        fns |= {k: (lambda k=k, b=b: out.__setitem__(k, b(model, pop, ex, iteration=0))) for k, b in paths.items()}
        t = _best(fns, args.repeats)
        reference = []
        for s, sign in zip(pop.seeds.tolist(), pop.signs.tolist()):  # the sequential path's completions
            with perturbed(named_params(model), s, sign, args.sigma):
                reference.append(generate(model, tok, [task.prompt(e, tok) for e in ex],
                                          Sampling(greedy=True, max_new_tokens=task.max_new_tokens),
                                          stop=task.stop).completions)
        for k, b in paths.items():
            same, rho = agreement(b.completions(model, pop, ex), reference, out[k].rewards, out["sequential"].rewards)
            rows.append(f"| fast | sequential / {k} population (N={n}, P={len(ex)}); completions equal on {same:.4f} "
                        f"of rows, member rewards Spearman {rho:.4f} | {t['sequential']:.3f} s / {t[k]:.3f} s | "
                        f"**{t['sequential'] / t[k]:.2f}x** | {GOALS['fast']} |")
    return rows


def flops(args) -> list[str]:
    """Model FLOPs of a population step (counted on the fast path, whose attention is torch matmuls too) per
    second of the fast and the native step's CPU time, against the fp32 matmul peak."""
    from torch.utils.flop_counter import FlopCounterMode

    from esreason_lib.es.backends.fast import FastBackend, NativeBackend

    model, tok, task, ex = _inputs(args.model, args.prompts)
    paths = {"fast": FastBackend(task, tok), "native": NativeBackend(task, tok)}
    _, pop = _population(max(args.populations), args.sigma, model)
    with FlopCounterMode(display=False) as counter:
        paths["fast"](model, pop, ex, iteration=0)
    total, peak = counter.get_total_flops(), _peak_matmul_flops()
    steps = _best({k: (lambda b=b: b(model, pop, ex, iteration=0)) for k, b in paths.items()}, args.repeats)
    return [f"| flops | {k} step (N={len(pop)}, P={len(ex)}): {total / 1e9:.2f} GFLOP in {steps[k]:.3f} s vs fp32 "
            f"2048^2 matmul | {total / steps[k] / 1e9:.1f} / {peak / 1e9:.1f} GFLOP/s | "
            f"**{total / steps[k] / peak:.3f}** | {GOALS['flops']} |" for k in paths]


def threads(args) -> list[str]:
    """Wall time at 1 and 2 torch threads (alternated, best of the repeats) of a batched and a fast ES population
    step (N=16, the tiny preset's), GRPO sampling of 128 x 8 completions, and their logprob forward + backward."""
    from esreason_lib.es.backends.batched import BatchedBackend
    from esreason_lib.es.backends.fast import FastBackend
    from esreason_lib.models.generation import Sampling, completion_logprobs, generate

    model, tok, task, ex = _inputs(args.model, args.prompts)
    _, pop = _population(16, args.sigma, model)
    bat, fst = BatchedBackend(task, tok), FastBackend(task, tok)
    prompts = [task.prompt(e, tok) for e in ex]
    sampling = Sampling(max_new_tokens=task.max_new_tokens)
    sample = lambda: generate(model, tok, prompts, sampling, n=8, stop=task.stop)  # noqa: E731
    ro = sample()

    def backward():
        logp, _ = completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
        logp.sum().backward()
        model.zero_grad()

    fns = {"batched ES step (N=16)": lambda: bat(model, pop, ex, iteration=0),
           "fast ES step (N=16)": lambda: fst(model, pop, ex, iteration=0),
           "GRPO sampling (128 x 8)": sample, "GRPO logprobs + backward (128 x 8)": backward}
    best = {(k, n): float("inf") for k in fns for n in (1, 2)}
    for _ in range(args.repeats):
        for k, fn in fns.items():
            for n in (1, 2):
                torch.set_num_threads(n)
                t0 = time.perf_counter()
                fn()
                best[k, n] = min(best[k, n], time.perf_counter() - t0)
    torch.set_num_threads(1)
    return [f"| threads | {k}: wall time at 1 / 2 threads | {best[k, 1]:.3f} s / {best[k, 2]:.3f} s | "
            f"**{best[k, 1] / best[k, 2]:.2f}x** | {GOALS['threads']} |" for k in fns]


def training(args) -> list[str]:
    """Seconds per iteration (median of `--iterations`, from the runs' time/step_s) of the tiny
    preset's ES run (batched and fast backends) and GRPO run, and that scaled to the preset's iterations."""
    from esreason_lib.es.loop import train_es
    from esreason_lib.grpo.loop import train_grpo
    from esreason_lib.paper.studies.presets import get_preset

    preset, rows = get_preset("tiny"), []
    runs = {"ES (backend=batched)": (train_es, dataclasses.replace(preset.es, backend="batched")),
            "ES (backend=fast)": (train_es, dataclasses.replace(preset.es, backend="fast")),
            "GRPO": (train_grpo, preset.grpo)}
    for label, (train, config) in runs.items():
        with tempfile.TemporaryDirectory() as home:
            short = dataclasses.replace(config, iterations=args.iterations, checkpoint_every=0)
            t0 = time.perf_counter()
            run = train(short, home=home, progress=False)
            wall = (time.perf_counter() - t0) / args.iterations
            per = float(np.median(run.metrics()["time/step_s"].dropna()))
        rows.append(f"| training | tiny {label}: s / iteration (median of {args.iterations}; with loading and "
                    f"saving {wall:.2f}) x {config.iterations} iterations | {per:.2f} s x {config.iterations} | "
                    f"**{per * config.iterations / 60:.1f} min** | {GOALS['training']} |")
    return rows


def evaluation(args) -> list[str]:
    """One evaluation of the tiny preset's base as notebook 01 runs it (its test and selection problems, 64 samples
    at T = 0.6, and greedy), with the model's modules and with the fused forward, and how far the two agree."""
    from esreason_lib.evaluation import evaluate
    from esreason_lib.models.load import load_model
    from esreason_lib.paper.studies.comparison import evaluation_spec
    from esreason_lib.paper.studies.presets import get_preset
    from esreason_lib.tasks import get_task

    preset = get_preset("tiny")
    spec = evaluation_spec(preset)
    task = get_task(preset.task, **preset.test_task_kwargs())
    examples = task.examples("test", n=spec.n_problems, seed=spec.seed)
    model, tok = load_model(preset.base_model, device="cpu", progress=False)
    out = {}

    def run(forward):
        out[forward] = evaluate(model, tok, task, examples, dataclasses.replace(spec, forward=forward), progress=False)

    t = _best({"hf": lambda: run("hf"), "fused": lambda: run("fused")}, args.repeats)
    hf, fused = out["hf"].table, out["fused"].table
    moved = int((hf["c"] - fused["c"]).abs().sum())
    same = float(np.mean([a == b for a, b in zip(out["hf"].samples["answer"], out["fused"].samples["answer"])]))
    return [f"| evaluation | tiny evaluation (P={len(examples)} problems x {spec.n_samples} samples at "
            f"T={spec.temperature:g} + greedy), model modules / fused forward; sampled answers equal on {same:.4f}, "
            f"correct samples moved {moved} of {int(hf['c'].sum())} | {t['hf']:.2f} s / {t['fused']:.2f} s | "
            f"**{t['hf'] / t['fused']:.2f}x** | none (a cost) |"]


def _kind(config) -> str:
    """A training config's kind in a preset's plan: method, model, population or group, prompts per step."""
    from esreason_lib.es.config import ESConfig

    if isinstance(config, ESConfig):
        noise = "" if config.noise == "full" else f", {config.noise} noise"
        return f"ES {Path(config.model).name} N={config.population_size} P={config.prompts_per_step}{noise}"
    return f"GRPO {Path(config.model).name} G={config.group_size} P={config.prompts_per_step}"


def powered_training(args) -> list[str]:
    """One training run of each kind in the `powered` preset's plan (`plan.training_plan`: notebooks 01 and 06),
    timed over `--iterations` iterations and scaled to the run's own iteration count, and how many runs of that
    kind the plan holds (notebook 02's trajectories and 03's sequence stages are not in the plan)."""
    from esreason_lib.es.config import ESConfig
    from esreason_lib.es.loop import train_es
    from esreason_lib.grpo.loop import train_grpo
    from esreason_lib.paper.plan import training_plan
    from esreason_lib.paper.studies.presets import get_preset

    kinds: dict[str, list] = {}
    for config in training_plan(get_preset("powered")):
        kinds.setdefault(_kind(config), []).append(config)
    rows = []
    for label, configs in kinds.items():
        config = configs[0]
        train = train_es if isinstance(config, ESConfig) else train_grpo
        with tempfile.TemporaryDirectory() as home:
            run = train(dataclasses.replace(config, iterations=args.iterations, checkpoint_every=0), home=home,
                        progress=False)
            per = float(np.median(run.metrics()["time/step_s"].dropna()))
        rows.append(f"| training | powered {label}: s / iteration (median of {args.iterations}) x "
                    f"{config.iterations} iterations; {len(configs)} such runs in the plan | "
                    f"{per:.2f} s x {config.iterations} | **{per * config.iterations / 60:.1f} min** | "
                    f"{GOALS['training']} |")
    return rows


BENCHMARKS = {"fast": fast, "flops": flops, "threads": threads, "evaluation": evaluation, "training": training,
              "powered_training": powered_training}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", choices=sorted(BENCHMARKS))
    ap.add_argument("--model", default="qwen2-s-habit")
    ap.add_argument("--prompts", type=int, default=128, help="P: prompts per ES step")
    ap.add_argument("--populations", type=int, nargs="+", default=[8, 16, 32], help="N values of fast")
    ap.add_argument("--sigma", type=float, default=1e-2, help="the tiny preset's sigma")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=4, help="iterations timed by training")
    return ap


def main(argv=None) -> None:
    from bench_es import print_rows

    print_rows(BENCHMARKS, parser().parse_args(argv))


if __name__ == "__main__":
    main()
