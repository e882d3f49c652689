"""ES host-side cost per iteration, scaled by parameter count (a script, not a test):

    .venv/bin/python benchmarks/bench_host_cost.py [--sizes 1,4,16] [--drift-every 10] [--check-every 10]
                                                   [--population-s SECONDS]

For weight sets of `--sizes` million bfloat16 parameters (1024 x 1024 tensors) it times, best of `--repeats`:
- drift before: `_drift` as it was (a float64 host copy of every parameter per iteration), on this machine;
- drift now: `models.weights.relative_drift` (float64 on the parameters' device; here the device is the CPU, so the same
  work without the device-to-host copy, which a CPU run does not have) divided by `--drift-every`;
- checksum: `weights_checksum` (blake2b of the bytes, on the host) divided by `--check-every`.
It fits seconds per parameter at the largest size, extrapolates to Qwen2.5-1.5B's 1.54e9 parameters, and, given
`--population-s` (the measured population-scoring seconds of one iteration on the target machine), prints the
host-side share host / (host + population). Deviations: on a GPU the new drift runs on the device (not timed
here: no GPU); the CPU numbers bound the host parts only.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from esreason_lib.models.weights import relative_drift, weights_checksum

QWEN_1P5B = 1.54e9
"""Qwen2.5-1.5B's parameters with its tied 151,936 x 1,536 embedding."""


def drift_before(params: dict, theta0: dict) -> float:
    """The drift as es/loop.py computed it before: a float64 host copy of every parameter each iteration."""
    num = sum(float((p.detach().cpu().double() - theta0[k].double()).pow(2).sum()) for k, p in params.items())
    den = sum(float(t.double().pow(2).sum()) for t in theta0.values())
    return math.sqrt(num / den)


def best(fn, repeats: int) -> float:
    out = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,16", help="million parameters, comma-separated")
    parser.add_argument("--drift-every", type=int, default=10)
    parser.add_argument("--check-every", type=int, default=10)
    parser.add_argument("--population-s", type=float, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    print(f"{'params':>8s} {'drift before':>13s} {'drift now':>10s} {'checksum':>9s}  (s per iteration; now: /"
          f"{args.drift_every} drift, /{args.check_every} checksum)")
    for m in (int(x) for x in args.sizes.split(",")):
        theta0 = {f"w{i}": torch.randn(1024, 1024).to(torch.bfloat16) for i in range(m)}
        params = {k: v + 1e-3 for k, v in theta0.items()}
        before = best(lambda: drift_before(params, theta0), args.repeats)
        now = best(lambda: relative_drift(params, theta0), args.repeats) / args.drift_every
        check = best(lambda: weights_checksum(params), args.repeats) / args.check_every
        n = m * 1024 * 1024
        print(f"{n / 1e6:7.1f}M {before:13.4f} {now:10.4f} {check:9.4f}")
    scale = QWEN_1P5B / n
    host_before, host_now = before * scale, (now + check) * scale
    print(f"extrapolated to 1.54e9 parameters: drift before {host_before:.1f} s per iteration; drift every "
          f"{args.drift_every} + checksum every {args.check_every}: {host_now:.2f} s per iteration on the host "
          f"(a GPU drift runs on the device instead: not measured here)")
    if args.population_s is not None:
        for name, host in (("before", host_before), ("now", host_now)):
            print(f"host-side share {name}: {host / (host + args.population_s):.1%} of an iteration "
                  f"(population {args.population_s:g} s)")


if __name__ == "__main__":
    main()
