"""`evaluate(backend="vllm")`: the sampler wiring, checked with a stand-in for `VLLMRollouts` that samples with the
library's `generate` (the engine itself needs the `vllm` extra: tests/vllm_parity, `make test-vllm`)."""

from __future__ import annotations

import dataclasses
import importlib.util

import pandas as pd
import pytest
from toy_tasks import FirstCharTask

from esreason_lib.evaluation import EvalSpec, evaluate
from esreason_lib.models import rollouts_vllm
from esreason_lib.models.generation import generate
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2


class Standin:
    """`VLLMRollouts`' interface over `generate`; records its construction, calls and close."""

    made: list = []

    def __init__(self, *, engine_seed, chunks=None):
        self.calls, self.closed = 0, False
        Standin.made.append(self)

    def __call__(self, model, tokenizer, prompts, sampling, **kw):
        self.calls += 1
        return generate(model, tokenizer, prompts, sampling, **kw)

    def close(self):
        self.closed = True


def test_vllm_backend_samples_with_the_engine_sampler_and_closes_it(monkeypatch):
    monkeypatch.setattr(rollouts_vllm, "VLLMRollouts", Standin)
    Standin.made.clear()  # test_cli shares this stand-in; under xdist it may have run first in this worker
    tok, task = build_char_tokenizer(), FirstCharTask()
    model = tiny_random_qwen2(len(tok), seed=1)
    spec = EvalSpec(n_samples=4, temperature=0.6, ks=(1, 4), seed=3)
    got = evaluate(model, tok, task, task.examples(), dataclasses.replace(spec, backend="vllm"), progress=False)
    want = evaluate(model, tok, task, task.examples(), spec, progress=False)  # the stand-in draws what `generate` does
    (made,) = Standin.made
    assert made.calls == 2 and made.closed  # one sampling call, one greedy call
    pd.testing.assert_frame_equal(got.table, want.table)


def test_unknown_backend_and_missing_extra():
    tok, task = build_char_tokenizer(), FirstCharTask()
    model = tiny_random_qwen2(len(tok), seed=1)
    with pytest.raises(ValueError, match="EvalSpec.backend must be one of .*, got 'tpu'"):
        evaluate(model, tok, task, task.examples(), EvalSpec(n_samples=16, ks=(1, 2, 4, 8, 16), backend="tpu"),
                 progress=False)
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ImportError, match="vllm"):
            evaluate(model, tok, task, task.examples(), EvalSpec(n_samples=2, ks=(1,), backend="vllm"), progress=False)


def test_eval_spec_backend_is_validated_and_left_out_of_old_identities():
    from esreason_lib.evaluation import EvalSpec
    from esreason_lib.store.identity import jsonable

    assert "backend" not in jsonable(EvalSpec()) and jsonable(EvalSpec(backend="vllm"))["backend"] == "vllm"
    with pytest.raises(ValueError, match=r"EvalSpec.backend must be one of \('local', 'vllm'\), got 'tpu'"):
        EvalSpec(backend="tpu")
    with pytest.raises(ValueError, match="EvalSpec.forward must be 'hf' with backend 'vllm', got 'fused'"):
        EvalSpec(backend="vllm", forward="fused")
    with pytest.raises(ValueError,
                       match="EvalSpec.sampler must be 'multinomial' with backend 'vllm', got 'inverse-cdf'"):
        EvalSpec(backend="vllm", sampler="inverse-cdf")


def test_a_studys_eval_spec_reaches_the_engine(monkeypatch, tmp_path):
    """`studies.common.evaluate_ref` (every study's evaluation) samples on vLLM when its `EvalSpec.backend` says so."""
    from esreason_lib.evaluation import EvalSpec
    from esreason_lib.paper.studies.common import evaluate_ref

    monkeypatch.setattr(rollouts_vllm, "VLLMRollouts", Standin)
    Standin.made.clear()
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=1)
    spec = EvalSpec(n_problems=2, n_samples=2, ks=(1, 2), greedy=False, n_boot=10, backend="vllm")
    got = evaluate_ref("tiny-random-1", "countdown", {}, spec, home=tmp_path, progress=False, model=model,
                       tokenizer=tok)
    (made,) = Standin.made
    assert made.calls == 1 and made.closed and got.table["n"].tolist() == [2, 2]
