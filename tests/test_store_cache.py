"""`store.cache.cached`: computes once, then reads; never takes an interrupted computation for a result."""

from __future__ import annotations

import pandas as pd
import pytest

from esreason_lib.store.cache import cached
from esreason_lib.store.runs import MissingResult, Run


def test_computes_once_then_reads_back(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"a": pd.DataFrame({"x": [1, 2]}), "b": pd.DataFrame({"y": [3.5]})}

    first = cached("study", {"p": 1}, ("a", "b"), compute, seed=0, home=tmp_path)
    again = cached("study", {"p": 1}, ("a", "b"), compute, seed=0, home=tmp_path)
    assert calls == [1]
    pd.testing.assert_frame_equal(first["a"], again["a"])
    pd.testing.assert_frame_equal(first["b"], again["b"])
    cached("study", {"p": 2}, ("a", "b"), compute, seed=0, home=tmp_path)
    assert calls == [1, 1]  # another config is another run


def test_an_interrupted_computation_is_not_a_result(tmp_path):
    def broken():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cached("study", {"p": 1}, ("a",), broken, seed=0, home=tmp_path)
    assert not Run.open("study", {"p": 1}, seed=0, home=tmp_path).is_complete()
    out = cached("study", {"p": 1}, ("a",), lambda: {"a": pd.DataFrame({"x": [0]})}, seed=0, home=tmp_path)
    assert out["a"]["x"].tolist() == [0]


def test_wrong_tables_and_stored_only_are_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="expected"):
        cached("study", {"p": 1}, ("a",), lambda: {"b": pd.DataFrame()}, seed=0, home=tmp_path)
    monkeypatch.setenv("ESREASON_STORED_ONLY", "1")
    with pytest.raises(MissingResult, match="study"):
        cached("study", {"p": 3}, ("a",), lambda: {"a": pd.DataFrame()}, seed=0, home=tmp_path)


def test_stored_run_builds_once_and_records_what_build_returns(tmp_path):
    from esreason_lib.store.cache import stored_run

    built = []

    def build(run):
        built.append(run.path)
        run.model_dir.mkdir(parents=True, exist_ok=True)
        (run.model_dir / "weights.txt").write_text("w")
        return {"sparsity": 0.5}

    first = stored_run("masked", {"q": 0.9}, build, seed=0, home=tmp_path)
    again = stored_run("masked", {"q": 0.9}, build, seed=0, home=tmp_path)
    assert built == [first.path] and again.path == first.path
    assert again.is_complete() and again.manifest()["sparsity"] == 0.5
