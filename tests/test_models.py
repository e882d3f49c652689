"""Tokenizer, tiny models, zoo specs and load_model."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2ForCausalLM

from esreason_lib.models import load as models
from esreason_lib.models.load import load_model, load_tokenizer
from esreason_lib.models.zoo import (
    ALPHABET,
    ZOO,
    ZooSpec,
    build_char_tokenizer,
    get_spec,
    num_parameters,
    tiny_random_qwen2,
)
from esreason_lib.training.settings import DEFAULT_BASE

TEXT = st.text(alphabet=st.sampled_from(ALPHABET), max_size=60)


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_char_tokenizer_basics(tok):
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert tok.pad_token == "<pad>" and tok.pad_token_id == 0
    assert tok.eos_token == "<eos>" and tok.eos_token_id == 1
    assert tok.bos_token is None and not tok.chat_template
    assert tok.padding_side == "left"
    assert len(tok) == 2 + len(ALPHABET) == 98
    assert "\n" in ALPHABET and " " in ALPHABET and "~" in ALPHABET
    ids = tok("03 12 07>022=(3+12)+7")["input_ids"]
    assert len(ids) == len("03 12 07>022=(3+12)+7")  # one id per character, no BOS/EOS added
    assert tok.decode(ids + [tok.eos_token_id, 0], skip_special_tokens=True) == "03 12 07>022=(3+12)+7"


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_char_tokenizer_round_trip(s):
    assume("<pad>" not in s and "<eos>" not in s)  # the special tokens' own text encodes to the special token
    tok = _TOK
    ids = tok(s, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(s)
    assert tok.decode(ids) == s


_TOK = build_char_tokenizer()


def test_char_tokenizer_left_padding(tok):
    batch = tok(["ab", "abcd"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0].tolist()[:2] == [0, 0]
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]


def test_char_tokenizer_save_load_offline(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    s = "S 5 3 9 1>\n  x~"
    assert again(s)["input_ids"] == tok(s)["input_ids"]
    assert again.decode(tok(s)["input_ids"]) == s
    assert (again.pad_token_id, again.eos_token_id, again.padding_side) == (0, 1, "left")


def test_tiny_random_qwen2():
    model = tiny_random_qwen2(98, seed=0)
    assert isinstance(model, Qwen2ForCausalLM)
    n = num_parameters(model)
    assert 20_000 <= n <= 60_000, n
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.intermediate_size) == (32, 2, 4, 2, 64)
    again = tiny_random_qwen2(98, seed=0)
    other = tiny_random_qwen2(98, seed=1)
    w = model.model.embed_tokens.weight
    assert torch.equal(w, again.model.embed_tokens.weight)
    assert not torch.equal(w, other.model.embed_tokens.weight)
    logits = model(torch.tensor([[2, 3, 4]])).logits  # [1, 3, V]
    assert logits.shape == (1, 3, 98)


def test_zoo_specs():
    assert DEFAULT_BASE in ZOO
    for name in ("smoke", "qwen2-s", "qwen2-m", "qwen2-l", "qwen2-s-habit"):
        assert ZOO[name].name == name
    assert ZOO["qwen2-s-habit"].habit_fraction > 0
    sizes = [num_parameters(ZOO[n].build(98)) for n in ("qwen2-s", "qwen2-m", "qwen2-l")]
    assert sizes == sorted(sizes) and sizes[-1] > 10 * sizes[0]
    assert num_parameters(ZOO["smoke"].build(98)) < 50_000
    for spec in ZOO.values():
        assert spec.qwen2_config(98).max_position_embeddings == spec.max_position_embeddings
    assert get_spec(ZOO["smoke"]) is ZOO["smoke"]
    with pytest.raises(ValueError, match="no-such"):
        get_spec("no-such")


@pytest.mark.parametrize("field, value", [("habit_fraction", 1.5), ("steps", 0), ("steps", True), ("steps", 2.0),
                                          ("sorting_weight", -1.0),
                                          ("addition_weight", float("nan"))])
def test_zoo_spec_validation(field, value):
    with pytest.raises(ValueError, match=rf"^ZooSpec\.{field} .*got {value!r}$"):
        dataclasses.replace(ZOO["smoke"], **{field: value})


def test_zoo_spec_frozen_and_documented():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ZOO["smoke"].steps = 3  # type: ignore[misc]
    assert ZooSpec("x").task_kwargs() == {"num_count": 3, "low": 1, "high": 15}


def test_load_tokenizer_beats_autotokenizer_trap(tok, tmp_path):
    """With a Qwen2 config.json beside it, AutoTokenizer forces Qwen2Tokenizer and drops spaces; we must not."""
    tiny_random_qwen2(len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    s = "04 14 09>002=(4+14)/9"
    loaded = load_tokenizer(tmp_path)
    assert loaded([s], add_special_tokens=False)["input_ids"][0] == tok(s)["input_ids"]
    assert loaded.decode(tok(s)["input_ids"]) == s
    assert len(loaded) == len(tok) and loaded.padding_side == "left"
    _, via_load_model = load_model(tmp_path)
    assert via_load_model([s, "a b"], add_special_tokens=False)["input_ids"] == tok([s, "a b"])["input_ids"]


def test_load_model_from_directory(tok, tmp_path):
    model = tiny_random_qwen2(len(tok), seed=3)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    loaded, tok2 = load_model(tmp_path / "model")
    assert not loaded.training
    assert tok2.padding_side == "left" and tok2.pad_token_id == 0
    x = torch.tensor([[5, 6, 7]])
    assert torch.allclose(loaded(x).logits, model(x).logits)
    # a run directory holding model/ works too, and dtype is applied
    loaded16, _ = load_model(tmp_path, dtype=torch.bfloat16)
    assert loaded16.dtype == torch.bfloat16


def test_load_model_unknown(tmp_path):
    with pytest.raises(ValueError, match="not a zoo name"):
        load_model(tmp_path / "missing")
    with pytest.raises(ValueError, match="qwen2-s"):
        load_model("./no-such-model-dir")
    with pytest.raises(ValueError, match="not a zoo name"):
        load_model("not a valid hub id!!")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json"):
        load_model(tmp_path / "empty")


def test_models_holds_loading_only():
    """models.py re-exports nothing: the zoo names live in `zoo`, pretraining in `pretrain`."""
    assert not hasattr(models, "__all__")
    for name in ("build_char_tokenizer", "tiny_random_qwen2", "DEFAULT_BASE", "num_parameters"):
        assert not hasattr(models, name), name


def test_load_model_zoo_name_goes_through_pretrain(tok, tmp_path, monkeypatch):
    tiny_random_qwen2(len(tok)).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    calls = []

    def fake_pretrain(spec, *, home=None, progress=True):
        calls.append((spec, home))
        return tmp_path / "model"

    monkeypatch.setattr(models, "pretrain", fake_pretrain)
    model, _ = load_model("smoke", home=tmp_path, progress=False)
    assert calls == [("smoke", tmp_path)] and not model.training


def test_quiet_transformers_silences_library_loads_and_restores_the_settings(tok, tmp_path, capfd):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from esreason_lib.models.zoo import quiet_transformers

    tiny_random_qwen2(len(tok), seed=3).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    hf_logging.enable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    capfd.readouterr()
    AutoModelForCausalLM.from_pretrained(tmp_path)  # unwrapped: transformers draws its bar on stderr
    assert "Loading weights" in capfd.readouterr().err
    load_model(tmp_path)
    assert capfd.readouterr().err == ""
    with quiet_transformers():
        assert not hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == hf_logging.ERROR
    assert hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == verbosity
    hf_logging.disable_progress_bar()  # a caller's own choice survives the block
    try:
        with quiet_transformers():
            pass
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()
