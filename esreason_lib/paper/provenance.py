"""Where a finding record comes from: the fields `records.record_finding` carries over or adds beside the finding
it computed, and the checks that keep a forged bundle or an edited registration from passing as a result.

A record's *finding* is everything but its provenance (`PROVENANCE`: when it was first measured, whether it came
from a result bundle, which registration it tests); two records hold the same finding when those parts are equal.
  - a redraw of the same finding keeps the stored record's `time` (when it was first measured) and its imported
    mark (`store.bundle.IMPORTED`);
  - under `$ESREASON_STORED_ONLY` (`make figures`: nothing is computed, every table is read from the store) a
    redraw of an imported record must be the same finding: a bundle whose tables do not give its own records
    (edited tables, or a record written beside them) stops with `BundleMismatch`, naming the first difference;
  - a design setting's record (`registered=True`) stores the registration it tests (`registration`): the commit
    that registered papers/preregistration.md's registered text (a dated Deviations section appended later does not
    move it: `registered_text`), that commit's date and the registered text's sha256; a registration file that
    differs from its commit (an uncommitted edit) is refused. `registered_late` says when the registration was
    committed after the record's result was first measured.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from esreason_lib.paths import REPO_ROOT
from esreason_lib.store.bundle import IMPORTED
from esreason_lib.store.runs import STORED_ONLY

PREREGISTRATION_PATH = REPO_ROOT / "papers" / "preregistration.md"
"""Where the `frontier` design is registered (`preregistration`), committed before any run of it."""
DESIGN_REGISTRATIONS = {"frontier": PREREGISTRATION_PATH,
                        "pretrained": REPO_ROOT / "papers" / "preregistration-pretrained.md"}
"""Where each design (`presets.DESIGNS`) is registered: its settings' records name that file's commit."""
REGISTRATION = ("registered_commit", "registered_at", "registration_sha256")
"""A design record's registration fields: the commit that last changed the registration file, that commit's date
(ISO 8601, UTC) and the file's sha256."""
DRAFT_MARK = "# DRAFT"
"""How a registration file that is not yet a registration begins (its first line): no run may test it."""
PROVENANCE = ("time", IMPORTED, *REGISTRATION)
"""The fields of a record that say where its finding comes from, never what it found: left out of comparisons."""


class BundleMismatch(ValueError):
    """A record redrawn from a result bundle's tables is not the bundle's own record of it."""


def finding_part(record: dict) -> dict:
    """`record` without its `PROVENANCE` fields, as JSON reads it back (tuples as lists)."""
    return {k: v for k, v in record.items() if k not in PROVENANCE}


def first_difference(a, b, where: str = "") -> str | None:
    """The first place where JSON values `a` and `b` differ ("checks[2].effect: 0.1 != 0.2"), or None when they are
    equal; keys in sorted order, then list items in order."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{where}{'.' if where else ''}{key}: {'absent' if key not in a else 'present'} != " \
                       f"{'absent' if key not in b else 'present'}"
            if (diff := first_difference(a[key], b[key], f"{where}{'.' if where else ''}{key}")) is not None:
                return diff
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := first_difference(x, y, f"{where}[{i}]"))), None)
    return None if a == b and type(a) is type(b) else f"{where}: {a!r:.80} != {b!r:.80}"


DEVIATIONS_HEADING = "\n## Deviations"
"""Where a registration's dated Deviations section starts (`deviations.render_section`): what follows it is
appended after the design was registered and is not part of the registered text."""


def registered_text(text: str) -> str:
    """The registered part of a registration file's `text`: everything before its Deviations section."""
    return text.split(DEVIATIONS_HEADING, 1)[0]


def registered_commit(path: str | Path = PREREGISTRATION_PATH) -> str | None:
    """The commit that registered the file's current registered text (`registered_text`): the oldest commit of the
    newest run of commits whose registered text equals the file's now, so that appending a Deviations section does
    not move it (None outside a git checkout or when uncommitted)."""
    path = Path(path)
    commits = (_git(path.parent, "log", "--format=%H", "--", path.name) or "").split()
    if not commits or not path.is_file():
        return commits[0] if commits else None
    now, found = registered_text(path.read_text()), commits[0]
    for commit in commits:
        shown = _git(path.parent, "show", f"{commit}:./{path.name}")
        if shown is None or registered_text(shown + "\n").rstrip() != now.rstrip():
            break
        found = commit
    return found


def _git(where: Path, *args: str) -> str | None:
    """`git args` run in the folder `where`: its stripped output, or None when git fails or prints nothing."""
    try:
        out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def registration(path: str | Path = PREREGISTRATION_PATH) -> dict:
    """The `REGISTRATION` fields of the registration file `path` (each None outside a git checkout). ValueError
    naming the file when it differs from its last commit (an uncommitted edit: no run may test a registration that
    is not committed) or was never committed while the repository is a git checkout, and when it is still a draft
    (it begins with `DRAFT_MARK`)."""
    path = Path(path)
    if path.is_file() and path.read_text().startswith(DRAFT_MARK):
        raise ValueError(f"the registration {path} is a draft (it begins {DRAFT_MARK!r}): register the design first "
                         "(the measured operating characteristics, then the text committed without the draft mark) "
                         "before a run tests it; nothing written")
    digest = hashlib.sha256(registered_text(path.read_text()).encode()).hexdigest() if path.is_file() else None
    commit = registered_commit(path)
    if path.parent.is_dir() and _git(path.parent, "rev-parse", "--is-inside-work-tree") == "true":
        dirty = _git(path.parent, "status", "--porcelain", "--", path.name)
        if commit is None or dirty:
            last = _git(path.parent, "log", "-1", "--format=%H", "--", path.name) or ""
            state = "never committed" if commit is None else f"edited since {last[:12]}"
            raise ValueError(f"the registration {path} differs from its last commit ({state}): commit it before a "
                             "run tests it; nothing written")
    when = _git(path.parent, "show", "-s", "--format=%cI", commit) if commit else None
    when = datetime.fromisoformat(when).astimezone(timezone.utc).isoformat(timespec="seconds") if when else None
    return {"registered_commit": commit, "registered_at": when, "registration_sha256": digest}


def carried(record: dict, stored: dict, *, registered: bool, registration_path: Path = PREREGISTRATION_PATH) -> dict:
    """The provenance fields of `record` (a finding just computed) given the `stored` record of it ({} when none):
    its first-measured `time`, its imported mark and, with `registered`, the `registration` of the file at
    `registration_path` (module docstring).
    `BundleMismatch` when, under `$ESREASON_STORED_ONLY`, an imported `stored` record differs from `record`."""
    computed, kept = finding_part(json.loads(json.dumps(record))), finding_part(stored)
    same = computed == kept
    if stored.get(IMPORTED) and os.environ.get(STORED_ONLY) and not same:
        raise BundleMismatch(f"finding {record.get('id')!r} (preset {record.get('preset')!r}) redrawn from the result "
                             "bundle's tables differs from the bundle's record of it at "
                             f"{first_difference(kept, computed)} (bundle != redrawn): the bundle's tables and "
                             "records disagree (edited or forged); nothing written")
    out = {"time": (same and stored.get("time")) or datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if same and stored.get(IMPORTED):
        out[IMPORTED] = stored[IMPORTED]
    if registered:
        out.update(registration(registration_path))
    return out


def registered_late(record: dict | None) -> str:
    """" (registered <date>, after this result was first measured)" when a design record's registration was
    committed after its `time`, else ""."""
    at, time = (record or {}).get("registered_at"), (record or {}).get("time")
    if not (isinstance(at, str) and isinstance(time, str)):
        return ""
    try:
        late = datetime.fromisoformat(at) > datetime.fromisoformat(time)
    except ValueError:
        return ""
    return f" (registered {at[:10]}, after this result was first measured)" if late else ""
