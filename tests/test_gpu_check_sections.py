"""scripts/gpu_check.py's section registry, skip policy, arguments and time limit, and each multi-process section of
scripts/gpu_check_multi.py (centre, sleep-wake, ipc-sync, torchrun, ray-vllm) called on the CPU with stand-ins: a
stand-in vLLM engine (tests/test_es_vllm_center.py's, given sleep and wake), a stand-in `torchrun` process and
trainer, and a monkeypatched `torch.cuda`. None of these sections has run on a GPU here (no GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_es_vllm_center import Engine, with_stand_in_vllm

from esreason_lib.models.weights import weights_fingerprint

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402
import gpu_check_fixtures  # noqa: E402
import gpu_check_multi  # noqa: E402
import torchrun_grpo  # noqa: E402

NEW = ("centre", "sleep-wake", "ipc-sync", "torchrun", "ray-vllm")


def checker(*argv: str):
    return gpu_check.Checker(gpu_check.parse_args(["--device", "cpu", *argv]))


@pytest.fixture
def data(tmp_path, monkeypatch):
    """The synthetic GSM8K rows and a run store in `tmp_path`, as `main` sets them."""
    monkeypatch.setenv("ESREASON_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "runs"))
    gpu_check_fixtures.write_gsm8k(tmp_path / "data")
    return tmp_path


class SleepyEngine(Engine):
    """The stand-in engine with vLLM's sleep mode: asleep, it holds `FREED` MiB less (`used`)."""

    used, FREED = 1000.0, 300.0

    def __init__(self, model, tokenizer, *, seed, sleep_mode=False, **kw):
        super().__init__(model, tokenizer, seed=seed, **kw)
        self.sleep_mode, self.calls = sleep_mode, []

    def sleep(self):
        self.calls.append("sleep")
        SleepyEngine.used -= self.FREED

    def wake(self):
        self.calls.append("wake")
        SleepyEngine.used += self.FREED

    def check(self, model, where):
        self.calls.append("check")
        super().check(model, where)


@pytest.fixture
def engine(monkeypatch):
    """`vllm` and `models.vllm_engine.Engine` replaced by the stand-ins (the backend re-imported over them)."""
    with_stand_in_vllm(monkeypatch, SleepyEngine)
    monkeypatch.setattr(gpu_check_multi, "device_used_mib", lambda index: SleepyEngine.used)
    return SleepyEngine


def test_registry_names_every_section_once_with_its_method():
    assert len(set(gpu_check.SECTIONS)) == len(gpu_check.SECTIONS) and set(NEW) <= set(gpu_check.SECTIONS)
    for section in gpu_check.REGISTRY:
        assert callable(getattr(gpu_check.Checker, "s_" + section.name.replace("-", "_"))), section.name
    assert {s.name for s in gpu_check.REGISTRY if s.cuda} == {"sleep-wake", "ipc-sync", "torchrun"}
    assert all("vllm" in s.needs for s in gpu_check.REGISTRY if s.name in NEW)


def test_skip_status_and_which_skips_fail(monkeypatch):
    monkeypatch.setattr(gpu_check, "installed", lambda name: None if name == "vllm" else "1.0")
    by = {s.name: s for s in gpu_check.REGISTRY}
    assert gpu_check.skip_status(by["torchrun"], False, set()) == gpu_check.CUDA_SKIP
    assert gpu_check.skip_status(by["torchrun"], True, set()) == "skipped: vllm not installed"
    assert gpu_check.skip_status(by["ray-vllm"], True, {"vllm"}) == "skipped: vllm disabled"
    assert gpu_check.skip_status(by["es"], False, {"vllm"}) is None
    results = [{"check": "torchrun", "status": gpu_check.CUDA_SKIP}, {"check": "centre", "status": "skipped: oops"},
               {"check": "ray-vllm", "status": "skipped: ray disabled"}, {"check": "es", "status": "ok"}]
    assert gpu_check.unexpected_skips(results, set()) == ["centre"]  # any skip but the stated and the asked
    assert gpu_check.unexpected_skips(results, {"centre"}) == []
    assert gpu_check.skip_summary(results) == ["torchrun: needs a CUDA device", "centre: oops",
                                               "ray-vllm: ray disabled"]


def test_main_fails_on_an_unexpected_skip_and_lists_every_skip(data, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "installed", lambda name: None if name == "vllm" else "1.0")
    out = data / "result.json"
    assert gpu_check.main(["--device", "cpu", "--only", "sleep-wake,ipc-sync,torchrun", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "gpu_check: skipped: sleep-wake: needs a CUDA device; ipc-sync: needs a CUDA device; torchrun: " in text
    assert json.loads(out.read_text())["failed"] == []
    assert gpu_check.main(["--device", "cpu", "--only", "centre,torchrun", "--json", str(out)]) == 1
    result = json.loads(out.read_text())
    assert result["failed"] == ["centre"] and result["skipped"] == ["centre: vllm not installed",
                                                                    "torchrun: needs a CUDA device"]
    assert gpu_check.main(["--device", "cpu", "--only", "centre", "--allow-skip", "centre"]) == 0


def test_arguments_and_their_one_line_refusals(capsys):
    args = gpu_check.parse_args([])
    assert (args.centre_tokens, args.centre_rows, args.ray_population, args.ray_iterations) == (2048, 64, 8, 2)
    assert args.time_limit == 3600 and args.only == set(gpu_check.SECTIONS)
    assert gpu_check.parse_args(["--time-limit", "0"]).time_limit is None
    assert gpu_check.parse_args(["--only", "centre,torchrun"]).only == {"centre", "torchrun"}
    for argv, message in ((["--ray-population", "3"], "--ray-population: 3 is odd"),
                          (["--centre-rows", "0"], "must be a positive int, got '0'"),
                          (["--time-limit", "-1"], "--time-limit: -1 is negative"),
                          (["--only", "es,nope"], "--only: unknown section 'nope'")):
        with pytest.raises(SystemExit) as refused:
            gpu_check.parse_args(argv)
        assert message in capsys.readouterr().err + str(refused.value), argv


def test_time_limit_stops_the_running_section_and_fails_the_rest(monkeypatch):
    check = checker("--time-limit", "0.5")
    monkeypatch.setattr(gpu_check.Checker, "s_es", lambda self: time.sleep(10))
    t0 = time.perf_counter()
    check.run(gpu_check.Section("es"))
    assert time.perf_counter() - t0 < 5
    (r,) = check.results
    assert r["status"] == "failed" and "TimeoutError: gpu_check: --time-limit 0.5 s reached" in r["error"]
    check.run(gpu_check.Section("grpo"))
    assert check.results[1] == {"check": "grpo", "status": "failed", "error": "not run: --time-limit reached"}
    assert gpu_check_multi.Deadline(None).left() is None


def test_device_memory_keeps_the_highest_sample_of_any_device(monkeypatch):
    used = {0: [10, 50, 20], 1: [30, 30, 30]}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "device_memory_used",
                        lambda i: (used[i].pop(0) if len(used[i]) > 1 else used[i][0]) * 2**20)
    monkeypatch.setattr(gpu_check_multi, "SAMPLE_S", 0.05)
    with gpu_check_multi.DeviceMemory(True) as mem:
        time.sleep(0.3)
    assert mem.peak_mib == 50.0

    def no_nvml(i):
        raise ModuleNotFoundError("pynvml")

    monkeypatch.setattr(torch.cuda, "device_memory_used", no_nvml)  # the fallback: total minus free
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (60 * 2**20, 100 * 2**20))
    assert gpu_check_multi.device_used_mib(1) == 40.0
    with gpu_check_multi.DeviceMemory(False) as off:
        pass
    assert off.peak_mib is None


def test_process_device_shares_a_gpu_only_when_asked():
    assert torchrun_grpo.process_device(1, 8, False) == (1, "nccl")
    assert torchrun_grpo.process_device(1, 1, True) == (0, "gloo")
    with pytest.raises(ValueError, match="LOCAL_RANK 1 has no GPU of its own \\(1 visible\\)"):
        torchrun_grpo.process_device(1, 1, False)
    with pytest.raises(ValueError, match="no CUDA device visible"):
        torchrun_grpo.process_device(0, 0, True)


def test_centre_section_scores_the_centre_on_the_engine(data, engine):
    out = checker("--centre-rows", "3", "--centre-tokens", "12").s_centre()
    (made,) = Engine.made
    assert made.max_new_tokens == 12 and len(made.prompts) == 3  # the centre's rows, decoded by the engine
    assert out["rows"] == 3 and 1 <= out["tokens_max"] <= 13 and out["max_new_tokens"] == 12
    assert out["logit_bound_mib"] > 0 and out["entropy"] > 0


def test_sleep_wake_section_frees_memory_and_checks_the_weights_after_the_wake(data, engine, monkeypatch):
    out = checker("--max-new-tokens", "4").s_sleep_wake()
    (made,) = Engine.made
    assert made.sleep_mode and made.calls == ["sleep", "wake", "check"]
    assert out["freed_mib"] == SleepyEngine.FREED and 1 <= out["tokens_after_wake"] <= 5
    monkeypatch.setattr(SleepyEngine, "FREED", 0.0)
    with pytest.raises(RuntimeError, match="the sleeping engine freed no device memory"):
        checker("--max-new-tokens", "4").s_sleep_wake()


def test_ipc_sync_section_copies_changed_weights_in_an_engine_process(data, engine, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    seen = []
    monkeypatch.setattr(SleepyEngine, "load", lambda self, model: (
        seen.append(gpu_check_multi.os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]), Engine.load(self, model)))
    out = checker().s_ipc_sync()
    (made,) = Engine.made
    assert seen == ["1"] and gpu_check_multi.os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # restored
    assert made.calls == ["check"] and out["ipc"] is False and out["gib"] > 0  # CPU tensors go pickled
    fresh = gpu_check_fixtures.build_model("tiny", "cpu", made.tokenizer)
    assert weights_fingerprint(made.model) != weights_fingerprint(fresh)


def test_torchrun_section_launches_two_processes_sharing_one_gpu(data, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    calls = []

    def fake_run(cmd, env, cwd, capture_output, text, timeout):
        calls.append((cmd, env, timeout))
        run = data / "runs" / "grpo-abc"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "time/step_s": 3.5, "reward/mean": 0.25}) + "\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(gpu_check_multi.subprocess, "run", fake_run)
    out = checker("--prompts", "2", "--max-new-tokens", "8", "--time-limit", "100").s_torchrun()
    assert out == {"processes": 2, "gpus": 1, "shared_gpu": True, "step_s": 3.5, "reward_mean": 0.25}
    ((cmd, env, timeout),) = calls
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2" and "gpu_memory_utilization=0.25" in cmd
    assert cmd[cmd.index("--backend") + 1] == "vllm" and cmd[cmd.index("--preset") + 1] == "paper-easy"
    assert env[torchrun_grpo.SHARE_GPU_ENV] == "1" and 0 < timeout <= 100
    model_dir = Path(eval(next(x for x in cmd if x.startswith("model=")).removeprefix("model=")))
    assert (model_dir / "config.json").is_file() and (model_dir / "tokenizer.json").is_file()
    monkeypatch.setattr(gpu_check_multi.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "NCCL error: duplicate GPU"))
    with pytest.raises(RuntimeError, match="torchrun exited 1:\nNCCL error: duplicate GPU"):
        checker().s_torchrun()


def test_torchrun_command_sets_every_size():
    cmd = gpu_check_multi.torchrun_command(Path("/m"), processes=2, prompts=4, max_new_tokens=16, device="cuda",
                                           memory_share=None)
    sets = [cmd[i + 1] for i, x in enumerate(cmd) if x == "--set"]
    assert sets == ["model='/m'", "iterations=1", "prompts_per_step=4", "minibatch_size=2", "max_new_tokens=16",
                    "train_size=64", "checkpoint_every=0", "device='cuda'"]
    assert cmd[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def test_ray_vllm_section_puts_one_worker_on_every_visible_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    seen = {}

    def fake_train(self, method, **kw):
        seen.update(method=method, **kw)
        return {"config": None, "step_s": 1.0}

    monkeypatch.setattr(gpu_check.Checker, "_train", fake_train)
    check = checker("--ray-population", "8", "--ray-iterations", "2")
    check.cuda = True
    out = check.s_ray_vllm()
    assert seen == {"method": "es", "backend": "ray-vllm", "workers": 3, "population_size": 8, "iterations": 2}
    assert out == {"workers": 3, "population": 8, "iterations": 2, "step_s": 1.0}
    check.cuda = False
    assert check.s_ray_vllm()["workers"] == 2  # two actors on the CPU
