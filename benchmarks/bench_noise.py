"""ES noise throughput on this machine, side by side (a script, not a test):

    .venv/bin/python benchmarks/bench_noise.py [--numel 4194304] [--repeats 3] [--threads 1]

One row per generator, in million float32 normals per second, best of `--repeats` after one warm-up draw (the
fused kernel's compilation is timed apart): `torch.randn` (the CPU's ES noise), `counter_normal` fused (one
compiled hashing kernel per chunk: the GPU's ES noise, drawn here on the CPU) and eager (the reference), with the
fused draw's slowdown against `torch.randn` (issue 44 asks for at most 3x) and whether its bits equal the
reference's. Deviations: CPU only (no GPU here); on a loaded machine the three rows share its load, so read the
ratio, not the absolute rates.
"""

from __future__ import annotations

import argparse
import time

import torch

from esreason_lib.es.noise import counter_normal


def best_rate(draw, numel: int, repeats: int) -> float:
    """Million numbers per second of `draw()`, best of `repeats` timed calls after one warm-up."""
    draw()
    best = min(_timed(draw) for _ in range(repeats))
    return numel / best / 1e6


def _timed(draw) -> float:
    t0 = time.perf_counter()
    draw()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=1 << 22)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n = args.numel
    t0 = time.perf_counter()
    fused = counter_normal(7, n, "cpu")
    compile_s = time.perf_counter() - t0
    equal = torch.equal(fused.view(torch.int32), counter_normal(7, n, "cpu", fused=False).view(torch.int32))
    gen = torch.Generator().manual_seed(7)
    rates = {"torch.randn": best_rate(lambda: torch.randn(n, generator=gen), n, args.repeats),
             "counter_normal fused": best_rate(lambda: counter_normal(7, n, "cpu"), n, args.repeats),
             "counter_normal eager": best_rate(lambda: counter_normal(7, n, "cpu", fused=False), n, args.repeats)}
    print(f"noise: {n:,} float32 normals, {args.threads} thread(s); first fused draw (compiling) {compile_s:.1f} s")
    for name, rate in rates.items():
        print(f"  {name:<22} {rate:8.1f} M/s  ({rates['torch.randn'] / rate:5.1f}x torch.randn's time)")
    print(f"  fused bits equal to the eager reference: {equal}")


if __name__ == "__main__":
    main()
