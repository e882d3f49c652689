"""Result bundles: a store's tables without weights, imported into another store, serve `make figures`
($ESREASON_STORED_ONLY) and nothing else."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pandas as pd
import pytest

from esreason_lib.cli import main
from esreason_lib.store.bundle import ARCHIVE, export_results, import_results
from esreason_lib.store.cache import cached
from esreason_lib.store.runs import STORED_ONLY, Run, run_exists


def _store(home):
    """A trained-model run (weights + metrics) and an evaluation of it (a table), and one finding record."""
    trained = Run.open("es", {"name": "m"}, seed=0, home=home)
    trained.model_dir.mkdir(parents=True, exist_ok=True)
    (trained.model_dir / "model.safetensors").write_bytes(b"weights")
    trained.log(1, {"reward/mean": 0.5})
    trained.finish()
    table = cached("eval", {"model": str(trained.model_dir)}, ("curve",),
                   lambda: {"curve": pd.DataFrame({"k": [1, 2], "pass_at_k": [0.25, 0.5]})}, seed=0, home=home)
    (home / "findings" / "powered").mkdir(parents=True)
    (home / "findings" / "powered" / "01.json").write_text('{"status": "reproduced"}')
    Run.open("es", {"name": "unfinished"}, seed=0, home=home)  # incomplete: not exported
    return trained, table["curve"]


def test_a_bundle_carries_tables_and_records_but_no_weights(tmp_path):
    trained, curve = _store(tmp_path / "a")
    path = export_results(tmp_path / "out", tmp_path / "a")
    with tarfile.open(path) as tar:
        names = tar.getnames()
    assert f"{trained.path.name}/metrics.jsonl" in names and "findings/powered/01.json" in names
    assert not any("/model/" in n or "unfinished" in n for n in names)
    assert export_results(tmp_path / "out2", tmp_path / "a").read_bytes() == path.read_bytes()  # deterministic


def test_imported_runs_serve_stored_reads_only(tmp_path, monkeypatch):
    trained, curve = _store(tmp_path / "a")
    export_results(tmp_path / "out", tmp_path / "a")
    fresh = tmp_path / "b"
    assert import_results(tmp_path / "out", fresh) == 2
    assert json.loads((fresh / "findings" / "powered" / "01.json").read_text()) == {"status": "reproduced",
                                                                                      "imported": True}
    model = {"model": str(fresh / trained.path.name / "model")}
    assert not run_exists("es", {"name": "m"}, home=fresh)  # outside figures: no weights, so not complete
    monkeypatch.setenv(STORED_ONLY, "1")
    assert run_exists("es", {"name": "m"}, home=fresh)
    assert Run.open("es", {"name": "m"}, seed=0, home=fresh).metrics()["reward/mean"].tolist() == [0.5]
    got = cached("eval", model, ("curve",), lambda: pytest.fail("recomputed"), seed=0, home=fresh)["curve"]
    pd.testing.assert_frame_equal(got, curve)


def test_import_never_overwrites_a_run_and_cli_round_trip(tmp_path, capsys):
    _store(tmp_path / "a")
    assert main(["export-results", str(tmp_path / "out"), "--home", str(tmp_path / "a")]) == 0
    assert main(["import-results", str(tmp_path / "out"), "--home", str(tmp_path / "a")]) == 0
    assert "0 run directories imported" in capsys.readouterr().out
    assert not json.loads(next((tmp_path / "a").glob("es-*/manifest.json")).read_text()).get("results_only")


def _archive(tmp_path, name):
    """A bundle whose manifest lists one member `name` holding "{}"."""
    index = {"format": 2, "files": {name: {"sha256": hashlib.sha256(b"{}").hexdigest(), "size": 2}}}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for member, data in (("bundle.json", json.dumps(index).encode()), (name, b"{}")):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / ARCHIVE).write_bytes(buffer.getvalue())


@pytest.mark.parametrize("name", ["/etc/x.json", "../x.json", "es-0123456789/../../x.json", "notes/x.json",
                                  "es-0123456789/model/model.safetensors", "es-0123456789/checkpoints/step-1.pt",
                                  "es-0123456789/notes.txt"])
def test_import_refuses_entries_outside_run_directories(tmp_path, name):
    _archive(tmp_path, name)
    with pytest.raises(ValueError, match="not a plain file of a run's tables or findings/"):
        import_results(tmp_path, tmp_path / "store")
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


def test_export_and_import_errors_name_the_place(tmp_path):
    with pytest.raises(ValueError, match="holds no complete run"):
        export_results(tmp_path / "out", tmp_path / "empty")
    with pytest.raises(ValueError, match="no result bundle at"):
        import_results(tmp_path / "nothing", tmp_path / "store")
