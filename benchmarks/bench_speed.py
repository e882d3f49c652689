"""Issue 34's speed figures, side by side in one run (a script, not a test):

    .venv/bin/python benchmarks/bench_speed.py ratio          # plain batched inference of N x P rows / population step
    .venv/bin/python benchmarks/bench_speed.py grpo           # a tiny-preset GRPO iteration, rollouts hf vs fused/native
    .venv/bin/python benchmarks/bench_speed.py snapshots      # evaluating a set of snapshots: forward fused vs native
    .venv/bin/python benchmarks/bench_speed.py across_models  # the fused forward per model with 1, 4, 8 models batched

Same inputs as `bench_es.py` (qwen2-s-habit, Countdown train prompts, antithetic populations, one thread). Timings
are process CPU time, the compared paths alternated and each path's best of `--repeats` kept.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses

import torch
from bench_es import _best, _inputs, _population

GOALS = {"ratio": ">= 0.9 (EGGROLL: 91%)", "grpo": ">= 1.5", "snapshots": ">= 2", "across_models": "none (a cost)"}


def ratio(args) -> list[str]:
    """(plain greedy inference of the N x P rows by the unperturbed model: one `generate` batch of N x P prompts,
    each prefilled as its own row as a member's must be, with the path's forward) / (the population's evaluation by
    the backend: noise, member weights, decode, scoring), per path and N."""
    from esreason_lib.es.backends.fast import FastBackend, NativeBackend
    from esreason_lib.es.backends.lowrank import LowRankBackend
    from esreason_lib.es.config import ESConfig
    from esreason_lib.es.core import ES
    from esreason_lib.models.generation import generate

    model, tok, task, ex = _inputs(args.model, args.prompts)
    prompts = [task.prompt(e, tok) for e in ex]
    paths = {"fast": (FastBackend(task, tok, sigma=args.sigma), "fused"),
             "native": (NativeBackend(task, tok, sigma=args.sigma), "native"),
             f"low-rank r={args.rank}": (LowRankBackend(task, tok, sigma=args.sigma, rank=args.rank), "hf")}
    rows = []
    for n in args.populations:
        _, full = _population(n, args.sigma, model)
        low = ES(ESConfig(population_size=n, antithetic=True, sigma=args.sigma, noise="lowrank", rank=args.rank),
                 model).ask()
        fns = {}
        for label, (backend, forward) in paths.items():
            pop = low if label.startswith("low-rank") else full
            fns[label] = lambda b=backend, p=pop: b(model, p, ex, iteration=0)
            fns[f"plain {forward}"] = lambda f=forward: generate(model, tok, prompts * n, greedy=True,
                                                                 max_new_tokens=task.max_new_tokens, stop=task.stop,
                                                                 batch_size=n * len(prompts), forward=f)
        t = _best(fns, args.repeats)
        for label, (_, forward) in paths.items():
            plain, step = t[f"plain {forward}"], t[label]
            rows.append(f"| ratio | plain greedy inference of the N x P rows ({forward} forward) / {label} population "
                        f"step (N={n}, P={len(ex)}) | {plain:.3f} s / {step:.3f} s | **{plain / step:.3f}** | "
                        f"{GOALS['ratio']} |")
    return rows


def grpo(args) -> list[str]:
    """A tiny-preset GRPO iteration (`grpo_step`: 128 prompts x 8 samples, the update, scoring) with rollouts on the
    model's modules (`GRPOConfig.forward` "hf", the preset's) and on the fused / native forward."""
    from esreason_lib.grpo.loop import grpo_step, rollout_sampler
    from esreason_lib.paper.studies.presets import get_preset

    base = dataclasses.replace(get_preset("tiny").grpo, model=args.model)
    model, tok, task, ex = _inputs(args.model, max(args.prompts, base.prompts_per_step))
    prompts = [task.prompt(e, tok) for e in ex]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = {}

    def step(forward):
        config = dataclasses.replace(base, forward=forward)
        opt = torch.optim.AdamW(model.parameters(), lr=config.lr)
        metrics[forward] = grpo_step(model, None, opt, tok, task, ex, prompts, config, 0,
                                     rollout=rollout_sampler(config))
        model.load_state_dict(state)  # every round steps from the same weights

    t = _best({f: (lambda f=f: step(f)) for f in ("hf", "fused", "native")}, args.repeats)
    return [f"| grpo | tiny GRPO iteration (P={base.prompts_per_step}, G={base.group_size}), rollouts hf / {f} "
            f"(rollout {metrics['hf']['time/rollout_s']:.3f} / {metrics[f]['time/rollout_s']:.3f} s; reward/mean "
            f"{metrics['hf']['reward/mean']:.4f} / {metrics[f]['reward/mean']:.4f}) | {t['hf']:.3f} s / {t[f]:.3f} s | "
            f"**{t['hf'] / t[f]:.2f}x** | {GOALS['grpo']} |" for f in ("fused", "native")]


def _snapshots(model, count: int, scale: float) -> list:
    """`count` distinct models near `model` (each weight plus `scale` x its std x seeded noise): stand-ins for a
    run's snapshots."""
    out = []
    for i in range(count):
        snap = copy.deepcopy(model)
        gen = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for p in snap.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * (scale * float(p.std()) if p.numel() > 1 else 0.0))
        out.append(snap)
    return out


def snapshots(args) -> list[str]:
    """Evaluating `--snapshots` models as notebook 01 evaluates each snapshot (the tiny preset's evaluation spec: its
    test and selection problems, 64 samples, greedy), `--timed` of them timed per forward and the time scaled to the
    whole set; with how far the forwards' results agree."""
    from esreason_lib.evaluate import evaluate
    from esreason_lib.paper.studies.comparison import evaluation_spec
    from esreason_lib.paper.studies.presets import get_preset
    from esreason_lib.tasks import get_task

    preset = get_preset("tiny")
    spec = evaluation_spec(preset)
    task = get_task(preset.task, **preset.test_task_kwargs())
    examples = task.examples("test", n=spec.n_problems, seed=spec.seed)[: args.problems]
    base, tok, _, _ = _inputs(args.model, 1)
    models = _snapshots(base, args.timed, 0.02)
    out = {}

    def run(forward):
        out[forward] = [evaluate(m, tok, task, examples, n=spec.n_samples, temperature=spec.temperature, ks=spec.ks,
                                 greedy=spec.greedy, seed=spec.seed, progress=False, forward=forward) for m in models]

    t = _best({f: (lambda f=f: run(f)) for f in ("fused", "native")}, args.repeats)
    moved = sum(int((a.table["c"] - b.table["c"]).abs().sum()) for a, b in zip(out["fused"], out["native"]))
    total = sum(int(a.table["c"].sum()) for a in out["fused"])
    scale = args.snapshots / len(models)
    return [f"| snapshots | evaluation of {args.snapshots} snapshots (scaled from {len(models)}; P={len(examples)} x "
            f"{spec.n_samples} samples at T={spec.temperature:g} + greedy each), forward fused (the tiny preset's) / "
            f"native; correct samples moved {moved} of {total} | {t['fused'] * scale:.1f} s / "
            f"{t['native'] * scale:.1f} s | **{t['fused'] / t['native']:.2f}x** | {GOALS['snapshots']} |"]


def across_models(args) -> list[str]:
    """The fused and native forward's cost per model (a prefill of 512 rows of 14 tokens and 20 decode steps, as one
    evaluation chunk of 8 prompts x 64 samples) with 1, 4 and 8 models' weights stacked as members of one forward:
    whether evaluating several models in one batch pays on this machine."""
    from esreason_lib.models.fused_qwen2 import FusedQwen2, KVBuffers, model_weights

    model, _, _, _ = _inputs(args.model, 1)
    one = model_weights(model)
    rows, length, steps = 512, 14, 20
    rows_out = []
    for native in (False, True):
        per = {}
        for n in (1, 4, 8):
            fused = [t.expand(n, *t.shape[1:]).contiguous() if isinstance(t, torch.Tensor)
                     else tuple(x.expand(n, *x.shape[1:]).contiguous() for x in t) for t in one]
            ids = torch.randint(3, model.config.vocab_size, (n, rows, length), generator=torch.Generator().manual_seed(0))
            pos = torch.arange(length).expand(n, rows, length)
            buffers = KVBuffers()

            def decode(fused=fused, ids=ids, pos=pos, buffers=buffers):
                net = FusedQwen2(model, fused, length + steps, buffers=buffers, native=native)
                net(ids, pos, None, None)
                net.length = length
                for s in range(steps):
                    net(ids[:, :, -1:], pos[:, :, -1:] + 1 + s, None, None)
                    net.length += 1

            per[n] = _best({"decode": decode}, args.repeats)["decode"] / n
        name = "native" if native else "fused"
        rows_out.append(f"| across_models | {name} forward per model, 1 model / 8 models batched (4: "
                        f"{per[4]:.3f} s; {rows} rows x {length} prompt tokens + {steps} steps each) | "
                        f"{per[1]:.3f} s / {per[8]:.3f} s | **{per[1] / per[8]:.2f}x** | {GOALS['across_models']} |")
    return rows_out


BENCHMARKS = {"ratio": ratio, "grpo": grpo, "snapshots": snapshots, "across_models": across_models}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", choices=sorted(BENCHMARKS))
    ap.add_argument("--model", default="qwen2-s-habit")
    ap.add_argument("--prompts", type=int, default=128, help="P: prompts per population step")
    ap.add_argument("--populations", type=int, nargs="+", default=[8, 16, 32], help="N values of ratio")
    ap.add_argument("--sigma", type=float, default=1e-2, help="the tiny preset's sigma")
    ap.add_argument("--rank", type=int, default=1, help="r of the low-rank population")
    ap.add_argument("--snapshots", type=int, default=100, help="the set of snapshots the snapshots row scales to")
    ap.add_argument("--timed", type=int, default=4, help="snapshots actually evaluated per forward")
    ap.add_argument("--problems", type=int, default=300, help="problems per snapshot (the tiny spec's 300 at most)")
    ap.add_argument("--repeats", type=int, default=3)
    return ap


def main(argv=None) -> None:
    from bench_es import print_rows

    print_rows(BENCHMARKS, parser().parse_args(argv))


if __name__ == "__main__":
    main()
