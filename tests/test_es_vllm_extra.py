"""`backend="vllm"` without vLLM installed fails naming the extra (the backend's own tests: tests/vllm_parity)."""

from __future__ import annotations

import importlib.util

import pytest

from esreason_lib.es import ESConfig
from esreason_lib.es_backends import make_backend


_SPEC = importlib.util.find_spec("vllm")  # None (or a namespace package with no origin) when vLLM is absent


@pytest.mark.skipif(_SPEC is not None and _SPEC.origin is not None, reason="vLLM is installed here")
def test_vllm_backend_without_vllm_names_the_extra():
    with pytest.raises(ImportError, match=r"esreason\[vllm\]"):
        make_backend(ESConfig(backend="vllm"), task=None, tokenizer=None)
