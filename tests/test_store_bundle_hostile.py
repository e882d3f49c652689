"""A result bundle is data from outside (issue 35): tampered, forged, oversized, malformed and killed imports
are refused or completed without a half-written run, and export refuses what is not a plain file of the store."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from esreason_lib.cli import main
from esreason_lib.store import bundle
from esreason_lib.store.bundle import ARCHIVE, DIGEST, export_results, import_results
from esreason_lib.store.cache import cached
from esreason_lib.store.runs import STORED_ONLY, run_exists

REPO = Path(__file__).resolve().parents[1]


def _store(home):
    """Two evaluation runs (tables) and one finding record."""
    for name in ("a", "b"):
        cached("eval", {"model": name}, ("curve",), lambda: {"curve": pd.DataFrame({"k": [1], "pass": [0.5]})},
               seed=0, home=home)
    (home / "findings").mkdir()
    (home / "findings" / "05.json").write_text('{"status": "not reproduced"}')


def _members(archive):
    with tarfile.open(archive) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar]


def _rewrite(archive, members, *, reindex=False):
    """Write `members` [(name, bytes)] as the bundle (with `reindex`, a bundle.json recomputed to match them)."""
    if reindex:
        files = {n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in members if n != "bundle.json"}
        members = [("bundle.json", json.dumps({"format": 2, "files": files}).encode())] + [
            (n, d) for n, d in members if n != "bundle.json"]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(buffer.getvalue())


@pytest.fixture
def exported(tmp_path):
    _store(tmp_path / "a")
    return export_results(tmp_path / "out", tmp_path / "a")


def _nothing_imported(home):
    return not home.exists() or not [p for p in home.iterdir()]


def test_export_writes_a_manifest_first_and_the_digest_beside(exported):
    members = _members(exported)
    assert members[0][0] == "bundle.json"
    index = json.loads(members[0][1])["files"]
    assert {n for n, _ in members[1:]} == set(index)
    assert all(index[n]["sha256"] == hashlib.sha256(d).hexdigest() for n, d in members[1:])
    assert (exported.parent / DIGEST).read_text() == f"{bundle.sha256_file(exported)}  {ARCHIVE}\n"


def test_an_edited_table_is_refused(exported, tmp_path):
    members = _members(exported)
    edited = [(n, d.replace(b"0.5", b"0.9") if n.endswith(".csv") else d) for n, d in members]
    _rewrite(exported, edited)
    with pytest.raises(ValueError, match="does not list with this sha256"):
        import_results(exported.parent, tmp_path / "b")
    assert _nothing_imported(tmp_path / "b")


def test_a_forged_config_that_does_not_hash_to_its_name_is_refused(exported, tmp_path):
    members = [(n, json.dumps({"model": "forged"}).encode() if n.endswith("config.json") else d)
               for n, d in _members(exported)]
    _rewrite(exported, members, reindex=True)  # a forger recomputes the bundle manifest
    with pytest.raises(ValueError, match="does not hash to its name"):
        import_results(exported.parent, tmp_path / "b")
    assert _nothing_imported(tmp_path / "b")


def test_imported_runs_are_marked_and_never_trained_or_computed(exported, tmp_path, monkeypatch):
    """A manifest without results_only (and claiming model files) is rewritten by the importer."""
    members = []
    for n, d in _members(exported):
        if n.endswith("manifest.json"):
            m = json.loads(d)
            m.pop("results_only")
            d = json.dumps({**m, "model_files": {"model.safetensors": "0" * 64}}).encode()
        members.append((n, d))
    _rewrite(exported, members, reindex=True)
    fresh = tmp_path / "b"
    assert import_results(exported.parent, fresh) == 2
    for manifest in fresh.glob("eval-*/manifest.json"):
        m = json.loads(manifest.read_text())
        assert m["results_only"] and m["imported"] and "model_files" not in m
    assert not run_exists("eval", {"model": "a"}, home=fresh)  # not computed for train --eval
    monkeypatch.setenv(STORED_ONLY, "1")
    assert run_exists("eval", {"model": "a"}, home=fresh)  # make figures reads it
    assert json.loads((fresh / "findings" / "05.json").read_text())["imported"] is True


@pytest.mark.parametrize("content", [b"", b"not xz at all", "truncated"])
def test_an_empty_truncated_or_foreign_bundle_is_one_line(exported, tmp_path, content):
    exported.write_bytes(exported.read_bytes()[:300] if content == "truncated" else content)
    with pytest.raises(ValueError, match="not a readable result bundle|does not begin with a bundle.json") as err:
        import_results(exported.parent, tmp_path / "b")
    assert "\n" not in str(err.value)
    assert not [p for p in (tmp_path / "b").iterdir() if not p.name.startswith(".lock")]


def test_an_old_bundle_without_manifest_is_refused(exported, tmp_path):
    _rewrite(exported, _members(exported)[1:])
    with pytest.raises(ValueError, match="does not begin with a bundle.json"):
        import_results(exported.parent, tmp_path / "b")


def test_a_member_missing_from_the_bundle_is_refused(exported, tmp_path):
    _rewrite(exported, _members(exported)[:-1])
    with pytest.raises(ValueError, match="lacks .* \\(truncated\\)"):
        import_results(exported.parent, tmp_path / "b")
    assert not list((tmp_path / "b").glob("eval-*"))


def test_sizes_are_refused_from_the_header_before_unpacking(exported, tmp_path, monkeypatch):
    members = _members(exported)
    run = next(n for n, _ in members if n.endswith("config.json")).split("/")[0]
    _rewrite(exported, members + [(f"{run}/results/big.csv", b"1," * 4000)], reindex=True)
    monkeypatch.setattr(bundle, "MAX_MEMBER_BYTES", 5000)  # stands for 64 MiB against a 1 GiB member
    with pytest.raises(ValueError, match="big.csv' of 8000 bytes, over the limit of 5000 per member"):
        import_results(exported.parent, tmp_path / "b")
    assert not list((tmp_path / "b").glob("*eval-*")) and not list((tmp_path / "b").glob(".import-*"))
    monkeypatch.undo()
    monkeypatch.setattr(bundle, "MAX_TOTAL_BYTES", 3000)
    with pytest.raises(ValueError, match="or 3000 in all"):
        import_results(exported.parent, tmp_path / "b")


def test_a_killed_import_leaves_whole_runs_and_the_next_completes_it(exported, tmp_path, monkeypatch):
    fresh = tmp_path / "b"
    calls = []

    def rename_then_die(src, dst):
        if calls:
            raise KeyboardInterrupt  # killed between the first and the second run
        calls.append(dst)
        os.replace(src, dst)

    monkeypatch.setattr(bundle.os, "rename", rename_then_die)
    with pytest.raises(KeyboardInterrupt):
        import_results(exported.parent, fresh)
    monkeypatch.undo()
    runs = list(fresh.glob("eval-*"))
    assert len(runs) == 1 and (runs[0] / "manifest.json").is_file() and not list(fresh.glob(".import-*"))
    (fresh / ".import-999999999-x" / "eval-0123456789").mkdir(parents=True)  # left by a SIGKILL
    assert import_results(exported.parent, fresh) == 1
    assert len(list(fresh.glob("eval-*"))) == 2 and not list(fresh.glob(".import-*"))


def test_export_refuses_a_fifo_and_a_link_out_of_the_store(tmp_path):
    _store(tmp_path / "a")
    run = next((tmp_path / "a").glob("eval-*"))
    os.mkfifo(run / "results" / "extra.csv")
    with pytest.raises(ValueError, match="extra.csv is a FIFO"):
        export_results(tmp_path / "out", tmp_path / "a")
    (run / "results" / "extra.csv").unlink()
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    (run / "results" / "leak.csv").symlink_to(secret)
    with pytest.raises(ValueError, match="leak.csv is a symbolic link"):
        export_results(tmp_path / "out", tmp_path / "a")
    assert not (tmp_path / "out" / ARCHIVE).exists()


def test_make_figures_refuses_a_bundle_that_does_not_match_its_digest(exported, tmp_path, capsys):
    out = str(exported.parent)
    assert main(["import-results", "--require-sha256", out, "--home", str(tmp_path / "b")]) == 0
    exported.write_bytes(exported.read_bytes() + b"\0")
    assert main(["import-results", "--require-sha256", out, "--home", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not match the sha256" in err
    (exported.parent / DIGEST).unlink()
    with pytest.raises(ValueError, match="has no runs.tar.xz.sha256"):
        import_results(out, tmp_path / "c", require_digest=True)
    assert _nothing_imported(tmp_path / "c")


def test_the_committed_bundle_matches_its_committed_digest():
    bundle.check_digest(REPO / "papers" / "results" / ARCHIVE)
