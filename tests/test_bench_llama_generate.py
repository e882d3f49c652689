"""benchmarks/bench_llama_generate.py's notebook-02 scoring row on a tiny model: it measures the two passes side by
side and reports their agreement (the script's other rows need the pretrained base)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_llama_generate as bench  # noqa: E402


def test_scoring_row_times_both_passes_and_reports_their_agreement(monkeypatch):
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    monkeypatch.setattr(bench, "prompts", lambda tok, n: [f"{10 + i}+{3 * i}=" for i in range(n)])  # no chat template
    (row,) = bench.scoring_rows(model, tok, 3, 12, 6)
    assert row.startswith("| llama | notebook 02's scoring pass, 12 samples of 3 prompts")
    diff = float(re.search(r"largest relative difference ([0-9.e+-]+);", row).group(1))
    assert diff < 1e-5
    assert set(bench.CPU_SECONDS) >= {"unshared", "shared"} and re.search(r"\*\*[0-9.]+x\*\*", row)
