"""ES step speed, side by side in one run (a script, not a test). One command per benchmark:

    .venv/bin/python benchmarks/bench_es.py overhead   # sequential ES step / (N x one plain greedy evaluation)
    .venv/bin/python benchmarks/bench_es.py speedup    # batched vs sequential population at N = 8, 16, 32
    .venv/bin/python benchmarks/bench_es.py flops      # achieved model FLOP/s of a batched step / 1-thread fp32 peak
    .venv/bin/python benchmarks/bench_es.py memory     # peak RSS of an ES step / plain inference of the same batch
    .venv/bin/python benchmarks/bench_es.py lowrank    # full-rank batched vs low-rank (EGGROLL) population step, N=32

Default base `qwen2-s-habit` (pretrained into $ESREASON_HOME on first use), Countdown train prompts, antithetic
populations, greedy decoding, one thread. Timings (process CPU time) alternate the compared paths and keep each path's
best of `--repeats`, so a loaded machine slows both alike; every line ends with the ratio against the issue's goal.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import threading
import time

import numpy as np
import torch

GOALS = {"overhead": "<= 1.03", "speedup": ">= 4 at N=32", "flops": ">= 0.40", "memory": "<= 1.10",
         "lowrank": "none (an ablation)"}


def _inputs(model_name: str, prompts: int):
    from esreason_lib.models.load import load_model
    from esreason_lib.models.zoo import get_spec
    from esreason_lib.tasks import get_task

    model, tok = load_model(model_name, device="cpu", dtype=torch.float32, progress=False)
    task = get_task("countdown", **get_spec(model_name).task_kwargs())
    return model, tok, task, task.examples("train", n=prompts, seed=0)


def _population(n: int, sigma: float, model):
    from esreason_lib.es.config import ESConfig
    from esreason_lib.es.core import ES

    es = ES(ESConfig(population_size=n, antithetic=True, sigma=sigma), model)
    return es, es.ask()


def _best(fns: dict, repeats: int) -> dict:
    """Best CPU time (`time.process_time`: one thread, so the wall time on an idle machine, and less inflated
    by other processes on a loaded one) of each callable over `repeats` rounds, alternating within a round."""
    best = {k: float("inf") for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - t0)
    return best


def overhead(args) -> list[str]:
    """Sequential ES step (population evaluation + update) against N plain greedy evaluations."""
    from esreason_lib.es.backends.base import score_examples
    from esreason_lib.es.backends.sequential import SequentialBackend
    from esreason_lib.es.noise import perturbed
    from esreason_lib.params import named_params

    model, tok, task, ex = _inputs(args.model, args.prompts)
    es, pop = _population(args.n, args.sigma, model)
    seq = SequentialBackend(task, tok)
    plain = lambda: score_examples(model, tok, task, ex, greedy=True, temperature=1.0,  # noqa: E731
                                   max_new_tokens=task.max_new_tokens, seed=0)
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def step():
        ev = seq(model, pop, ex, iteration=0)
        es.tell(pop, ev.rewards)
        model.load_state_dict(state)  # the next round steps from the same weights
        es.iteration = 0

    def perturb_restore():  # what the sequential step adds besides its N generations (and their differing lengths)
        params = named_params(model)
        for s, sign in zip(pop.seeds.tolist(), pop.signs.tolist()):
            with perturbed(params, s, sign, args.sigma):
                pass
        es.tell(pop, np.zeros(len(pop)) + np.arange(len(pop)))
        model.load_state_dict(state)
        es.iteration = 0

    t = _best({"plain": plain, "step": step, "noise": perturb_restore}, args.repeats)
    ratio = t["step"] / (args.n * t["plain"])
    pure = (args.n * t["plain"] + t["noise"]) / (args.n * t["plain"])
    return [f"| overhead | sequential ES step (N={args.n}, P={len(ex)}) / (N x plain greedy eval) | "
            f"{t['step']:.3f} s / ({args.n} x {t['plain'] * 1e3:.1f} ms) | **{ratio:.3f}** | {GOALS['overhead']} |",
            f"| overhead | of which perturb + restore of N members and the update: (N x plain + that) / (N x plain) | "
            f"{t['noise'] * 1e3:.0f} ms | **{pure:.3f}** | {GOALS['overhead']} |"]


def speedup(args) -> list[str]:
    """Batched vs sequential population evaluation at several N; checks the rewards are identical."""
    from esreason_lib.es.backends.batched import BatchedBackend
    from esreason_lib.es.backends.sequential import SequentialBackend

    model, tok, task, ex = _inputs(args.model, args.prompts)
    seq, bat = SequentialBackend(task, tok), BatchedBackend(task, tok)
    rows = []
    for n in args.populations:
        _, pop = _population(n, args.sigma, model)
        out = {}
        t = _best({"sequential": lambda: out.__setitem__("s", seq(model, pop, ex, iteration=0)),
                   "batched": lambda: out.__setitem__("b", bat(model, pop, ex, iteration=0))}, args.repeats)
        same = np.array_equal(out["s"].rewards, out["b"].rewards) and np.array_equal(out["s"].correct, out["b"].correct)
        rows.append(f"| speedup | sequential / batched population (N={n}, P={len(ex)}); rewards identical: {same} | "
                    f"{t['sequential']:.3f} s / {t['batched']:.3f} s | **{t['sequential'] / t['batched']:.2f}x** | "
                    f"{GOALS['speedup']} |")
    return rows


def lowrank(args) -> list[str]:
    """A full-rank batched ES step (population evaluation + update) against a low-rank one (`es_lowrank`, rank
    `--rank`) on the same prompts and member seeds, at the largest N of `--populations`."""
    from esreason_lib.es.backends.batched import BatchedBackend
    from esreason_lib.es.backends.lowrank import LowRankBackend
    from esreason_lib.es.config import ESConfig
    from esreason_lib.es.core import ES

    model, tok, task, ex = _inputs(args.model, args.prompts)
    n, state = max(args.populations), {k: v.clone() for k, v in model.state_dict().items()}
    backends = {"full": BatchedBackend(task, tok),
                "lowrank": LowRankBackend(task, tok, rank=args.rank)}
    es = {k: ES(ESConfig(population_size=n, antithetic=True, sigma=args.sigma, noise=k, rank=args.rank), model)
          for k in backends}
    pop = es["full"].ask()  # the same seeds for both

    def step(kind):
        es[kind].tell(pop, backends[kind](model, pop, ex, iteration=0).rewards)
        model.load_state_dict(state)  # the next round steps from the same weights
        es[kind].iteration = 0

    t = _best({k: (lambda k=k: step(k)) for k in backends}, args.repeats)
    return [f"| lowrank | full-rank batched / low-rank (r={args.rank}) ES step (N={n}, P={len(ex)}, evaluation + "
            f"update) | {t['full']:.3f} s / {t['lowrank']:.3f} s | **{t['full'] / t['lowrank']:.2f}x** | "
            f"{GOALS['lowrank']} |"]


def _peak_matmul_flops(size: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = _best({"mm": lambda: a @ b}, repeats)["mm"]
    return 2 * size**3 / best


def flops(args) -> list[str]:
    """Model FLOPs of a batched population step (counted by torch's FlopCounterMode) per second of its wall
    time, against the best FLOP/s of a 2048^2 fp32 matmul on the same thread."""
    from torch.utils.flop_counter import FlopCounterMode

    from esreason_lib.es.backends.batched import BatchedBackend

    model, tok, task, ex = _inputs(args.model, args.prompts)
    bat = BatchedBackend(task, tok)
    _, pop = _population(max(args.populations), args.sigma, model)
    with FlopCounterMode(display=False) as counter:
        bat(model, pop, ex, iteration=0)
    total = counter.get_total_flops()
    peak = _peak_matmul_flops()
    step = _best({"step": lambda: bat(model, pop, ex, iteration=0)}, args.repeats)["step"]
    achieved = total / step
    return [f"| flops | batched step (N={len(pop)}, P={len(ex)}): {total / 1e9:.2f} GFLOP in {step:.3f} s vs fp32 "
            f"2048^2 matmul | {achieved / 1e9:.1f} / {peak / 1e9:.1f} GFLOP/s | **{achieved / peak:.3f}** | "
            f"{GOALS['flops']} |"]


def _rss_child(args) -> None:
    """(in a subprocess) Run one `--rss-of` workload and print the process's peak RSS in MiB."""
    from esreason_lib.es.backends.base import score_examples
    from esreason_lib.es.backends.batched import BatchedBackend
    from esreason_lib.es.backends.sequential import SequentialBackend

    model, tok, task, ex = _inputs(args.model, args.prompts)
    n = max(args.populations)
    es, pop = _population(n, args.sigma, model)
    before, peak, running = _rss_mib(), [0.0], [True]

    def sample():  # the process's loading peak (ru_maxrss) hides the step's, so sample RSS during the step
        while running[0]:
            peak[0] = max(peak[0], _rss_mib())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    if args.rss_of == "plain":  # the same N x P rows, the unperturbed model
        score_examples(model, tok, task, ex * n, greedy=True, temperature=1.0, max_new_tokens=task.max_new_tokens,
                       seed=0)
    else:
        backend = (BatchedBackend if args.rss_of == "batched" else SequentialBackend)(task, tok)
        es.tell(pop, backend(model, pop, ex, iteration=0).rewards)
    running[0] = False
    sampler.join()
    print(before, max(peak[0], _rss_mib()))


def _rss_mib() -> float:
    """The current resident set size of this process in MiB."""
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20


def memory(args) -> list[str]:
    """Peak RSS of one ES step (batched and sequential), each in a fresh process, against plain greedy inference
    of the same N x P rows by the unperturbed model."""
    base = [sys.executable, __file__, "memory", "--model", args.model, "--prompts", str(args.prompts), "--sigma",
            str(args.sigma), "--populations", str(max(args.populations))]
    rss = {k: [float(v) for v in subprocess.run(base + ["--rss-of", k], capture_output=True, text=True,
                                                 check=True).stdout.split()[-2:]]
           for k in ("plain", "batched", "sequential")}  # (RSS before, peak RSS during) in MiB
    n, (_, plain) = max(args.populations), rss["plain"]
    return [f"| memory | peak RSS during a {k} ES step (N={n}, P={args.prompts}) / during plain inference of the "
            f"{n} x {args.prompts} rows (growth over the loaded process: {rss[k][1] - rss[k][0]:.0f} vs "
            f"{plain - rss['plain'][0]:.0f} MiB) | {rss[k][1]:.0f} / {plain:.0f} MiB | **{rss[k][1] / plain:.3f}** | "
            f"{GOALS['memory']} |" for k in ("batched", "sequential")]


BENCHMARKS = {"overhead": overhead, "speedup": speedup, "flops": flops, "memory": memory, "lowrank": lowrank}
HEADER = "| benchmark | what | measured | ratio | goal |\n|---|---|---|---:|---|"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", choices=sorted(BENCHMARKS))
    ap.add_argument("--model", default="qwen2-s-habit")
    ap.add_argument("--prompts", type=int, default=128, help="P: prompts per ES step")
    ap.add_argument("--n", type=int, default=16, help="N of the overhead benchmark")
    ap.add_argument("--populations", type=int, nargs="+", default=[8, 16, 32], help="N values of speedup")
    ap.add_argument("--sigma", type=float, default=1e-2, help="the tiny preset's sigma")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rank", type=int, default=1, help="r of the lowrank benchmark")
    ap.add_argument("--rss-of", choices=["plain", "batched", "sequential"], help=argparse.SUPPRESS)
    return ap


def print_rows(benchmarks: dict, args) -> None:
    """Run `benchmarks[args.which](args)` on one thread and print its rows under the shared table header (every
    bench module's main)."""
    torch.set_num_threads(1)
    print(HEADER)
    for line in benchmarks[args.which](args):
        print(line, flush=True)


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    if args.rss_of:
        torch.set_num_threads(1)
        return _rss_child(args)
    print_rows(BENCHMARKS, args)


if __name__ == "__main__":
    main()
