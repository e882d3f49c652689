"""Pretraining: batches and loss masking, the schedule, the corpus stream, smoke training and reuse."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F

from esreason_lib.models import pretrain as pt
from esreason_lib.models.load import load_model
from esreason_lib.models.pretrain import IGNORE_INDEX, build_batch, completion_loss, lr_factor
from esreason_lib.models.zoo import ZOO, build_char_tokenizer, tiny_random_qwen2

TOK = build_char_tokenizer()
FAST = dataclasses.replace(ZOO["smoke"], steps=6, batch_size=16, warmup=2)


def test_build_batch_masks_prompt_and_padding():
    batch = build_batch(TOK, ["ab>", "abcd>"], ["12", "3"])
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]  # [2, 7] each
    assert ids.shape == (2, 7)
    assert TOK.decode(ids[0][mask[0].bool()]) == "ab>12<eos>"
    assert ids[0, -1].item() == TOK.pad_token_id and mask[0].tolist() == [1] * 6 + [0]  # right padded
    assert labels[0].tolist() == [IGNORE_INDEX] * 3 + TOK("12")["input_ids"] + [1, IGNORE_INDEX]
    assert labels[1].tolist() == [IGNORE_INDEX] * 5 + TOK("3")["input_ids"] + [1]
    with pytest.raises(ValueError, match="max_length=5"):
        build_batch(TOK, ["abcd>"], ["3"], max_length=5)


def test_completion_loss_counts_only_completion_tokens():
    model = tiny_random_qwen2(len(TOK), seed=0)
    batch = build_batch(TOK, ["ab>", "abcd>"], ["12", "3"])
    loss = completion_loss(model, batch)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # [2, 7, V]
    logp = F.log_softmax(logits, -1)
    # row 0 predicts "1","2",<eos> from positions 2,3,4; row 1 predicts "3",<eos> from positions 4,5
    terms = [logp[0, 2, TOK.convert_tokens_to_ids("1")], logp[0, 3, TOK.convert_tokens_to_ids("2")],
             logp[0, 4, 1], logp[1, 4, TOK.convert_tokens_to_ids("3")], logp[1, 5, 1]]
    assert torch.allclose(loss, -torch.stack(terms).mean(), atol=1e-5)
    # the prompt's own tokens carry no gradient signal: changing a label inside the prompt changes nothing
    batch2 = {k: v.clone() for k, v in batch.items()}
    batch2["input_ids"][0, 1] = TOK.convert_tokens_to_ids("z")  # the prompt is context, not a target
    assert batch2["labels"][0, 1] == IGNORE_INDEX


def test_lr_factor_warmup_and_cosine():
    spec = dataclasses.replace(FAST, warmup=4, min_lr_ratio=0.1)
    assert lr_factor(spec, 0, 0.0) == pytest.approx(0.25)
    assert lr_factor(spec, 3, 0.0) == pytest.approx(1.0)
    assert lr_factor(spec, 10, 0.5) == pytest.approx(0.55)
    assert lr_factor(spec, 10, 1.0) == pytest.approx(0.1)
    assert lr_factor(spec, 10, 7.0) == pytest.approx(0.1)  # progress is clamped


def test_corpus_stream_uses_train_split_only():
    from esreason_lib.tasks import get_task

    spec = dataclasses.replace(FAST, habit_fraction=0.5)
    stream = pt.CorpusStream(spec, pool_size=64)
    records = stream.sample_records(300)  # > pool_size: the pool is cycled
    countdown = get_task("countdown", **spec.task_kwargs())
    cd = [e for f, e, _, _ in records if f == "countdown"]
    assert cd and all(countdown.split_of(e["numbers"], e["target"]) == "train" for e in cd)
    test_prompts = {countdown.prompt(e) for e in countdown.examples("test")}
    assert not test_prompts & {p for _, _, p, _ in records}
    assert {f for f, *_ in records} == {"countdown", "addition", "sorting"}
    again = pt.CorpusStream(spec, pool_size=64).sample_records(300)
    assert [r[2:] for r in again] == [r[2:] for r in records]  # deterministic in the spec seed
    other = pt.CorpusStream(dataclasses.replace(spec, seed=1), pool_size=64).sample_records(300)
    assert [r[2:] for r in other] != [r[2:] for r in records]
    with pytest.raises(ValueError, match="pool_size"):
        pt.CorpusStream(spec, pool_size=0)


def test_corpus_stream_habit_fraction():
    from esreason_lib.tasks import get_task

    countdown = get_task("countdown", **FAST.task_kwargs())
    spec = dataclasses.replace(FAST, habit_fraction=1.0, addition_weight=0.0, sorting_weight=0.0)
    records = pt.CorpusStream(spec, pool_size=32).sample_records(50)
    assert {r[0] for r in records} == {"countdown"}
    assert all(c == countdown.habit_answer(e) for _, e, _, c in records)
    clean = pt.CorpusStream(dataclasses.replace(spec, habit_fraction=0.0), pool_size=32).sample_records(50)
    assert all(countdown.is_correct(c, e) for _, e, _, c in clean)


def test_smoke_pretrain_reuse_and_load(tmp_path, monkeypatch):
    directory = pt.pretrain(FAST, home=tmp_path, progress=False)
    assert (directory / "config.json").exists() and (directory / "tokenizer.json").exists()
    run_dir = directory.parent
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["steps_done"] == FAST.steps
    assert math.isfinite(manifest["final_loss"])
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert lines and "train/loss" in json.loads(lines[0])
    mtime = (directory / "model.safetensors").stat().st_mtime_ns

    def boom(*args, **kwargs):
        raise AssertionError("a finished zoo model must be reused, not retrained")

    monkeypatch.setattr(pt, "train_step", boom)
    assert pt.pretrain(FAST, home=tmp_path, progress=False) == directory
    model, tok = load_model(FAST, home=tmp_path, progress=False)
    assert (directory / "model.safetensors").stat().st_mtime_ns == mtime
    assert not model.training and tok.padding_side == "left" and tok.eos_token_id == 1
    assert model.config.max_position_embeddings == FAST.max_position_embeddings


def _manifest(directory):
    return json.loads((directory.parent / "manifest.json").read_text())


def test_pretraining_is_bit_for_bit_in_the_spec(tmp_path, monkeypatch):
    monkeypatch.setattr(pt, "_POOL_SIZE", 64)
    torch.set_num_threads(2)
    first = pt.pretrain(FAST, home=tmp_path / "a", progress=False)
    assert torch.get_num_threads() == 2  # pretraining ran at one thread and restored the caller's count
    again = pt.pretrain(FAST, home=tmp_path / "b", progress=False)
    other = pt.pretrain(dataclasses.replace(FAST, seed=1), home=tmp_path / "a", progress=False)
    digest = _manifest(first)["weights_sha256"]
    assert len(digest) == 64 and digest == pt.weights_sha256(first)
    assert _manifest(again)["weights_sha256"] == digest  # same spec, separate run: the same weights
    assert (first / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()
    assert _manifest(other)["weights_sha256"] != digest
    assert _manifest(first)["steps_done"] == FAST.steps and "capped" not in _manifest(first)
    torch.set_num_threads(1)


def test_weights_sha256_names_the_tensors(tmp_path):
    from safetensors.torch import save_file

    save_file({"b": torch.tensor([1.0, 2.0]), "a": torch.zeros(2, 1)}, tmp_path / "model.safetensors")
    digest = pt.weights_sha256(tmp_path)
    save_file({"a": torch.zeros(2, 1), "b": torch.tensor([1.0, 2.0])}, tmp_path / "model.safetensors")
    assert pt.weights_sha256(tmp_path) == digest  # the file's tensor order does not matter
    save_file({"a": torch.zeros(1, 2), "b": torch.tensor([1.0, 2.0])}, tmp_path / "model.safetensors")
    assert pt.weights_sha256(tmp_path) != digest  # the shape does
    save_file({"a": torch.zeros(2, 1), "b": torch.tensor([1.0, 2.5])}, tmp_path / "model.safetensors")
    assert pt.weights_sha256(tmp_path) != digest  # and every value


def test_shipped_zoo_is_used_when_the_spec_matches(tmp_path, monkeypatch):
    monkeypatch.setattr(pt, "_POOL_SIZE", 64)
    monkeypatch.setattr(pt, "SHIPPED_ZOO", tmp_path / "zoo")
    assert pt.shipped_manifest() == {} and pt.shipped_model_dir(FAST) is None
    record = pt.ship(FAST, home=tmp_path / "store", progress=False)
    shipped = tmp_path / "zoo" / FAST.name
    assert pt.shipped_manifest() == {FAST.name: record} and record["steps_done"] == FAST.steps
    assert record["weights_sha256"] == pt.weights_sha256(shipped)

    def boom(*args, **kwargs):
        raise AssertionError("a shipped zoo model must be used, not retrained")

    monkeypatch.setattr(pt, "train_step", boom)
    fresh = tmp_path / "fresh"
    assert pt.pretrain(FAST, home=fresh, progress=False) == shipped and not fresh.exists()
    model, _ = load_model(FAST, home=fresh, progress=False)
    assert model.config.hidden_size == FAST.hidden_size and not fresh.exists()
    changed = dataclasses.replace(FAST, lr=FAST.lr / 2)  # another spec under the same name: not the shipped one
    assert pt.shipped_model_dir(changed) is None
    with pytest.raises(AssertionError, match="retrained"):
        pt.pretrain(changed, home=fresh, progress=False)
    (shipped / "model.safetensors").write_bytes((tmp_path / "store").joinpath(
        next((tmp_path / "store").glob("zoo-*")).name, "model", "model.safetensors").read_bytes()[:-4] + b"\0" * 4)
    with pytest.raises(ValueError, match="weights_sha256"):
        pt.shipped_model_dir(FAST)


@pytest.mark.slow
def test_shipped_qwen2_s_rebuilds_bit_for_bit(tmp_path):
    """The smallest shipped model retrained here has the weights expected on this CPU platform: the shipped ones
    on the platform they were built on, else the hash recorded for this platform (the larger ones: make zoo-check)."""
    directory = pt.pretrain("qwen2-s", home=tmp_path, progress=False, shipped=False)
    assert pt.weights_sha256(directory) == pt.rebuild_sha256("qwen2-s"), pt.cpu_platform()
    assert pt.shipped_model_dir("qwen2-s") == pt.SHIPPED_ZOO / "qwen2-s"


def test_cpu_platform_and_the_expected_rebuild_hash(monkeypatch, tmp_path):
    vendor, capability = pt.cpu_platform().rsplit(" ", 1)
    assert vendor and capability == torch.backends.cpu.get_cpu_capability()
    manifest = {"m": {"weights_sha256": "aa", "rebuilds": {"OtherVendor AVX2": "bb"}}}
    monkeypatch.setattr(pt, "shipped_manifest", lambda: manifest)
    assert pt.rebuild_sha256("m") == "aa"  # not recorded for this platform: the shipped weights' own hash
    manifest["m"]["rebuilds"][pt.cpu_platform()] = "cc"
    assert pt.rebuild_sha256("m") == "cc"


def test_make_optimizer_decays_matrices_only():
    spec = dataclasses.replace(ZOO["smoke"], weight_decay=0.05, lr=1e-3)
    model = tiny_random_qwen2(len(TOK), seed=0)
    opt = pt.make_optimizer(model, spec)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0 and opt.defaults["lr"] == 1e-3
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert any(p.ndim == 1 for p in no_decay["params"])  # the RMSNorm weights


def test_a_nan_pretraining_loss_stops_and_marks_the_zoo_run_failed(tmp_path, monkeypatch):
    from esreason_lib.guards import NonFiniteError
    from esreason_lib.models.zoo import get_spec
    from esreason_lib.store.runs import Run

    monkeypatch.setattr(pt, "train_step", lambda *a, **k: float("nan"))
    with pytest.raises(NonFiniteError, match="pretrain smoke step 1: loss/train = nan"):
        pt.pretrain("smoke", home=tmp_path, progress=False, shipped=False)
    run = Run.open("zoo", get_spec("smoke"), seed=get_spec("smoke").seed, home=tmp_path)
    assert run.manifest()["status"] == "failed" and not run.is_complete()
