"""The "Operating characteristics before the first run" section of a registered design (`preregistration.render`):
for each primary check the pilot estimated, its rates at the registered size and whether they meet the bar.

The source is the committed JSON file a design names (`preset_spec.PilotOC`), the list
`benchmarks/pilot_pretrained.py --training --json-out` writes: one row per check, either {"check", "missing": [arm,
...]} (the pilot has no records of those arms) or {"check", "k", "delta", "effect", "seeds", "components", "oc":
[{"design": "<seeds>x<problems>", "P(reproduced | +delta)", "P(reproduced | 0)", "P(not reproduced | -delta)"},
...]}, each with an optional "reason" (why a check that misses the bar is not a primary). The entry read is the one
whose "design" is the setting's registered size (`size_label`), or the row's own "registered" size where it
names one (the held-out checks, sized by the held-out task's pool). A file that does not exist yet renders a line saying
so (a draft renders before its pilot is done).
"""

from __future__ import annotations

import json
from pathlib import Path

from esreason_lib.paper.studies.preset_spec import PilotOC
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.paths import REPO_ROOT

BAR = 0.5
"""The issue's bar: a primary check needs P(reproduced | +delta) >= BAR and P(not reproduced | -delta) >= BAR."""
RATES = ("P(reproduced | +delta)", "P(reproduced | 0)", "P(not reproduced | -delta)")
"""The rates of an "oc" entry, in the section's column order."""
TITLE = "## Operating characteristics before the first run"
"""The section's heading."""
READING_TITLE = "## How this design is read (written before its first run)"
"""The heading of a design's `PilotOC.reading`, after the section."""


def size_label(preset: Preset) -> str:
    """The registered size of `preset` as the pilot names a design: "<seeds per arm>x<test problems>"."""
    return f"{len(preset.seeds)}x{preset.eval.n_problems}"


def read_rows(path: Path) -> list[dict] | None:
    """The rows of the pilot's OC file at `path` (module docstring), None when it does not exist; ValueError naming
    the file and the row when a row has no "check", neither "missing" nor "oc", or a "reason" that is not a str."""
    if not path.exists():
        return None
    rows = json.loads(path.read_text())
    if not isinstance(rows, list):
        raise ValueError(f"{path}: the pilot's OC file must hold a list of rows, got {type(rows).__name__}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("check"), str):
            raise ValueError(f"{path}: row {i} must be an object with a str 'check', got {row!r}")
        if ("missing" in row) == ("oc" in row):
            raise ValueError(f"{path}: row {i} ({row['check']!r}) must hold either 'missing' or 'oc'")
        if not isinstance(row.get("reason", ""), str):
            raise ValueError(f"{path}: row {i} ({row['check']!r}) has a 'reason' that is not a str: "
                             f"{row['reason']!r}")
    return rows


def pick(row: dict, label: str, path: Path) -> dict:
    """The "oc" entry of `row` whose "design" is the row's own "registered" size when it names one (a held-out
    check, sized by the held-out pool), else `label`; ValueError naming the file, the check and the design."""
    label = row.get("registered", label)
    for entry in row["oc"]:
        if entry.get("design") == label:
            return entry
    has = [e.get("design") for e in row["oc"]]
    raise ValueError(f"{path}: check {row['check']!r} has no operating characteristic at the registered design "
                     f"{label!r} (it has {has}); rerun the pilot with --designs {label}")


def meets_bar(entry: dict) -> bool:
    """Whether an "oc" entry meets `BAR`: P(reproduced | +delta) and P(not reproduced | -delta) both >= BAR."""
    return entry[RATES[0]] >= BAR and entry[RATES[2]] >= BAR


def _setting(rows: list[dict], preset: Preset, path: Path) -> list[str]:
    """One setting's table of the checks with an estimate, then the checks that are not primaries and why."""
    label = size_label(preset)
    header = " | ".join(r.replace("|", "\\|") for r in RATES)
    table = [f"| check | K | delta | {header} | meets the bar |", "|---|---|---|---|---|---|---|"]
    out = []
    for row in rows:
        reason = row.get("reason")
        if "missing" in row:
            why = reason or f"the pilot has no records of {', '.join(row['missing'])}, so no estimate"
            out.append(f"- {row['check']}: not a primary in this design: {why}")
            continue
        entry = pick(row, label, path)
        meets = meets_bar(entry)
        rates = " | ".join(f"{entry[r]:.3f}" for r in RATES)
        table.append(f"| {row['check']} | {row['k']} | {row['delta']:g} | {rates} | {'yes' if meets else 'no'} |")
        if not meets:
            why = reason or f"it misses the bar at {label} (the file gives no reason)"
            out.append(f"- {row['check']}: not a primary in this design: {why}")
    return [f"`{preset.name}` at its registered size {label} (seeds per arm x test problems):", "", *table, "",
            *(out + [""] if out else [])]


def section(oc: PilotOC, presets: list[Preset], root: Path = REPO_ROOT) -> list[str]:
    """The section's lines for `presets` from the file `oc.path` under `root` (module docstring), ending with
    `oc.provenance`, then `oc.reading` under `READING_TITLE` where it has one."""
    path = root / oc.path
    bar = (f"The bar: {RATES[0]} >= {BAR:g} and {RATES[2]} >= {BAR:g} (the statuses at a true effect of +delta "
           "and -delta; P(reproduced | 0), at no effect, is the false-positive rate).")
    rows = read_rows(path)
    reading = ["", READING_TITLE, "", oc.reading] if oc.reading else []
    if rows is None:
        return [TITLE, "", f"The pilot's OC file `{oc.path}` is missing: no check's operating characteristic is "
                "estimated yet, so no check is shown to meet the bar.", "", bar, "", oc.provenance, *reading]
    lines = [TITLE, "", f"From `{oc.path}`, the pilot's estimates at each setting's registered size. {bar}", ""]
    for p in presets:
        lines += _setting(rows, p, path)
    return lines + [oc.provenance, *reading]
