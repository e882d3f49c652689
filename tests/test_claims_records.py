"""Finding records are read as untrusted (issue 35): a malformed record is skipped with a warning naming it, a
record imported from a result bundle reads the same as a computed one (its mark stays in the record, so a fresh
clone's `make figures` leaves the tree clean), and claims.md / the README are written
atomically (a failed write leaves them as they were)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from esreason_lib.paper import claims, records
from esreason_lib.store.integrity import RunStoreWarning

GOOD = {"id": "05_forgetting", "status": "not reproduced", "sentence": "kept", "preset": "tiny",
        "time": "2026-12-01T00:00:00+00:00"}


def _write(home, record):
    path = home / "findings" / "05_forgetting.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    return path


@pytest.mark.parametrize("record", [[GOOD], {k: v for k, v in GOOD.items() if k != "time"},
                                    {**GOOD, "status": "proven"}, {**GOOD, "preset": None}, "{not json"])
def test_a_malformed_record_is_skipped_with_a_warning_naming_it(tmp_path, record):
    path = _write(tmp_path, record)
    with pytest.warns(RunStoreWarning, match=str(path)):
        table = claims.render_claims(tmp_path)
        assert records.read_record("05_forgetting", None, tmp_path) is None
    row = next(line for line in table.splitlines() if "05_forgetting" in line)
    assert "not run yet" in row


def test_an_imported_record_reads_as_a_computed_one(tmp_path):
    _write(tmp_path, GOOD)
    computed = claims.render_claims(tmp_path)
    assert "kept (preset `tiny`, 2026-12-01) |" in computed
    _write(tmp_path, {**GOOD, "imported": True})
    assert claims.render_claims(tmp_path) == computed


def test_claims_are_written_atomically(tmp_path, monkeypatch):
    _write(tmp_path, GOOD)
    table, readme = tmp_path / "claims.md", tmp_path / "README.md"
    readme.write_text("intro\n<!-- claims:start -->\nold\n<!-- claims:end -->\n")
    claims.write_claims(tmp_path, claims_path=table, readme_path=readme)
    before = table.read_bytes(), readme.read_bytes()
    _write(tmp_path, {**GOOD, "sentence": "changed"})

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(claims, "atomic_write_bytes", full)
    with pytest.raises(OSError, match="No space left"):
        claims.write_claims(tmp_path, claims_path=table, readme_path=readme)
    assert (table.read_bytes(), readme.read_bytes()) == before
