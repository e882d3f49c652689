"""A run that reads another run's output names it portably (`run:<kind>-<hash>/...`), so a moved store keeps
its identities; `relocate` renames runs stored under the older absolute-path identity after a move."""

from __future__ import annotations

import json
import shutil

import pytest

from esreason_lib.cli import main
from esreason_lib.models.load import load_model
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.store.identity import config_hash, portable_paths, resolve_run_ref, stored_config
from esreason_lib.store.integrity import RunStoreWarning
from esreason_lib.store.relocate import relocate
from esreason_lib.store.runs import Run, run_exists


def test_portable_paths_rewrites_paths_into_run_directories_only():
    cfg = {"model": "/a/b/store/grpo-0123456789/model", "snap": ["/x/es-abcdef0123/snapshots/step-000025"],
           "zoo": "qwen2-s", "dir": "/data/my-model", "rel": "grpo-0123456789/model", "n": 3}
    assert portable_paths(cfg) == {"model": "run:grpo-0123456789/model",
                                   "snap": ["run:es-abcdef0123/snapshots/step-000025"], "zoo": "qwen2-s",
                                   "dir": "/data/my-model", "rel": "grpo-0123456789/model", "n": 3}
    assert portable_paths(portable_paths(cfg)) == portable_paths(cfg)


def test_resolve_run_ref(tmp_path):
    assert resolve_run_ref("run:es-0123456789/model", tmp_path) == str(tmp_path / "es-0123456789" / "model")
    assert resolve_run_ref("qwen2-s", tmp_path) == "qwen2-s"


def _model_run(home, name="trained"):
    """A complete `es`-kind run holding a tiny model, and the absolute path of its model/."""
    run = Run.open("es", {"name": name}, seed=0, home=home)
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok))
    model.save_pretrained(run.model_dir)
    tok.save_pretrained(run.model_dir)
    run.finish()
    return run


def _eval_of(home, model_dir):
    run = Run.open("eval", {"model": str(model_dir), "n": 4}, seed=0, home=home)
    run.write_table("curve", __import__("pandas").DataFrame({"k": [1], "pass_at_k": [0.5]}))
    run.finish()
    return run


def test_an_evaluation_is_found_in_a_moved_store(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    trained = _model_run(a)
    ev = _eval_of(a, trained.model_dir)
    assert json.loads((ev.path / "config.json").read_text())["model"] == f"run:{trained.path.name}/model"
    shutil.copytree(a, b)
    moved = {"model": str(b / trained.path.name / "model"), "n": 4}
    assert run_exists("eval", moved, home=b)
    model, _ = load_model(f"run:{trained.path.name}/model", home=b)  # stored references load from the store
    assert sum(p.numel() for p in model.parameters()) > 0


def _legacy(run, config):
    """Rename `run` to where the identity with absolute paths (before portable_paths) put it."""
    old = stored_config(run.kind, config, portable=False)
    old_path = run.path.parent / f"{run.kind}-{config_hash(old)}"
    run.path.rename(old_path)
    (old_path / "config.json").write_text(json.dumps(old))
    manifest = json.loads((old_path / "manifest.json").read_text())
    (old_path / "manifest.json").write_text(json.dumps({**manifest, "config": old, "config_hash": old_path.name[-10:]}))
    return old_path


def test_absolute_path_runs_are_found_in_place_and_relocated_after_a_move(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    trained = _model_run(a)
    first = {"model": str(trained.model_dir), "n": 4}
    stage2 = _model_run(a, name=str(trained.model_dir))  # a run whose config names another run's model
    old_stage2 = _legacy(stage2, {"name": str(trained.model_dir)})
    second = {"model": str(old_stage2 / "model"), "n": 4}
    old_ev = _legacy(_eval_of(a, old_stage2 / "model"), second)
    assert run_exists("eval", second, home=a)  # in place: the older identity is still found
    assert Run.open("eval", second, seed=0, home=a).path == old_ev
    _legacy(_eval_of(a, trained.model_dir), first)

    shutil.copytree(a, b)
    moved = {"model": str(b / old_stage2.name / "model"), "n": 4}
    assert not run_exists("eval", moved, home=b)  # moved: absolute paths name other runs
    assert main(["relocate", "--home", str(b)]) == 0
    assert "3 run directories renamed" in capsys.readouterr().out
    new_stage2 = Run.open("es", {"name": str(b / trained.path.name / "model")}, seed=0, home=b)
    assert new_stage2.is_complete()
    assert run_exists("eval", {"model": str(new_stage2.model_dir), "n": 4}, home=b)
    assert run_exists("eval", {"model": str(b / trained.path.name / "model"), "n": 4}, home=b)
    assert relocate(b) == {}  # idempotent


@pytest.mark.parametrize("junk", ["not json", "[1, 2]"])
def test_relocate_skips_directories_without_a_readable_config(tmp_path, junk):
    (tmp_path / "es-0123456789").mkdir()
    (tmp_path / "es-0123456789" / "config.json").write_text(junk)
    with pytest.warns(RunStoreWarning, match=r"es-0123456789/config\.json: .*; ignored"):
        assert relocate(tmp_path) == {}


def _store_tree(root):
    """{relative path: bytes} of every file of a store (the journal and locks aside)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in (".lock", ".relocate.json")}


@pytest.mark.parametrize("kill_at", range(1, 10))  # 3 runs x (journal, manifest, config)
def test_a_killed_relocate_is_completed_by_the_next(tmp_path, monkeypatch, kill_at):
    """Killed at any write (journal, manifest, config) of any run: the next relocate ends where one whole
    relocate ends."""
    from esreason_lib.store import relocate as module

    a = tmp_path / "a"
    trained = _model_run(a)
    stage2 = _model_run(a, name=str(trained.model_dir))
    old_stage2 = _legacy(stage2, {"name": str(trained.model_dir)})
    _legacy(_eval_of(a, old_stage2 / "model"), {"model": str(old_stage2 / "model"), "n": 4})
    _legacy(_eval_of(a, trained.model_dir), {"model": str(trained.model_dir), "n": 4})
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    shutil.copytree(a, clean)
    shutil.copytree(a, killed)
    want = relocate(clean)
    calls, write = [], module._write_json

    def write_then_die(path, data):
        calls.append(path)
        if len(calls) == kill_at:
            raise KeyboardInterrupt
        write(path, data)

    monkeypatch.setattr(module, "_write_json", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        relocate(killed)
    monkeypatch.undo()
    relocate(killed)
    assert _store_tree(killed) == _store_tree(clean) and len(want) == 3
    assert not (killed / ".relocate.json").exists() and relocate(killed) == {}
