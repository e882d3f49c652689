"""Hostile command lines: each bad input is one `esreason: error:` line naming the field or file, exit status 2,
no traceback, and no run directory written; failures of the store (a file in place of a folder, a read-only or
full disk) are the same one line; a complete run is served from a read-only store."""

from __future__ import annotations

import errno
import json
import os
import re
import time

import pytest
import torch

from esreason_lib.cli import main
from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.store import integrity
from esreason_lib.store import runs as R
from esreason_lib.validation import check_step_size


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path))
    torch.set_num_threads(1)
    return tmp_path


def _one_error_line(capsys, pattern: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("esreason: error: "), captured.err
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in captured.err and captured.out == ""
    return lines[0]


_BAD_INPUTS = [
    (["es", "--set", "device=tpu9"], r"ESConfig\.device must be 'auto', 'cpu', 'cuda' .*got 'tpu9'"),
    (["es", "--set", 'task_kwargs={"bogus": 1}'], r"ESConfig\.task_kwargs \{'bogus': 1\} do not fit task "
                                                  r"'countdown': .*unexpected keyword argument 'bogus'"),
    (["es", "--set", "task_kwargs=[1, 2]"], r"ESConfig\.task_kwargs must be a dict or a tuple of \(str, value\) "
                                            r"pairs, got \(1, 2\)"),
    (["es", "--set", "task=nosuch"], r"unknown task 'nosuch'; choose one of"),
    (["grpo", "--set", "task=nosuch"], r"unknown task 'nosuch'; choose one of"),
    (["es", "--set", "model=/no/such/dir"], r"ESConfig\.model: '/no/such/dir' is not a zoo name .* no directory"),
    (["es", "--set", "task=addition", "--set", 'task_kwargs={"digits": 1}', "--set", "train_size=1000"],
     r"ESConfig\.train_size=1000: .*asked for n=1000 distinct 'train' problems but found only 90"),
    (["es", "--set", "max_new_tokens=100000"], r"ESConfig\.max_new_tokens must be below the model's context "
                                               r"length \(max_position_embeddings=64.*got 100000"),
    (["grpo", "--set", "max_new_tokens=64"], r"GRPOConfig\.max_new_tokens must be below .*=64.*got 64"),
    (["es", "--set", "alpha=1e300"], r"ESConfig\.alpha must be a finite float in \(0, 1\.0\], got 1e\+300"),
    (["grpo", "--set", "lr=1e4"], r"GRPOConfig\.lr must be a finite float in \(0, 1\.0\], got 10000\.0"),
    (["sequence", "--budget", "0"], r"total must be an int >= the number of stages \(2\), got 0"),
    (["es", "--budget", "5"], r"--budget applies to train sequence only"),
]


@pytest.mark.parametrize("argv, pattern", _BAD_INPUTS, ids=[" ".join(a) for a, _ in _BAD_INPUTS])
def test_bad_input_is_one_line_and_leaves_no_run_directory(argv, pattern, home, capsys):
    assert main(["train", *argv, "--preset", "smoke"]) == 2
    _one_error_line(capsys, pattern)
    assert list(home.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_cpu_machine(home, capsys):
    assert main(["train", "grpo", "--preset", "smoke", "--set", "device=cuda"]) == 2
    _one_error_line(capsys, r"GRPOConfig\.device='cuda', but this machine has 0 CUDA device\(s\)")
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("offline", [True, False])
def test_an_unknown_model_fails_fast_without_hub_retries(offline, home, capsys, monkeypatch):
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:  # the hub's host does not resolve from this sandbox; elsewhere it answers, and the repo does not exist
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    t0 = time.monotonic()
    assert main(["train", "es", "--preset", "smoke", "--set", "model=nosuchmodel"]) == 2
    assert time.monotonic() - t0 < 15
    _one_error_line(capsys, r"ESConfig\.model: unknown model 'nosuchmodel': not a zoo name .*"
                            + (r"HF_HUB_OFFLINE is set" if offline else ""))
    assert list(home.iterdir()) == []


def test_check_step_size_bounds():
    config = ESConfig(sigma=1.0, alpha=1e-12)
    check_step_size(config, "sigma", "alpha")
    for bad in (0.0, 1.5, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match=r"must be a finite float in \(0, 1\.0\]"):
            ESConfig(alpha=bad)
    with pytest.raises(ValueError, match=r"GRPOConfig\.lr must be a finite float in \(0, 1\.0\], got 10000"):
        GRPOConfig(lr=1e4)


@pytest.mark.parametrize("home_kind", ["file", "under-a-file"])
def test_esreason_home_that_is_or_is_under_a_file(home_kind, tmp_path, monkeypatch, capsys):
    (tmp_path / "f").write_text("x")
    home = tmp_path / "f" if home_kind == "file" else tmp_path / "f" / "store"
    monkeypatch.setenv("ESREASON_HOME", str(home))
    assert main(["train", "es", "--preset", "smoke", "--set", "iterations=1"]) == 2
    _one_error_line(capsys, f"cannot create the run directory {home}/")


def test_esreason_home_read_only(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "ro"))

    def read_only(path, *args, **kwargs):  # the tests run as root, where chmod does not stop writes
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(os, "mkdir", read_only)
    assert main(["train", "es", "--preset", "smoke", "--set", "iterations=1"]) == 2
    _one_error_line(capsys, r"cannot create the run directory .*\(Read-only file system\)")


# ---------------------------------------------------------------------------------- on a trained smoke run
_ARGV = ["train", "es", "--preset", "smoke", "--set", "iterations=2", "--set", "checkpoint_every=1",
         "--keep-checkpoints"]


@pytest.fixture(scope="module")
def trained(isolated_store):
    """The smoke ES run trained once by the CLI into the module's store; returns its directory."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ESREASON_HOME", str(isolated_store.store))
    assert main(_ARGV) == 0
    mp.undo()
    (path,) = [p for p in isolated_store.store.iterdir() if p.name.startswith("es-")]
    return path


@pytest.fixture
def store(isolated_store, monkeypatch):
    monkeypatch.setenv("ESREASON_HOME", str(isolated_store.store))
    return isolated_store.store


def test_a_complete_run_is_served_from_a_read_only_store(trained, store, monkeypatch, capsys):
    capsys.readouterr()
    before = {p: p.read_bytes() for p in trained.rglob("*") if p.is_file()}

    def no_writes(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(args[0]))

    monkeypatch.setattr(R, "atomic_write_bytes", no_writes)
    monkeypatch.setattr(integrity.os, "open", no_writes)
    monkeypatch.setattr(os, "mkdir", no_writes)
    assert main(_ARGV) == 0
    assert capsys.readouterr().out.strip() == str(trained)
    assert {p: p.read_bytes() for p in trained.rglob("*") if p.is_file()} == before


def test_checkpoints_replaced_by_a_file(trained, store, capsys):
    (trained / "manifest.json").rename(trained / "manifest.keep")
    checkpoints = trained / "checkpoints"
    checkpoints.rename(trained / "checkpoints.keep")
    checkpoints.write_text("not a folder")
    try:
        assert main(_ARGV) == 2
        _one_error_line(capsys, f"{checkpoints} must be a directory")
    finally:
        checkpoints.unlink()
        (trained / "checkpoints.keep").rename(checkpoints)
        (trained / "manifest.keep").rename(trained / "manifest.json")


def test_a_manifest_that_is_a_json_list_is_distrusted_and_the_run_rebuilt(trained, store, capsys):
    manifest = trained / "manifest.json"
    manifest.write_text("[1, 2]")
    assert main(_ARGV) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(trained) and "Traceback" not in captured.err
    assert re.search(r"esreason: warning: .*manifest\.json: expected a JSON object, got a list", captured.err)
    assert json.loads(manifest.read_text())["status"] == "complete"
    assert [json.loads(x)["step"] for x in (trained / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_disk_full_is_one_line_and_loses_nothing(trained, store, monkeypatch, capsys):
    (trained / "manifest.json").unlink()
    good = sorted(p.name for p in (trained / "checkpoints").iterdir())

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(integrity.os, "fsync", full)
    assert main(_ARGV) == 2
    _one_error_line(capsys, r"esreason: error: No space left on device")
    monkeypatch.undo()
    assert sorted(p.name for p in (trained / "checkpoints").iterdir()) == good  # no .tmp left, nothing lost
    assert not (trained / "manifest.json").exists()
    monkeypatch.setenv("ESREASON_HOME", str(store))
    assert main(_ARGV) == 0 and json.loads((trained / "manifest.json").read_text())["status"] == "complete"
    mask = os.umask(0o022)
    os.umask(mask)
    for path in (trained / "manifest.json", *(trained / "checkpoints").iterdir()):
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path  # not mkstemp's 0o600


# ---------------------------------------------------------------------------------- issue 24: sizes, loads, notebooks
@pytest.mark.parametrize("argv, pattern", [
    (["es", "--set", "population_size=10000", "--set", "prompts_per_step=100000", "--set", "iterations=1"],
     r"ESConfig\.population_size=10000 x prompts_per_step=100000 needs about \d+ GiB per step, more than the \d+ GiB "
     r"of memory"),
    (["grpo", "--set", "group_size=10000", "--set", "prompts_per_step=100000", "--set", "iterations=1"],
     r"GRPOConfig\.prompts_per_step=100000 x group_size=10000 needs"),
    # issue 35: beyond what any run can finish, refused while the config is built
    (["es", "--set", "population_size=10000000"], r"ESConfig\.population_size must be at most 10,000"),
    (["es", "--set", "prompts_per_step=100000000"], r"ESConfig\.prompts_per_step must be at most 100,000"),
    (["es", "--set", "iterations=1000000000000"], r"ESConfig\.iterations must be at most 1,000,000"),
    (["grpo", "--set", "group_size=10000000"], r"GRPOConfig\.group_size must be at most 10,000"),
    (["es", "--set", "task=gsm8k"], r"ESConfig\.task='gsm8k': the tokenizer of ESConfig\.model='smoke' cannot "
                                    r"encode \d+ character\(s\) of its prompts/answers"),
    (["es", "--backend", "vllm"], r"ESConfig\.backend='vllm' needs the `vllm` extra"),
])
def test_sizes_and_missing_extras_fail_fast_in_one_line(argv, pattern, home, capsys, monkeypatch, request):
    from esreason_lib.models.pretrain import pretrain

    if "task=gsm8k" in argv:
        request.getfixturevalue("shared_data")  # GSM8K's rows come from ../shared/data (skips where it is absent)
    pretrain("smoke", progress=False)  # the base, built quietly (its zoo run is the only directory allowed)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "vllm" else _find_spec(name, *a))
    capsys.readouterr()
    assert main(["train", *argv, "--preset", "smoke"]) == 2
    _one_error_line(capsys, pattern)
    assert not [p for p in home.iterdir() if not p.name.startswith("zoo-")]  # no run directory left behind


_find_spec = __import__("importlib.util").util.find_spec


def _saved_base(folder, *, truncate=False, tokenizer=True):
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    tok = build_char_tokenizer()
    tiny_random_qwen2(len(tok)).save_pretrained(folder)
    if tokenizer:
        tok.save_pretrained(folder)
    if truncate:
        (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:1000])
    return folder


@pytest.mark.parametrize("kind, pattern", [
    ("truncated", r"ESConfig\.model='.*' cannot be loaded \(SafetensorError: .*header"),
    ("no-tokenizer", r"ESConfig\.model='.*' has no tokenizer files"),
])
def test_a_broken_base_is_one_line_and_leaves_no_run_directory(kind, pattern, home, tmp_path, capsys):
    base = _saved_base(tmp_path / "base", truncate=kind == "truncated", tokenizer=kind != "no-tokenizer")
    capsys.readouterr()
    assert main(["train", "es", "--preset", "smoke", "--set", f"model={base}"]) == 2
    _one_error_line(capsys, pattern)
    assert not [p for p in home.iterdir() if p.name.startswith("es-")]


def test_the_tasks_default_budget_is_checked_against_the_models_context():
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
    from esreason_lib.training.inputs import check_inputs

    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok))
    task = type("Long", (), {"max_new_tokens": 512, "prompt": lambda self, ex, tok=None: ex["q"]})()
    context = model.config.max_position_embeddings
    with pytest.raises(ValueError, match=rf"ESConfig\.task='countdown' \(its default max_new_tokens\)=512 plus "
                                         rf"the longest train prompt \(3 tokens\) exceeds the context .*\({context} "
                                         rf"positions\); set max_new_tokens <= {context - 3}"):
        check_inputs(ESConfig(device="cpu"), model, tok, task, [{"id": "0", "q": "1+2"}])
    check_inputs(ESConfig(device="cpu", max_new_tokens=8), model, tok, task, [{"id": "0", "q": "1+2"}])


def test_a_full_disk_during_the_final_save_is_one_line(store, monkeypatch, capsys):
    from transformers import PreTrainedModel

    from esreason_lib.models.pretrain import pretrain

    pretrain("smoke", progress=False)  # the base is built before the disk fills

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full)
    assert main(["train", "es", "--preset", "smoke", "--set", "iterations=1", "--set", "seed=5"]) == 2
    _one_message(capsys, r"^esreason: error: No space left on device$")


def _one_message(capsys, pattern: str) -> None:
    """Exactly one `esreason:` line on stderr (besides progress bars), matching `pattern`; no traceback."""
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("esreason:")]
    assert len(lines) == 1 and re.search(pattern, lines[0]) and "Traceback" not in err, err


_NOTEBOOK = '''# %% tags=["parameters"]
preset = "tiny"
mode = "fine"

# %%
import os
from esreason_lib.store.runs import Run
if mode == "bad":
    raise ValueError(f"mode must be 'fine', got {mode!r}")
Run.open("es", {"x": 1}, seed=0)
'''


@pytest.mark.parametrize("why, env, pattern", [
    ("bad-parameter", {}, r"notebook 99_probe\.py failed in cell \d+: ValueError: mode must be 'fine', got 'bad'"),
    ("stored-only", {"ESREASON_STORED_ONLY": "1"},
     r"notebook 99_probe\.py failed in cell \d+: MissingResult: ESREASON_STORED_ONLY is set, and the es run .* is "
     r"not complete"),
])
def test_a_failing_notebook_is_its_own_error_line_and_leaves_no_output(why, env, pattern, home, tmp_path, capsys,
                                                                       monkeypatch):
    source = tmp_path / "99_probe.py"
    source.write_text(_NOTEBOOK.replace('mode = "fine"', 'mode = "bad"') if why == "bad-parameter" else _NOTEBOOK)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    assert main(["reproduce", str(source), "--out-dir", str(out), "--no-claims"]) == 2
    _one_message(capsys, "^esreason: error: " + pattern)
    assert not list(out.iterdir())


def test_ray_start_up_is_retried_then_one_line(monkeypatch):
    ray = pytest.importorskip("ray")
    from esreason_lib.es.backends import ray_cluster

    calls = []

    def slow_node(**kwargs):
        calls.append(kwargs)
        if len(calls) < 3:
            raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local start
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray, "init", slow_node)
    ray_cluster.start_ray(num_cpus=2)
    assert len(calls) == 3 and calls[-1]["num_cpus"] == 2
    assert calls[-1]["_system_config"]["worker_register_timeout_seconds"] >= 300
    calls.clear()
    monkeypatch.setattr(ray_cluster, "RAY_START_ATTEMPTS", 2)
    with pytest.raises(TimeoutError, match=r"^Ray did not start after 2 attempts \(The current node timed out "
                                           r"during startup\. .*\); the machine may be overloaded"):
        ray_cluster.start_ray()


def test_a_full_disk_inside_safetensors_is_one_line(trained, store, monkeypatch, capsys):
    """safetensors reports its own I/O errors (a full disk during the final save) as SafetensorError, no OSError."""
    from safetensors import SafetensorError
    from transformers import PreTrainedModel

    def full(self, *args, **kwargs):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
                              'left on device" })')

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full)  # the base is built: only the final save fails
    capsys.readouterr()
    assert main(["train", "es", "--preset", "smoke", "--set", "iterations=1", "--set", "seed=11"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("esreason:")]  # the rest is the progress bar
    assert len(errors) == 1 and "Traceback" not in err
    assert re.match(r"esreason: error: saving a model failed: Error while serializing: IoError.*StorageFull", errors[0])
