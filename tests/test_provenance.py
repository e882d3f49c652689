"""Nothing forged or stale gets through (issue 47, items 1, 4 and 7): a bundle is checked against its own records
and against the digest the reviewed claims file names; a design record stores its registration, a dirty
registration is refused and a late one marked; concurrent imports both complete; the importer takes only what a
bundle exports."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import threading

import pandas as pd
import pytest

from esreason_lib.paper import claims, design_tallies, provenance, records
from esreason_lib.paper.findings import Check, make_finding
from esreason_lib.paper.provenance import BundleMismatch, carried, first_difference, registered_late, registration
from esreason_lib.store import bundle
from esreason_lib.store.bundle import DIGEST, REVIEWED_LINE, export_results, import_results, shown_name
from esreason_lib.store.cache import cached
from esreason_lib.store.runs import STORED_ONLY, Run

FINDING = "05_forgetting"


def _redraw(home):
    """A study in miniature: the finding computed from the stored evaluation table (the effect is its Pass@1)."""
    table = cached("eval", {"model": "es"}, ("curve",), lambda: {"curve": pd.DataFrame({"k": [1], "pass": [0.5]})},
                   seed=0, home=home)["curve"]
    effect = float(table["pass"].iloc[0])
    return records.record_finding(FINDING, make_finding("es", [Check("e", effect, effect - 0.1, effect + 0.1, 0.05)]),
                                 preset="tiny", home=home)


def _members(archive):
    with tarfile.open(archive) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar]


def _forge(archive, edit, extra=()):
    """Rewrite the bundle with `edit(name, data)` applied to each member and the `extra` members added, and both
    hash files as `make results` writes them (the bundle manifest and runs.tar.xz.sha256): what a forger who knows
    the format does."""
    members = [(n, edit(n, d)) for n, d in _members(archive) if n != "bundle.json"] + list(extra)
    files = {n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in members}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for name, data in [("bundle.json", json.dumps({"format": 2, "files": files}).encode()), *members]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(buffer.getvalue())
    (archive.parent / DIGEST).write_text(f"{bundle.sha256_file(archive)}  {archive.name}\n")


def _reviewed(tmp_path, archive):
    """A reviewed claims file that names `archive`'s sha256 as `claims` writes it."""
    path = tmp_path / "claims.md"
    path.write_text("# Findings\n\n" + REVIEWED_LINE.format(name=shown_name(archive),
                                                           digest=bundle.sha256_file(archive)) + "\n\n| table |\n")
    return path


@pytest.fixture
def published(tmp_path):
    """A small store (one evaluation table, the finding drawn from it) exported as a bundle, and the reviewed
    claims file naming its digest."""
    _redraw(tmp_path / "a")
    archive = export_results(tmp_path / "out", tmp_path / "a")
    return archive, _reviewed(tmp_path, archive)


def _flip_table(name, data):
    return data.replace(b"0.5", b"1.0") if name.endswith(".csv") else data


def test_a_forged_bundle_is_refused_by_the_reviewed_digest(published, tmp_path):
    archive, reviewed = published
    assert import_results(archive.parent, tmp_path / "ok", require_digest=True, reviewed=reviewed) == 1
    _forge(archive, _flip_table)
    bundle.check_digest(archive)  # both hash files rewritten: the bundle matches its own digest
    with pytest.raises(ValueError, match="sha256 is not the one .*claims.md names for it") as err:
        import_results(archive.parent, tmp_path / "b", require_digest=True, reviewed=reviewed)
    assert "\n" not in str(err.value) and not (tmp_path / "b").exists()
    reviewed.write_text("no digest line\n")
    with pytest.raises(ValueError, match="it names none"):
        import_results(archive.parent, tmp_path / "b", require_digest=True, reviewed=reviewed)


def test_a_forged_bundle_past_review_stops_the_redraw_naming_the_difference(published, tmp_path, monkeypatch):
    """The tables forged, the record not (or the other way round): `make figures` stops at the first record whose
    redraw from the bundle's tables is not the bundle's record of it, and writes nothing."""
    archive, _ = published
    _forge(archive, _flip_table)
    home = tmp_path / "b"
    import_results(archive.parent, home, require_digest=True, reviewed=_reviewed(tmp_path, archive))
    record = home / "findings" / f"{FINDING}.json"
    before = record.read_bytes()
    monkeypatch.setenv(STORED_ONLY, "1")
    with pytest.raises(BundleMismatch, match=r"05_forgetting.*at checks\[0\]\.ci_high: 0.6 != 1\.1") as err:
        _redraw(home)
    assert "\n" not in str(err.value) and record.read_bytes() == before


def test_an_honest_bundle_redraws_to_its_own_records_and_keeps_their_mark(published, tmp_path, monkeypatch):
    archive, reviewed = published
    home = tmp_path / "b"
    import_results(archive.parent, home, require_digest=True, reviewed=reviewed)
    record = home / "findings" / f"{FINDING}.json"
    before = json.loads(record.read_text())
    monkeypatch.setenv(STORED_ONLY, "1")
    _redraw(home)
    after = json.loads(record.read_text())
    assert after == before and after[bundle.IMPORTED] is True
    assert "(imported)" not in claims.render_claims(home)  # the mark stays in the record: claims.md reads the same


def test_carried_outside_stored_only_recomputes_a_changed_imported_record(monkeypatch):
    monkeypatch.delenv(STORED_ONLY, raising=False)
    stored = {"id": "x", "status": "reproduced", "time": "2020-01-01T00:00:00+00:00", bundle.IMPORTED: True}
    out = carried({"id": "x", "status": "not resolved"}, stored, registered=False)
    assert bundle.IMPORTED not in out and out["time"] != stored["time"]
    same = carried({"id": "x", "status": "reproduced"}, stored, registered=False)
    assert same == {"time": stored["time"], bundle.IMPORTED: True}
    monkeypatch.setenv(STORED_ONLY, "1")
    with pytest.raises(BundleMismatch, match="at status: 'reproduced' != 'not resolved'"):
        carried({"id": "x", "status": "not resolved"}, stored, registered=False)
    assert carried({"id": "x", "status": "y"}, {}, registered=False).keys() == {"time"}  # nothing imported


def test_first_difference_by_hand():
    assert first_difference({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2]}) is None
    assert first_difference({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 3]}) == "b[1]: 2 != 3"
    assert first_difference({"a": 1}, {"a": 1, "c": 0}) == "c: absent != present"
    assert first_difference([1], [1, 2]) == ": 1 items != 2"
    assert first_difference({"x": {"y": 1}}, {"x": {"y": 1.0}}) == "x.y: 1 != 1.0"


def _git(repo, *args):
    env = {**os.environ, "GIT_COMMITTER_DATE": "2026-01-02T04:04:05+01:00"}
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True, env=env)


def test_a_registration_records_its_commit_date_and_hash_and_a_dirty_one_is_refused(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    path = repo / "preregistration.md"
    path.write_text("delta 0.02\n")
    with pytest.raises(ValueError, match="preregistration.md differs from its last commit \\(never committed\\)"):
        registration(path)
    _git(repo, "add", "preregistration.md")
    _git(repo, "commit", "-q", "-m", "register")
    fields = registration(path)
    assert fields["registration_sha256"] == hashlib.sha256(b"delta 0.02\n").hexdigest()
    assert len(fields["registered_commit"]) == 40 and fields["registered_at"] == "2026-01-02T03:04:05+00:00"
    path.write_text("delta 0.01\n")  # an edit not committed: no run may test it
    with pytest.raises(ValueError, match="differs from its last commit \\(edited since [0-9a-f]{12}\\)") as err:
        registration(path)
    assert "\n" not in str(err.value)


def test_an_appended_deviations_section_keeps_the_registered_commit(tmp_path):
    """Appending the dated Deviations section leaves the registration where it was (its commit, date and the
    registered text's hash); an edit of the registered text above it moves the registration to that commit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    path = repo / "preregistration.md"
    path.write_text("delta 0.02\n")
    _git(repo, "add", "preregistration.md")
    _git(repo, "commit", "-q", "-m", "register")
    registered = registration(path)
    path.write_text("delta 0.02\n\n## Deviations (dated)\n\n- 2026-12-07: a rule changed\n")
    _git(repo, "commit", "-q", "-am", "deviations")
    assert registration(path) == registered  # the same commit, date and hash of the registered text
    path.write_text("delta 0.01\n\n## Deviations (dated)\n\n- 2026-12-07: a rule changed\n")
    _git(repo, "commit", "-q", "-am", "re-registered")
    moved = registration(path)
    assert moved["registered_commit"] != registered["registered_commit"]
    assert moved["registration_sha256"] == hashlib.sha256(b"delta 0.01\n").hexdigest()


def test_a_design_redraw_compares_without_its_registration(tmp_path, monkeypatch):
    """A design setting's record keeps its first-measured time when only the registration's commit moved; claims
    marks a registration committed after that time."""
    commits = iter(["a" * 40, "b" * 40])
    monkeypatch.setattr(provenance, "registration", lambda path=None: {
        "registered_commit": next(commits), "registered_at": "2030-01-01T00:00:00+00:00",
        "registration_sha256": "0" * 64})
    f = make_finding("x", [Check("c", 0.15, 0.1, 0.2, 0.05)])
    path = records.record_finding("01_passk_es_vs_grpo", f, preset="frontier-clean", home=tmp_path)
    first = json.loads(path.read_text())
    path.write_text(json.dumps({**first, "time": "2026-01-01T00:00:00+00:00"}))
    records.record_finding("01_passk_es_vs_grpo", f, preset="frontier-clean", home=tmp_path)
    again = json.loads(path.read_text())
    assert again["time"] == "2026-01-01T00:00:00+00:00" and again["registered_commit"] == "b" * 40
    assert "(registered 2030-01-01, after this result was first measured)" in design_tallies.render_design("frontier",
                                                                                                    tmp_path)


def test_registered_late_by_hand():
    assert registered_late({"registered_at": "2026-02-01T00:00:00+00:00", "time": "2026-01-01T00:00:00+00:00"}) == \
        " (registered 2026-02-01, after this result was first measured)"
    assert registered_late({"registered_at": "2026-01-01T00:00:00+00:00", "time": "2026-02-01T00:00:00+00:00"}) == ""
    assert registered_late({"time": "2026-02-01T00:00:00+00:00"}) == "" and registered_late(None) == ""
    assert registered_late({"registered_at": "garbage", "time": "2026-02-01"}) == ""


def test_two_imports_of_one_bundle_at_once_both_complete(published, tmp_path):
    archive, _ = published
    for attempt in range(3):
        home, errors = tmp_path / f"store{attempt}", []
        barrier = threading.Barrier(2)

        def run(home=home, barrier=barrier, errors=errors):
            barrier.wait()
            try:
                import_results(archive.parent, home)
            except Exception as err:  # noqa: BLE001 (collected, asserted below)
                errors.append(err)

        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and len(list(home.glob("eval-*/manifest.json"))) == 1
        assert (home / "findings" / f"{FINDING}.json").is_file() and not list(home.glob(".import-*"))


def test_placing_a_run_another_import_placed_first_keeps_it(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "manifest.json").write_text("{}")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "x").write_text("x")
    bundle._place(tmp_path / "mine", tmp_path / "target")  # kept; the leftover is the caller's to remove
    assert (tmp_path / "target" / "manifest.json").is_file() and not (tmp_path / "target" / "x").exists()
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "y").write_text("y")  # not a run: the error is kept
    with pytest.raises(OSError):
        bundle._place(tmp_path / "mine", tmp_path / "half")


@pytest.mark.parametrize("member", ["zoo-0123456789/config.json", "findings/a/b/05.json", "findings/.x/05.json"])
def test_the_importer_takes_only_what_a_bundle_exports(published, tmp_path, member):
    archive, _ = published
    _forge(archive, lambda n, d: d, extra=[(member, b"{}")])
    with pytest.raises(ValueError, match=r"findings/\[<preset>/\]<id>.json \(never a zoo run\)"):
        import_results(archive.parent, tmp_path / "b")
    assert not (tmp_path / "b").exists() or not list((tmp_path / "b").glob("eval-*"))


def test_export_leaves_zoo_runs_out(tmp_path):
    home = tmp_path / "a"
    cached("eval", {"model": "x"}, ("t",), lambda: {"t": pd.DataFrame({"x": [1]})}, seed=0, home=home)
    zoo = Run.open("zoo", {"model": "z"}, seed=0, home=home)
    zoo.model_dir.mkdir(parents=True, exist_ok=True)
    (zoo.model_dir / "w.bin").write_bytes(b"w")
    zoo.finish()
    assert (home / zoo.path.name / "manifest.json").is_file()
    names = {n.split("/")[0].split("-")[0] for n, _ in _members(export_results(tmp_path / "out", home))}
    assert names == {"bundle.json", "eval"}


def test_claims_header_names_the_committed_bundles():
    lines = bundle.reviewed_lines()
    assert lines == [REVIEWED_LINE.format(name="papers/results/runs.tar.xz",
                                          digest=(bundle.RESULTS_DIR / DIGEST).read_text().split()[0])]


def test_write_claims_puts_the_digest_in_the_header(tmp_path):
    records.record_finding(FINDING, make_finding("x", [Check("e", 0.2, 0.1, 0.3, 0.05)]), preset="tiny", home=tmp_path)
    out = tmp_path / "claims.md"
    claims.write_claims(tmp_path, claims_path=out, readme_path=None)
    header = out.read_text().split("| finding |")[0]
    assert all(line in header.splitlines() for line in bundle.reviewed_lines()) and bundle.reviewed_lines()


def test_a_draft_registration_is_refused_before_any_run(tmp_path):
    from esreason_lib.paper.provenance import DRAFT_MARK, registration

    draft = tmp_path / "preregistration-x.md"
    draft.write_text(f"{DRAFT_MARK} (not registered): a design\n\nsizes to be measured\n")
    with pytest.raises(ValueError, match="preregistration-x.md is a draft .*nothing written"):
        registration(draft)
