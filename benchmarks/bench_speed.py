"""Issue 34's speed figures, side by side in one run (a script, not a test):

    .venv/bin/python benchmarks/bench_speed.py ratio          # plain batched inference of N x P rows / population step
    .venv/bin/python benchmarks/bench_speed.py grpo           # a tiny-preset GRPO iteration: preset vs speed options
    .venv/bin/python benchmarks/bench_speed.py snapshots      # evaluating a set of snapshots: preset vs speed options
    .venv/bin/python benchmarks/bench_speed.py across_models  # the fused forward per model with 1, 4, 8 models batched

With no argument, every benchmark in turn. Same inputs as `bench_es.py` (qwen2-s-habit, Countdown train prompts,
antithetic populations, one thread). Timings are process CPU time, the compared paths alternated and each path's best of
`--repeats` kept.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses

import numpy as np
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
    from esreason_lib.models.generation import Forward, Sampling, generate

    model, tok, task, ex = _inputs(args.model, args.prompts)
    prompts = [task.prompt(e, tok) for e in ex]
    paths = {"fast": (FastBackend(task, tok), "fused"),
             "native": (NativeBackend(task, tok), "native"),
             f"low-rank r={args.rank}": (LowRankBackend(task, tok, rank=args.rank), "hf")}
    rows = []
    for n in args.populations:
        _, full = _population(n, args.sigma, model)
        low = ES(ESConfig(population_size=n, antithetic=True, sigma=args.sigma, noise="lowrank", rank=args.rank),
                 model).ask()
        fns = {}
        for label, (backend, forward) in paths.items():
            pop = low if label.startswith("low-rank") else full
            fns[label] = lambda b=backend, p=pop: b(model, p, ex, iteration=0)
            fns[f"plain {forward}"] = lambda f=forward: generate(
                model, tok, prompts * n, Sampling(greedy=True, max_new_tokens=task.max_new_tokens), stop=task.stop,
                forward=Forward(kind=f, batch_size=n * len(prompts)))
        t = _best(fns, args.repeats)
        for label, (_, forward) in paths.items():
            plain, step = t[f"plain {forward}"], t[label]
            rows.append(f"| ratio | plain greedy inference of the N x P rows ({forward} forward) / {label} population "
                        f"step (N={n}, P={len(ex)}) | {plain:.3f} s / {step:.3f} s | **{plain / step:.3f}** | "
                        f"{GOALS['ratio']} |")
    return rows


GRPO_PATHS = {"before": dict(forward="hf", sampler="multinomial", share_prefixes=False, shared_prompts=False),
              "fused + shared prefixes and prompts + inverse-cdf (tiny's path)": dict(
                  forward="fused", share_prefixes=True, shared_prompts=True, sampler="inverse-cdf"),
              "native + shared prompts": dict(forward="native", shared_prompts=True),
              "native + shared prefixes and prompts": dict(forward="native", share_prefixes=True, shared_prompts=True),
              "native + shared prefixes and prompts + inverse-cdf": dict(forward="native", share_prefixes=True,
                                                                        shared_prompts=True, sampler="inverse-cdf")}
"""The GRPO iterations compared: before (rollouts on the model's modules, `torch.multinomial`, every row's prompt
forwarded in the update: the code path of 094992b, issue 34's "today", still `powered`'s and the frontier's), the
tiny preset's path since (`presets._FAST_PATHS`) and the other speed options."""


def grpo(args) -> list[str]:
    """A tiny-preset GRPO iteration (`grpo_step`: 128 prompts x 8 samples, the update, scoring) as the preset runs
    it and with the speed options of `GRPO_PATHS` (`GRPOConfig.forward`, `shared_prompts`, `share_prefixes`,
    `sampler`)."""
    from esreason_lib.grpo.loop import grpo_step, rollout_sampler
    from esreason_lib.paper.studies.presets import get_preset

    base = dataclasses.replace(get_preset("tiny").grpo, model=args.model)
    model, tok, task, ex = _inputs(args.model, max(args.prompts, base.prompts_per_step))
    prompts = [task.prompt(e, tok) for e in ex]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = {}

    def step(path):
        config = dataclasses.replace(base, **{**GRPO_PATHS["before"], **GRPO_PATHS[path]})  # unset options: before's
        opt = torch.optim.AdamW(model.parameters(), lr=config.lr)
        metrics[path] = grpo_step(model, None, opt, tok, task, ex, prompts, config, 0,
                                  rollout=rollout_sampler(config))
        model.load_state_dict(state)  # every round steps from the same weights

    t = _best({path: (lambda p=path: step(p)) for path in GRPO_PATHS}, args.repeats)
    m0 = metrics["before"]
    return [f"| grpo | tiny GRPO iteration (P={base.prompts_per_step}, G={base.group_size}), before / {path} "
            f"(rollout {m0['time/rollout_s']:.3f} / {m['time/rollout_s']:.3f} s; reward/mean {m0['reward/mean']:.4f} / "
            f"{m['reward/mean']:.4f}; policy/grad_norm {m0['policy/grad_norm']:.4f} / {m['policy/grad_norm']:.4f}) | "
            f"{t['before']:.3f} s / {t[path]:.3f} s | **{t['before'] / t[path]:.2f}x** | {GOALS['grpo']} |"
            for path, m in metrics.items() if path != "before"]


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


SNAPSHOT_PATHS = {"before": ("fused", "multinomial", False),
                  "fused + shared prefixes + inverse-cdf (tiny's path)": ("fused", "inverse-cdf", True),
                  "native": ("native", "multinomial", False),
                  "native + shared prefixes": ("native", "multinomial", True),
                  "native + shared prefixes + inverse-cdf": ("native", "inverse-cdf", True)}
"""(`EvalSpec.forward`, `EvalSpec.sampler`, `EvalSpec.share_prefixes`) of the evaluations compared: before (fused,
multinomial, unshared: the code path of 094992b, still `powered`'s and the frontier's), the tiny preset's path since
(`presets._FAST_PATHS`) and the other speed options."""


def snapshots(args) -> list[str]:
    """Evaluating `--snapshots` models as notebook 01 evaluates each snapshot (the tiny preset's evaluation spec: its
    test and selection problems, 64 samples at T = 0.6, greedy), `--timed` of them timed per path of
    `SNAPSHOT_PATHS` and the time scaled to the whole set; with how far the paths' results agree (correct samples,
    summed over problems and snapshots, and the greedy verdicts)."""
    from esreason_lib.evaluation import evaluate
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

    def run(path):
        forward, sampler, share = SNAPSHOT_PATHS[path]
        path_spec = dataclasses.replace(spec, forward=forward, sampler=sampler, share_prefixes=share)
        out[path] = [evaluate(m, tok, task, examples, path_spec, progress=False) for m in models]

    t = _best({path: (lambda p=path: run(p)) for path in SNAPSHOT_PATHS}, args.repeats)
    scale = args.snapshots / len(models)
    correct = {path: sum(int(r.table["c"].sum()) for r in results) for path, results in out.items()}
    rows = []
    for path in list(SNAPSHOT_PATHS)[1:]:
        greedy = np.mean([(a.table["greedy_correct"] == b.table["greedy_correct"]).mean()
                          for a, b in zip(out["before"], out[path])])
        moved = sum(int((a.table["c"] - b.table["c"]).abs().sum()) for a, b in zip(out["before"], out[path]))
        rows.append(f"| snapshots | evaluation of {args.snapshots} snapshots (scaled from {len(models)}; "
                    f"P={len(examples)} x {spec.n_samples} samples at T={spec.temperature:g} + greedy each), the "
                    f"before (fused, multinomial) / {path}; correct samples {correct['before']} / {correct[path]} of "
                    f"{len(models) * len(examples) * spec.n_samples} (per problem moved {moved}), greedy verdicts "
                    f"equal {greedy:.4f} | {t['before'] * scale:.1f} s / {t[path] * scale:.1f} s | "
                    f"**{t['before'] / t[path]:.2f}x** | {GOALS['snapshots']} |")
    return rows


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
            ids = torch.randint(3, model.config.vocab_size, (n, rows, length),
                                generator=torch.Generator().manual_seed(0))
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
    ap.add_argument("which", nargs="?", default="all", choices=["all", *sorted(BENCHMARKS)],
                    help="one benchmark, or all of them (the default)")
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

    args = parser().parse_args(argv)
    chosen = BENCHMARKS if args.which == "all" else {args.which: BENCHMARKS[args.which]}
    print_rows({"all": lambda a: [row for fn in chosen.values() for row in fn(a)]}, argparse.Namespace(
        **{**vars(args), "which": "all"}))


if __name__ == "__main__":
    main()
