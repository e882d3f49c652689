"""`backend="vllm"` without vLLM installed fails naming the extra, before any run directory exists (the backends'
own tests: tests/vllm_parity)."""

from __future__ import annotations

import importlib.util

import pytest

from esreason_lib.es.backends.registry import make_backend
from esreason_lib.es.config import ESConfig
from esreason_lib.es.loop import train_es
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.loop import train_grpo

_SPEC = importlib.util.find_spec("vllm")  # None (or a namespace package with no origin) when vLLM is absent
_NO_VLLM = pytest.mark.skipif(_SPEC is not None and _SPEC.origin is not None, reason="vLLM is installed here")


@_NO_VLLM
def test_vllm_backend_without_vllm_names_the_extra():
    with pytest.raises(ImportError, match=r"esreason\[vllm\]"):
        make_backend(ESConfig(backend="vllm"), task=None, tokenizer=None)


@_NO_VLLM
@pytest.mark.parametrize("config", [ESConfig(model="tiny-random", backend="vllm", iterations=1),
                                    ESConfig(model="tiny-random", backend="ray-vllm", iterations=1),
                                    GRPOConfig(model="tiny-random", backend="vllm", iterations=1)])
def test_training_on_vllm_without_vllm_fails_before_opening_a_run(config, tmp_path):
    train = train_es if isinstance(config, ESConfig) else train_grpo
    with pytest.raises(ImportError, match=rf"{type(config).__name__}.backend='{config.backend}' needs the `vllm` "
                                          r"extra: pip install 'esreason\[vllm\]'"):
        train(config, home=tmp_path, progress=False)
    assert not any(tmp_path.rglob("config.json"))  # no run directory was left behind
