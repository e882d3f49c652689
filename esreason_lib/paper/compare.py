"""Two presets' stored checks side by side (`esreason compare-findings tiny tiny-exact`): one design computed two
ways, or on two machines, agrees when its checks' statuses do."""

from __future__ import annotations

from pathlib import Path

from esreason_lib.paper.records import read_record
from esreason_lib.paper.studies.registry import CLAIMS


def _cell(check: dict) -> str:
    """A stored check's "effect [95% CI] | status" cells."""
    return f"{check['effect']:+.3f} [{check['ci_low']:+.3f}, {check['ci_high']:+.3f}] | {check['status']}"


def render_comparison(a: str, b: str, home: str | Path | None = None) -> str:
    """Every check stored under both presets `a` and `b` (e.g. "tiny" and "tiny-exact": one design computed two ways)
    as a Markdown table: finding, check, then each preset's effect [95% CI] and status; a last line counts the
    checks whose status agrees. ValueError when the two share no check."""
    rows, same = [], 0
    for c in CLAIMS:
        ra, rb = read_record(c.id, a, home), read_record(c.id, b, home)
        if ra is None or rb is None or (ra["preset"], rb["preset"]) != (a, b):  # an old store's mixed records
            continue
        by_name = {x["name"]: x for x in rb.get("checks", [])}
        for x in ra.get("checks", []):
            y = by_name.get(x["name"])
            if y is None:
                continue
            same += x["status"] == y["status"]
            rows.append(f"| {c.id[:2]} | {x['name'].replace('|', '/')} | {_cell(x)} | {_cell(y)} |")
    if not rows:
        raise ValueError(f"presets {a!r} and {b!r} share no stored check (run both: `make reproduce PRESET=...`)")
    return "\n".join([f"| nb | check | {a}: effect [95% CI] | status | {b}: effect [95% CI] | status |",
                      "|---|---|---|---|---|---|", *rows, "",
                      f"{same} of {len(rows)} checks have the same status under both."]) + "\n"
