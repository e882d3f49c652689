"""models/hf_compat: the KV-cache keyword detected for the installed transformers, and the declared lowest version.

`make test-lowest` runs this file with tests/test_generation.py and tests/test_es_batched.py under
transformers==TRANSFORMERS_LOWEST (ESREASON_EXPECT_TRANSFORMERS set); in the ordinary suite the version check is
skipped and the rest runs under the dev venv's transformers."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
import transformers
from transformers.masking_utils import create_causal_mask

from esreason_lib.models import hf_compat
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

ROOT = Path(__file__).resolve().parents[1]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def test_lowest_version_is_declared_once_and_installed_when_expected():
    lowest = re.search(r"^TRANSFORMERS_LOWEST := (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert f'"transformers>={lowest},<6"' in (ROOT / "pyproject.toml").read_text()
    assert _version(transformers.__version__) >= _version(lowest)
    expected = os.environ.get("ESREASON_EXPECT_TRANSFORMERS")
    if expected is None:
        pytest.skip("ESREASON_EXPECT_TRANSFORMERS unset (set by `make test-lowest`)")
    assert transformers.__version__ == expected == lowest


def test_keyword_matches_the_installed_api():
    newer = _version(transformers.__version__) >= (5, 24)
    assert hf_compat.CACHE_KW == ("cache" if newer else "past_key_values")
    assert hf_compat.MASK_CACHE_KW == hf_compat.CACHE_KW
    assert hf_compat.with_cache(None) == {hf_compat.CACHE_KW: None}


def test_forward_returns_the_cache_under_the_detected_name():
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0).eval()
    ids = torch.tensor([[5, 6, 7]])  # [1, 3]
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **hf_compat.with_cache(cache))
        assert hf_compat.output_cache(out).get_seq_length() == 3
        step = model(input_ids=ids[:, -1:], use_cache=True, **hf_compat.with_cache(hf_compat.output_cache(out)))
        full = model(input_ids=torch.cat([ids, ids[:, -1:]], 1), use_cache=False)
    torch.testing.assert_close(step.logits[:, -1], full.logits[:, -1], rtol=1e-4, atol=1e-5)


def test_causal_mask_equals_the_direct_call():
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    mask = torch.tensor([[False, True, True], [True, True, True]])  # [2, 3] left-padded
    pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
    embeds = torch.empty((2, 3, model.config.hidden_size))
    got = hf_compat.causal_mask(config=model.config, inputs_embeds=embeds, attention_mask=mask, cache=None,
                                position_ids=pos)
    want = create_causal_mask(model.config, embeds, mask, None, position_ids=pos)
    assert (got is None and want is None) or torch.equal(got, want)
