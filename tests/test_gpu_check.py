"""scripts/gpu_check: the CPU-runnable sections (versions, es, grpo, evaluate on device cpu, tiny shape, without
Ray: the Ray backend has its own tests), the vLLM sections' skip lines, its synthetic GSM8K rows and the padded
tokenizer (gpu_check_fixtures), and the shell wrapper's refusal on a machine without CUDA. The CUDA path itself
(bfloat16 on a GPU, peak memory, the Qwen2.5-1.5B shape, vLLM, Ray with a GPU) cannot run here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from esreason_lib.tasks import GSM8K

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402
import gpu_check_fixtures  # noqa: E402


def test_synthetic_gsm8k_rows_load_and_verify(tmp_path):
    gpu_check_fixtures.write_gsm8k(tmp_path, n=5)
    task = GSM8K(path=tmp_path / "gsm8k")
    first = next(e for e in task.examples("train") if e["id"] == "gsm8k-train-0")
    assert first["question"] == "What is 3 + 5?" and first["answer"] == "8"  # 3 % 7 + 2 = 5
    assert len(task.examples("test")) == 5 and task.reward("\\boxed{8}", first) == 1.0


def test_cpu_run_of_the_checks(tmp_path):
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--no-ray",
                           "--allow-skip", "es-vllm,grpo-vllm,ray-vllm-kill,centre,ray-vllm", "--prompts", "2",
                           "--population", "2", "--max-new-tokens", "8", "--eval-samples", "2", "--scoring-tokens",
                           "64", "--centre-tokens", "16", "--centre-rows", "2", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "gpu_check: ok" in proc.stdout and "peak GPU memory n/a (cpu)" in proc.stdout
    result = json.loads(out.read_text())
    by = {r["check"]: r for r in result["results"]}
    assert list(by) == list(gpu_check.SECTIONS) and result["failed"] == []
    missing = gpu_check_fixtures.installed("vllm") is None
    vllm = "skipped: vllm not installed" if missing else "skipped: vllm disabled"
    assert by["es-vllm"]["status"] in (vllm, "ok") and by["grpo-vllm"]["status"] in (vllm, "ok")
    assert by["ray-vllm-kill"]["status"].startswith(("skipped", "ok"))
    assert by["centre"]["status"] in (vllm, "ok") and by["ray-vllm"]["status"].startswith(("skipped", "ok"))
    for name in ("sleep-wake", "ipc-sync", "torchrun"):  # the stated skip, listed in the summary
        assert by[name]["status"] == gpu_check.CUDA_SKIP and f"{name}: needs a CUDA device" in result["skipped"]
    for name in ("versions", "noise", "scoring", "es", "grpo", "evaluate"):
        assert by[name]["status"] == "ok" and by[name]["wall_s"] > 0 and by[name]["peak_gpu_mib"] is None, name
    assert by["versions"]["transformers"] and by["versions"]["tokens"] > 0
    assert by["noise"]["differ"] == 0 and by["noise"]["numel"] == 1 << 20
    assert by["scoring"]["tokens"] == 64 and by["scoring"]["logit_bound_mib"] > 0
    assert 0 < by["es"]["step_s"] <= by["es"]["wall_s"] and 0.0 <= by["grpo"]["reward_mean"] <= 1.0
    assert by["grpo"]["micro_batch_size"] == 16 and by["grpo"]["estimate_gib"] > 0
    assert (by["evaluate"]["backend"] in ("local", "vllm") and by["evaluate"]["samples"] == 2
            and 0.0 <= by["evaluate"]["pass_at_1"] <= 1.0)


def test_a_skipped_section_fails_unless_allowed():
    results = [{"check": "es", "status": "ok"}, {"check": "es-vllm", "status": "skipped: vllm not installed"},
               {"check": "ray-vllm-kill", "status": "skipped: ray disabled"},
               {"check": "grpo-vllm", "status": "skipped: vllm not installed"}]
    assert gpu_check.unexpected_skips(results, set()) == ["es-vllm", "grpo-vllm"]  # --no-ray's skip was asked for
    assert gpu_check.unexpected_skips(results, {"es-vllm"}) == ["grpo-vllm"]
    assert gpu_check.unexpected_skips(results, {"es-vllm", "grpo-vllm"}) == []
    assert gpu_check.parse_sections(" es-vllm, grpo-vllm ,", "--allow-skip") == {"es-vllm", "grpo-vllm"}
    with pytest.raises(SystemExit, match="--allow-skip: unknown section 'vllm'"):
        gpu_check.parse_sections("vllm", "--allow-skip")


def test_unknown_section_is_refused():
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "es,nope"])


def test_model_shapes_build_in_bfloat16():
    import torch

    from esreason_lib.models.zoo import build_char_tokenizer

    tok = build_char_tokenizer()
    tiny = gpu_check_fixtures.build_model("tiny", "cpu", tok)
    assert gpu_check_fixtures.build_tokenizer(None).get_vocab() == tok.get_vocab()
    big_tok = gpu_check_fixtures.build_tokenizer(gpu_check_fixtures.VOCAB["qwen2.5-1.5b"])
    assert len(big_tok) == 151_936 and big_tok.decode([1000, 5]) == "<x1000>" + tok.decode([5])
    assert big_tok("What is 3 + 5?")["input_ids"] == tok("What is 3 + 5?")["input_ids"]
    assert {p.dtype for p in tiny.parameters()} == {torch.bfloat16}
    big = gpu_check_fixtures.build_model("qwen2.5-1.5b", "meta", big_tok)  # shapes only, no memory
    body = sum(p.numel() for name, p in big.named_parameters() if "embed_tokens" not in name)
    # per layer: q 1536^2 + 1536 bias, k and v 1536 * 256 + 256 each (2 of 12 heads), o 1536^2, MLP 3 * 1536 * 8960,
    # 2 norms; 28 layers and the final norm: Qwen2.5-1.5B's published 1.31B non-embedding parameters
    layer = (1536**2 + 1536) + 2 * (1536 * 256 + 256) + 1536**2 + 3 * 1536 * 8960 + 2 * 1536
    assert body == 28 * layer + 1536 == 1_310_340_608
    assert big.config.tie_word_embeddings and {p.dtype for p in big.parameters()} == {torch.bfloat16}
    assert big.config.vocab_size == 151_936 and sum(p.numel() for p in big.parameters()) == body + 151_936 * 1536


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_shell_wrapper_refuses_without_cuda():
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nvidia-smi not found: this is no CUDA machine" in proc.stderr
