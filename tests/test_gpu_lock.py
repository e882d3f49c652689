"""constraints/gpu.lock (every package of the GPU install pinned, `scripts/gpu_lock.py` from pip's resolution report)
agrees with constraints/gpu.txt and covers the project's dependencies and its vllm and ray extras."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_lock import LOCK, canonical, lock_text, read_pins  # noqa: E402


def test_the_lock_agrees_with_the_constraints():
    constraints, lock = read_pins(ROOT / "constraints" / "gpu.txt"), read_pins(LOCK)
    assert set(constraints) == {"vllm", "torch", "transformers", "ray"}
    assert {name: lock.get(name) for name in constraints} == constraints


def test_the_lock_pins_every_dependency_of_the_gpu_install():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["vllm"],
              *project["optional-dependencies"]["ray"]]
    names = {canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", w)[0]) for w in wanted}
    lock = read_pins(LOCK)
    assert names <= set(lock), sorted(names - set(lock))
    assert "esreason" not in lock  # the project itself goes in editable beside it
    assert len(lock) > 100  # the whole resolution (vLLM's CUDA stack), not the top-level pins alone


def test_lock_text_from_a_report():
    report = {"pip_version": "26.3", "environment": {"python_full_version": "3.11.7", "sys_platform": "linux",
                                                      "platform_machine": "x86_64"},
              "install": [{"metadata": {"name": n, "version": v}}
                          for n, v in (("Zeta_Pkg", "1.0"), ("esreason", "0.1.0"), ("alpha.pkg", "2.3.post1"))]}
    text = lock_text(report)
    assert "# CPython 3.11.7 on linux x86_64 (pip 26.3)." in text
    assert [line for line in text.splitlines() if not line.startswith("#")] == ["alpha-pkg==2.3.post1",
                                                                                 "zeta-pkg==1.0"]


def test_read_pins_refuses_a_range(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("# comment\n\nTorch==2.14.0  # note\nvllm>=0.33\n")
    with pytest.raises(ValueError, match=r"c.txt:4: 'vllm>=0.33' is not a name==version pin"):
        read_pins(path)
    path.write_text("Torch==2.14.0  # note\n")
    assert read_pins(path) == {"torch": "2.14.0"}
