"""The multi-process sections of scripts/gpu_check.py (issue 44.7) and the helpers that time and bound them.

- centre: ES's centre on one vLLM engine (`VLLMBackend.score_center`) at `--centre-tokens` new tokens (paper-easy:
  2048) over `--centre-rows` prompts (the preset's 64): the engine's tokens, then the driver's bounded no-grad
  log-prob / entropy pass over them (`models.logprobs.SCORING`); prints the decoded lengths beside `logit_bytes`.
- sleep-wake: a vLLM engine in sleep mode (CUDA only) put to sleep and woken; the device memory sleep freed, and
  the engine's weights equal the driver's after the wake (`Engine.check`) and still decode.
- ipc-sync: a vLLM engine in its own process (VLLM_ENABLE_V1_MULTIPROCESSING=1) on the driver's GPU gets the
  driver's changed weights by CUDA IPC handle (`Engine.load`, `models.weight_sync.pack`), then `Engine.check`.
- torchrun: `scripts/torchrun_grpo.py --preset paper-easy --backend vllm` under `torchrun --nproc-per-node 2`, one
  GRPO iteration on the random model saved to disk: one engine per process (vLLM's external launcher), the rows
  sharded; on two GPUs one each under NCCL, on one GPU both under gloo (torchrun_grpo's SHARE_GPU_ENV).
- ray-vllm: ES on `ray-vllm` with one worker per visible GPU (two on the CPU) at N = `--ray-population` (8) for
  `--ray-iterations` (2) iterations.

Peak memory: torch's in this process misses the engines, Ray actors and torchrun processes, so on CUDA every
section also samples the memory in use on each visible GPU (all processes, `device_used_mib`, every `SAMPLE_S`)
and reports the highest (`DeviceMemory`). `Deadline` bounds the whole check (`--time-limit`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_S = 0.2
"""Seconds between two samples of the devices' memory in use."""


def device_used_mib(index: int) -> float:
    """MiB in use on CUDA device `index` by every process, as nvidia-smi reports it (NVML: no CUDA context is made
    on the other devices, whose memory Ray's placement counts); without pynvml, total minus free
    (`torch.cuda.mem_get_info`, which makes one)."""
    import torch

    try:
        return torch.cuda.device_memory_used(index) / 2**20
    except (ImportError, ModuleNotFoundError):
        free, total = torch.cuda.mem_get_info(index)
        return (total - free) / 2**20


class DeviceMemory:
    """Samples the memory in use on every visible CUDA device from a thread while the `with` block runs; `peak_mib`
    is the highest sample of any one device (None when `cuda` is False)."""

    def __init__(self, cuda: bool):
        self.cuda, self.peak_mib, self._stop = cuda, None, threading.Event()

    def _sample(self, devices: int) -> None:
        done = False
        while True:  # at the start, every SAMPLE_S, and once more at the end
            used = max(device_used_mib(i) for i in range(devices))
            self.peak_mib = used if self.peak_mib is None else max(self.peak_mib, used)
            if done:
                return
            done = self._stop.wait(SAMPLE_S)

    def __enter__(self):
        if self.cuda:
            import torch

            self._thread = threading.Thread(target=self._sample, args=(torch.cuda.device_count(),), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self._stop.set()
            self._thread.join()
        return False


class Deadline:
    """The check's time limit: `left()` seconds remain (None: no limit); `alarm()` arms SIGALRM to raise
    TimeoutError in the running section when they run out (`disarm()` after it)."""

    def __init__(self, limit_s: float | None):
        self.limit_s, self.end = limit_s, None if limit_s is None else time.monotonic() + limit_s

    def left(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()

    def alarm(self) -> None:
        if self.end is None:
            return

        def expire(signum, frame):
            raise TimeoutError(f"gpu_check: --time-limit {self.limit_s:g} s reached")

        signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, max(self.left(), 1e-3))

    def disarm(self) -> None:
        if self.end is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)


def torchrun_command(model_dir: Path, *, processes: int, prompts: int, max_new_tokens: int, device: str,
                     memory_share: float | None) -> list[str]:
    """The `torchrun` line of the torchrun section: one GRPO iteration of paper-easy on vLLM over `processes`
    processes, the model from `model_dir`, `prompts` prompts (two minibatches), `memory_share` per engine."""
    sets = dict(model=str(model_dir), iterations=1, prompts_per_step=prompts, minibatch_size=max(1, prompts // 2),
                max_new_tokens=max_new_tokens, train_size=64, checkpoint_every=0, device=device)
    if memory_share is not None:
        sets["gpu_memory_utilization"] = memory_share
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
            str(ROOT / "scripts" / "torchrun_grpo.py"), "--preset", "paper-easy", "--backend", "vllm",
            *[x for k, v in sets.items() for x in ("--set", f"{k}={v!r}")]]


def last_record(store: Path, kind: str) -> dict:
    """The last metrics.jsonl record of the one `kind` run (e.g. "grpo") in `store`; RuntimeError unless exactly one."""
    files = sorted(store.glob(f"{kind}-*/metrics.jsonl"))
    if len(files) != 1:
        raise RuntimeError(f"expected one {kind} run with metrics in {store}, found {len(files)}")
    return json.loads(files[0].read_text().splitlines()[-1])


class MultiSections:
    """The sections above, mixed into `gpu_check.Checker` (its `args`, `cuda`, `preset`, `small`, `tokenizer`,
    `deadline`, `fresh()` and `_train()`)."""

    def s_centre(self) -> dict:
        import esreason_lib.models.rollouts_vllm as rollouts_vllm
        from esreason_lib.es.backends.vllm_engines import VLLMBackend
        from esreason_lib.models.logprobs import SCORING, logit_bytes
        from esreason_lib.tasks import get_task

        rows, tokens = self.args.centre_rows, self.args.centre_tokens
        config = self.preset.config("es", population_size=2, backend="vllm",
                                    **{**self.small, "prompts_per_step": rows, "max_new_tokens": tokens})
        model, task = self.fresh(), get_task("gsm8k")
        backend, lengths = VLLMBackend.from_config(config, task, self.tokenizer), []
        scored = rollouts_vllm.rollouts_from_tokens

        def counted(*a, **kw):  # the decoded lengths the scoring pass ran over
            ro = scored(*a, **kw)
            lengths.extend(ro.completion_mask.sum(1).tolist())
            return ro

        rollouts_vllm.rollouts_from_tokens = counted
        try:
            _, _, entropy = backend.score_center(model, task.examples("train", n=rows), iteration=0)
        finally:
            rollouts_vllm.rollouts_from_tokens = scored
            backend.close()
        bound = logit_bytes(SCORING, rows=rows, positions=max(lengths), vocab=model.config.vocab_size) / 2**20
        return {"rows": len(lengths), "max_new_tokens": tokens, "tokens_max": int(max(lengths)),
                "tokens_mean": sum(lengths) / len(lengths), "logit_bound_mib": bound, "entropy": float(entropy)}

    def s_sleep_wake(self) -> dict:
        from vllm import SamplingParams

        from esreason_lib.models.vllm_engine import Engine

        model = self.fresh()
        index = next(model.parameters()).device.index or 0
        engine = Engine(model, self.tokenizer, seed=0, max_new_tokens=self.args.max_new_tokens, sleep_mode=True)
        try:
            awake, t0 = device_used_mib(index), time.perf_counter()
            engine.sleep()
            sleep_s, asleep, t0 = time.perf_counter() - t0, device_used_mib(index), time.perf_counter()
            engine.wake()
            wake_s = time.perf_counter() - t0
            engine.check(model, "the wake after a sleep")
            out = engine.generate([[5, 6, 7]], [SamplingParams(temperature=0.0, max_tokens=self.args.max_new_tokens)])
        finally:
            engine.close()
        if asleep >= awake:
            raise RuntimeError(f"sleep-wake: the sleeping engine freed no device memory ({awake:.0f} MiB in use "
                               f"awake, {asleep:.0f} MiB asleep)")
        return {"sleep_s": sleep_s, "wake_s": wake_s, "freed_mib": awake - asleep,
                "tokens_after_wake": len(out[0].outputs[0].token_ids)}

    def s_ipc_sync(self) -> dict:
        import torch

        from esreason_lib.models.vllm_engine import Engine
        from esreason_lib.models.weight_sync import pack

        was = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # the engine in its own process: the IPC path
        try:
            model = self.fresh()
            first = next(model.parameters())
            ipc = isinstance(pack(first, ipc=True), tuple)
            if self.cuda and not ipc:
                raise RuntimeError("ipc-sync: a CUDA parameter was not packed as an IPC handle")
            engine = Engine(model, self.tokenizer, seed=0, max_new_tokens=self.args.max_new_tokens)
            try:
                with torch.no_grad():
                    for p in model.parameters():
                        p.neg_()  # every non-zero weight changes: the copy must carry them all
                t0 = time.perf_counter()
                engine.load(model)
                load_s = time.perf_counter() - t0
                engine.check(model, "the IPC weight copy")
            finally:
                engine.close()
        finally:
            if was is None:
                os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
            else:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = was
        gib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
        return {"ipc": ipc, "gib": gib, "load_s": load_s, "gib_per_s": gib / load_s}

    def s_torchrun(self) -> dict:
        import torch
        from torchrun_grpo import SHARE_GPU_ENV

        from esreason_lib.paths import run_store_root

        gpus, processes = torch.cuda.device_count(), 2
        share = gpus < processes
        model_dir = Path(os.environ["ESREASON_DATA"]).parent / "torchrun-base"
        model = self.fresh()
        model.save_pretrained(model_dir)
        self.tokenizer.save_pretrained(model_dir)
        del model
        cmd = torchrun_command(model_dir, processes=processes, prompts=self.args.prompts,
                               max_new_tokens=self.args.max_new_tokens, device=self.args.device,
                               memory_share=0.25 if share else None)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               SHARE_GPU_ENV: "1" if share else "0"}
        left = self.deadline.left()
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=None if left is None else max(left, 1.0))
        if proc.returncode != 0:
            raise RuntimeError(f"torchrun exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        row = last_record(run_store_root(), "grpo")
        return {"processes": processes, "gpus": min(gpus, processes), "shared_gpu": share,
                "step_s": float(row["time/step_s"]), "reward_mean": float(row["reward/mean"])}

    def s_ray_vllm(self) -> dict:
        import ray
        import torch

        workers = torch.cuda.device_count() if self.cuda else 2  # every visible GPU; two actors on the CPU
        try:
            out = self._train("es", backend="ray-vllm", workers=workers, population_size=self.args.ray_population,
                              iterations=self.args.ray_iterations)
        finally:
            if ray.is_initialized():
                ray.shutdown()
        out.pop("config")
        return {"workers": workers, "population": self.args.ray_population, "iterations": self.args.ray_iterations,
                **out}
