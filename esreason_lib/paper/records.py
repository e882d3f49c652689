"""Finding records: where a preset's records live, writing one from a study's `Finding`, reading one back.

Each notebook ends by calling `record_finding(id, finding, preset=...)` with the `findings.Finding` its study
computed (status, sentence, tests and checks; never typed by hand). Each preset's records are kept apart
(`findings/` for tiny, `findings/<preset>/` for any other: `paths.findings_dir`), so a run at one preset never
changes another's. A record keeps the time its result was first measured: a redraw that computes the same finding
(`make figures`) leaves it byte-identical. A record of a setting of a design names the commit that last changed
the design's registration (`provenance.DESIGN_REGISTRATIONS`), with its date and sha256 (`provenance.registration`).
Records are read as untrusted: a malformed one is skipped with a warning naming it (`read_record`).
`paper.claims` renders them; this module only stores and reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from esreason_lib.paper.findings import Check, Finding
from esreason_lib.paper.provenance import DESIGN_REGISTRATIONS, carried
from esreason_lib.paper.status import STATUSES
from esreason_lib.paper.studies.presets import DESIGNS
from esreason_lib.paper.studies.registry import claim
from esreason_lib.paths import findings_dir
from esreason_lib.store.integrity import atomic_write_bytes, read_json, warn_store

DESIGN_OF = {s: design for design, settings in DESIGNS.items() for s in settings}
"""{setting: the design it belongs to} for every setting of `presets.DESIGNS`."""
DESIGN_SETTINGS = tuple(DESIGN_OF)
"""The presets that are settings of a design (their records name their registration commit)."""


def records_dir(preset: str | None = None, home: str | Path | None = None) -> Path:
    """Where the finding records of `preset` live: `findings/` for tiny (or None), `findings/<preset>/` for any
    other (`paths.findings_dir`)."""
    return findings_dir(home, preset)


def record_path(finding_id: str, preset: str | None = None, home: str | Path | None = None) -> Path:
    """Where the record of `finding_id` under `preset` lives (in `records_dir(preset, home)`)."""
    return records_dir(preset, home) / f"{finding_id}.json"


def read_record(finding_id: str, preset: str | None = None, home: str | Path | None = None) -> dict | None:
    """The stored record, or None when that scale was never run; a malformed record (not JSON, not an object, an
    unknown status, no time or preset) is skipped as if absent, with a warning naming it."""
    path = record_path(finding_id, preset, home)
    record = read_json(path)
    if record is None:
        return None
    if not (record.get("status") in STATUSES and isinstance(record.get("time"), str) and
            isinstance(record.get("preset"), str)):
        warn_store(f"{path}: not a finding record (status {record.get('status')!r:.40}, time or preset missing); "
                   "skipped")
        return None
    return record


def test_statuses(rec: dict | None) -> dict[str, str]:
    """{role: status} of a record's tests (empty for a record written before tests existed, or None)."""
    return {t["role"]: t["status"] for t in (rec or {}).get("tests", [])}


def stored_check(record: dict, name: str) -> Check:
    """The `findings.Check` named `name` in `record`, rebuilt from its stored fields (the computed status and
    reason, and keys a `Check` does not have, are dropped; records written before checks carried an operating
    characteristic lack `fixed` and `oc`); KeyError naming the check when the record has none of that name."""
    fields = set(Check.__dataclass_fields__)
    stored = next((c for c in record.get("checks", []) if c.get("name") == name), None)
    if stored is None:
        raise KeyError(f"record {record.get('id')!r} ({record.get('preset')}) has no check named {name!r}")
    kw = {k: v for k, v in stored.items() if k in fields}
    kw["seed_effects"] = tuple(kw.get("seed_effects", ()))
    for key in ("components", "oc"):
        kw[key] = None if kw.get(key) is None else tuple(kw[key])
    return Check(**kw)


def record_finding(finding_id: str, finding: Finding, *, preset: str, home: str | Path | None = None) -> Path:
    """Store the computed `finding` (status, sentence, checks) for `finding_id` (one of `registry.CLAIMS`) in
    `preset`'s records. Its `time` is when this result was first measured: the stored record's time when the record
    held the same finding (a redraw from stored results), else now; such a redraw of a record imported from a result
    bundle keeps its imported mark too, and under `make figures` must be that record (`provenance.carried`)."""
    claim(finding_id)  # ValueError naming the known ids
    if not isinstance(finding, Finding):
        raise TypeError(f"finding must be a findings.Finding (a study's `finding(...)`), got {type(finding).__name__}")
    path = record_path(finding_id, preset, home)
    record = {"id": finding_id, **finding.to_json(), "preset": preset}
    registered = preset in DESIGN_SETTINGS
    record.update(carried(record, read_record(finding_id, preset, home) or {}, registered=registered,
                          **({"registration_path": DESIGN_REGISTRATIONS[DESIGN_OF[preset]]} if registered else {})))
    atomic_write_bytes(path, json.dumps(record, indent=1).encode())  # fsynced: a full disk leaves the last record
    return path
