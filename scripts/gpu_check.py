"""GPU readiness check of the paper-easy preset on a random Qwen2 in bfloat16, one section at a time, with wall
seconds and peak GPU memory per section, as text and (`--json`) JSON.

Sections (each reports "ok", "failed" or "skipped: <why>"; the methods: scripts/gpu_check_single.py, and
scripts/gpu_check_multi.py from `centre` on; the model, tokenizer and rows: scripts/gpu_check_fixtures.py):
- versions: torch / transformers / vllm / ray versions, the device record (name, SM count), one `generate`.
- es: one ES iteration of the preset on the library's own backend.
- es-vllm: two ES iterations scored on one vLLM engine (the second replays `tell`), then the engine's weights
  compared with the driver's bit for bit (`weights_checksum`).
- grpo: one GRPO iteration at the preset's micro-batch (minibatches of `--prompts` / 2 prompts x 8 samples = 16
  rows), with `grpo.memory`'s estimate beside the measured peak.
- grpo-vllm: the same with its rollouts sampled on a vLLM engine that gets the policy's weights.
- ray-vllm-kill: two Ray actors with one vLLM engine each on one GPU (gpus_per_worker 0.5); a population is
  scored, one actor is killed, the same population is scored again: the rewards must be equal and the actor
  replaced.
- evaluate: `evaluate` with the paper's 32 samples at T = 0.6 (`--eval-samples`), on a vLLM engine when vllm is
  installed (`backend="vllm"`), else on the library's generation.
- noise: the device's ES noise (`es.noise.counter_normal`, fused) against the CPU reference (eager, on the CPU)
  for the same key and offset, bit for bit (fails on any difference), with the device's rate in normals/s.
- scoring: the centre's bounded log-prob / entropy pass (`models.logprobs.completion_scores` with `SCORING`) over
  `--prompts` rows of `--scoring-tokens` tokens (paper-easy: 2048), beside `logit_bytes`' count.
- centre, sleep-wake, ipc-sync, torchrun, ray-vllm: ES's centre on a vLLM engine at 2048 tokens, vLLM's sleep mode,
  the CUDA IPC weight copy, GRPO on vLLM under `torchrun` with 2 processes, and `ray-vllm` over every visible GPU
  at N = 8 for two iterations (scripts/gpu_check_multi.py's docstring says what each checks).

Skips. A section needing a package that is missing reports "skipped: <package> not installed", and fails the check
unless named in --allow-skip; --no-ray / --no-vllm skips read "disabled". The only stated skip is "needs a CUDA
device" (sleep-wake, ipc-sync and torchrun under `--device cpu`); the closing summary lists every skip with its
reason. `--time-limit S` bounds the whole check: the section running when it expires fails with TimeoutError and
the ones after it fail unrun. `--device cpu` runs every other section at any shape (the test suite runs the tiny
one).

Sizes are small except the model: `--shape tiny` (87k parameters, head size 32: plumbing) or `--shape
qwen2.5-1.5b` (Qwen2.5-1.5B's architecture with its 151,936-token vocabulary, built from the config: nothing is
downloaded). The tokenizer is the character tokenizer, padded with never-encoded filler tokens up to the model's
vocabulary so that any sampled id decodes. GSM8K rows are synthetic ("What is a + b?") and written with the run
store to a temporary folder that is removed afterwards. Peak memory: torch's allocated peak in this process, and on
CUDA the highest memory in use on any visible GPU by every process (sampled: engines, actors and torchrun's
processes included). Exit status 1 when a section fails or is skipped unexpectedly.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from gpu_check_fixtures import SHAPES, VOCAB, build_model, build_tokenizer, installed, write_gsm8k
from gpu_check_multi import Deadline, DeviceMemory, MultiSections
from gpu_check_single import SingleSections


@dataclass(frozen=True)
class Section:
    """One section of the check: what it needs to run rather than skip."""

    name: str
    """The section's name (`--only`, `--allow-skip`); its method is `Checker.s_<name with _ for ->`."""
    needs: tuple[str, ...] = ()
    """Packages it runs on (a missing one: an unexpected skip unless allowed; `--no-<package>`: disabled)."""
    cuda: bool = False
    """True when it needs a CUDA device (skipped under `--device cpu` with the stated reason `CUDA_SKIP`)."""


REGISTRY = (Section("versions"), Section("noise"), Section("scoring"), Section("es"), Section("es-vllm", ("vllm",)),
            Section("grpo"), Section("grpo-vllm", ("vllm",)), Section("ray-vllm-kill", ("vllm", "ray")),
            Section("evaluate"), Section("centre", ("vllm",)), Section("sleep-wake", ("vllm",), cuda=True),
            Section("ipc-sync", ("vllm",), cuda=True), Section("torchrun", ("vllm",), cuda=True),
            Section("ray-vllm", ("vllm", "ray")))
"""Every section, in the order they run."""
SECTIONS = tuple(s.name for s in REGISTRY)
CUDA_SKIP = "skipped: needs a CUDA device"
"""The one stated reason a section may skip without failing the check."""


ALLOW_SKIP_ENV = "GPU_CHECK_ALLOW_SKIP"
"""Environment variable holding the default of --allow-skip (comma-separated sections)."""


def skip_status(section: Section, cuda: bool, disabled: set[str]) -> str | None:
    """Why `section` is skipped ("skipped: ..."), or None when it runs: `CUDA_SKIP` without `cuda`, else the first
    package of its `needs` that is in `disabled` or not installed."""
    if section.cuda and not cuda:
        return CUDA_SKIP
    for package in section.needs:
        if package in disabled:
            return f"skipped: {package} disabled"
        if installed(package) is None:
            return f"skipped: {package} not installed"
    return None


def unexpected_skips(results: list[dict], allowed: set[str]) -> list[str]:
    """The sections of `results` skipped for any reason but `CUDA_SKIP` or a package disabled (--no-ray /
    --no-vllm), other than those in `allowed` (--allow-skip): a check that passes ran every section it was not
    told to skip."""
    return [r["check"] for r in results if r["status"].startswith("skipped")
            and r["status"] != CUDA_SKIP and not r["status"].endswith(" disabled") and r["check"] not in allowed]


def skip_summary(results: list[dict]) -> list[str]:
    """One "section: reason" line per skipped section of `results`."""
    return [f"{r['check']}: {r['status'].removeprefix('skipped: ')}" for r in results
            if r["status"].startswith("skipped")]


def parse_sections(text: str, flag: str) -> set[str]:
    """The set of sections named in the comma-separated `text`; SystemExit naming `flag` for an unknown one."""
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(SECTIONS))
    if unknown:
        raise SystemExit(f"gpu_check: {flag}: unknown section {unknown[0]!r} (sections: {', '.join(SECTIONS)})")
    return names


class Checker(SingleSections, MultiSections):
    """Runs the sections for `args`, one fresh model each, within `args.time_limit`, and collects their results."""

    def __init__(self, args):
        from esreason_lib.paper.studies.presets import get_preset

        self.args, self.cuda = args, args.device.startswith("cuda")
        self.deadline = Deadline(args.time_limit)
        self.preset = get_preset("paper-easy")
        self.small = dict(iterations=1, prompts_per_step=args.prompts, max_new_tokens=args.max_new_tokens,
                          train_size=64, device=args.device, checkpoint_every=0)
        self.tokenizer = build_tokenizer(VOCAB[args.shape])
        self.results: list[dict] = []

    def fresh(self):
        return build_model(self.args.shape, self.args.device, self.tokenizer)

    def run(self, section: Section) -> None:
        """Run `section` (method `s_<name>`) and record its wall time and peak memory, or record why it is skipped
        (`skip_status`) or why it failed (its exception, or the time limit reached before it started)."""
        import torch

        name = section.name
        disabled = {n for n in ("vllm", "ray") if getattr(self.args, f"no_{n}")}
        skipped = skip_status(section, self.cuda, disabled)
        if skipped is not None:
            self.results.append({"check": name, "status": skipped})
            print(f"  {name:14s} {skipped}")
            return
        left = self.deadline.left()
        if left is not None and left <= 0:
            self.results.append({"check": name, "status": "failed", "error": "not run: --time-limit reached"})
            print(f"  {name:14s} FAILED: not run, --time-limit reached", file=sys.stderr)
            return
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        with DeviceMemory(self.cuda) as device:
            try:
                self.deadline.alarm()
                try:
                    out = getattr(self, "s_" + name.replace("-", "_"))()
                finally:
                    self.deadline.disarm()
                status = "ok"
            except Exception:  # noqa: BLE001 (report every section, then fail)
                out, status = {"error": traceback.format_exc()[-2000:]}, "failed"
                print(f"  {name:14s} FAILED\n{out['error']}", file=sys.stderr)
            if self.cuda:
                torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20 if self.cuda else None
        r = {"check": name, "status": status, "wall_s": time.perf_counter() - t0, "peak_gpu_mib": peak,
             "peak_device_mib": device.peak_mib, **out}
        self.results.append(r)
        if status == "ok":
            memory = "n/a (cpu)" if peak is None else f"{peak:.0f} MiB (this process), {device.peak_mib:.0f} MiB in use"
            print(f"  {name:14s} wall {r['wall_s']:8.2f} s   peak GPU memory {memory}   "
                  + "   ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in out.items()))


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    """The check's arguments; SystemExit (argparse's one line) for an unknown section, a size below 1, an odd
    population or a negative time limit."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--device", default="cuda", help="torch device (default cuda)")
    add("--shape", choices=sorted(SHAPES), default="tiny")
    add("--population", type=positive_int, default=4, help="ES members (even: antithetic pairs)")
    add("--prompts", type=positive_int, default=4, help="prompts per step (even: two GRPO minibatches)")
    add("--max-new-tokens", type=positive_int, default=32)
    add("--scoring-tokens", type=positive_int, default=2048, help="completion tokens of the scoring section")
    add("--eval-samples", type=positive_int, default=32, help="samples per problem in `evaluate` (paper: 32)")
    add("--centre-tokens", type=positive_int, default=2048, help="new tokens of the centre section (paper-easy: 2048)")
    add("--centre-rows", type=positive_int, default=64, help="prompts of the centre section (paper-easy: 64)")
    add("--ray-population", type=positive_int, default=8, help="ES members of the ray-vllm section (even)")
    add("--ray-iterations", type=positive_int, default=2, help="ES iterations of the ray-vllm section")
    add("--time-limit", type=float, default=3600.0,
        help="seconds for the whole check (default 3600; 0: none): the section running then fails, later ones unrun")
    add("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    add("--no-ray", action="store_true", help="skip the Ray sections even when ray is installed")
    add("--no-vllm", action="store_true", help="skip the vLLM sections even when vllm is installed")
    add("--json", type=Path, help="also write the results to this file")
    add("--allow-skip", default=os.environ.get(ALLOW_SKIP_ENV, ""),
        help=f"comma-separated sections that may be skipped for a missing package (default ${ALLOW_SKIP_ENV}); any "
             f"other skip but a stated one (needs a CUDA device) fails the check")
    args = parser.parse_args(argv)
    args.only = parse_sections(args.only, "--only")
    for flag in ("population", "ray_population"):
        if getattr(args, flag) % 2:
            parser.error(f"--{flag.replace('_', '-')}: {getattr(args, flag)} is odd (antithetic pairs need an even "
                         f"population)")
    if args.time_limit < 0:
        parser.error(f"--time-limit: {args.time_limit:g} is negative (0: no limit)")
    args.time_limit = args.time_limit or None
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    allowed = parse_sections(args.allow_skip, "--allow-skip")

    work = Path(tempfile.mkdtemp(prefix="esreason-gpu-check-"))
    os.environ["ESREASON_HOME"], os.environ["ESREASON_DATA"] = str(work / "runs"), str(work / "data")
    write_gsm8k(work / "data", n=max(64, args.centre_rows))
    checker = Checker(args)
    print(f"gpu_check: device {args.device}, shape {args.shape}, paper-easy: {args.population} members, "
          f"{args.prompts} prompts, {args.max_new_tokens} new tokens, time limit "
          + ("none" if args.time_limit is None else f"{args.time_limit:g} s"))
    try:
        for section in REGISTRY:
            if section.name in args.only:
                checker.run(section)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    failed = [r["check"] for r in checker.results if r["status"] == "failed"]
    for name in unexpected_skips(checker.results, allowed):
        print(f"  {name:14s} FAILED: skipped (its package is missing) and not in --allow-skip", file=sys.stderr)
        failed.append(name)
    skips = skip_summary(checker.results)
    if args.json is not None:
        args.json.write_text(json.dumps({"device": args.device, "shape": args.shape, "results": checker.results,
                                         "failed": failed, "skipped": skips}, indent=1, default=str))
    if skips:
        print("gpu_check: skipped: " + "; ".join(skips))
    print("gpu_check: " + ("ok" if not failed else f"FAILED: {', '.join(failed)}"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
