"""The findings table: what the paper claims, where, and what this project's run measured. Renders only.

The claims and their tests are declared once (`studies.registry.CLAIMS`); the notebooks store what they measured
(`paper.records`). `write_claims()` renders `papers/claims.md` and the README's findings block from those records,
so both always show the last measured status and numbers. It never replaces a result already shown there by "not
run yet": when the run store lacks the record of a finding that either file shows a result for (an empty or another
store), it refuses and writes nothing.

A finding of kind "setup" (notebook 00: the base has the habit it was built to have) is shown and never counted in
a tally. The table shows tiny and powered (`TABLE_PRESETS`); a scale never run says "not run". A record with tests
holds its tests (the paper's test and the control, each with its status); its result cell starts with both and a
sentence on what the pair means (`design_tallies.pair_meaning`). Every tally counts each status (`status.STATUSES`;
`smaller than delta` reads "not above delta"). A multi-setting design (`presets.DESIGNS`) gets its rows, tallies and
README summary from `design_tallies`.
"""

from __future__ import annotations

import re
from pathlib import Path

from esreason_lib.paper.design_tallies import (
    ROLE_NAMES,
    counts,
    design_records,
    design_summary,
    headline,
    lead_lines,
    pair_meaning,
    readme_cell,
    render_design,
)
from esreason_lib.paper.records import read_record, test_statuses
from esreason_lib.paper.redraw import redraw_keeps
from esreason_lib.paper.studies.presets import DESCRIPTIVE_DESIGNS, DESIGNS
from esreason_lib.paper.studies.registry import CLAIMS
from esreason_lib.paths import CLAIMS_PATH, DEFAULT_PRESET, README_PATH, findings_dir
from esreason_lib.store.bundle import reviewed_lines
from esreason_lib.store.integrity import atomic_write_bytes

TABLE_PRESETS = (DEFAULT_PRESET, "powered")
"""The presets whose records the findings table shows (tiny's rows, powered's column and table); any other preset's
records (smoke, tiny-exact: `esreason compare-findings`) are kept in the store and never shown there."""


def tests_text(rec: dict) -> str:
    """"paper test (name): **status**; control (name): **status**; meaning. " for a record with tests, else ""."""
    tests = rec.get("tests", [])
    if not tests:
        return ""
    roles = test_statuses(rec)
    parts = [f"{t['role']} test ({t['name']}): **{t['status']}**" for t in tests]
    return "; ".join(parts) + f"; {pair_meaning(roles.get('paper', tests[0]['status']), roles.get('control'))}. "


def tally(home: str | Path | None = None, preset: str | None = None) -> str:
    """One sentence: of the paper's claims (kind "claim"; the setup check is not counted), how many paper tests
    and how many controls have each status, or were not run, at `preset`."""
    recs = [read_record(c.id, preset, home) for c in CLAIMS if c.kind == "claim"]
    parts = []
    for role in ("paper", "control"):
        got = [("not run" if r is None else test_statuses(r).get(role, r["status"] if role == "paper" else "-"))
               for r in recs]
        n = counts([g for g in got if g != "-"], ("not run",))
        parts.append(f"{ROLE_NAMES[role]} " + ", ".join(f"{v} {k}" for k, v in n.items()))
    scale = "last run" if preset in (None, DEFAULT_PRESET) else preset
    return (f"{scale}: of the paper's {len(recs)} claims tested here, " + "; ".join(parts)
            + " (the setup check of notebook 00 is not counted)")


def render_claims(home: str | Path | None = None, powered_table: bool = True) -> str:
    """The findings table as Markdown (rows without a record say so), then, when the `powered` preset has
    records, its findings with their results, the tallies and each design's rows (with `powered_table`); else the
    README's block: the short table and each design's summary (`design_summary`)."""
    return _render(home)[0 if powered_table else 1]


def _render(home: str | Path | None) -> tuple[str, str]:
    """`render_claims(home)` with and without the powered table, from one read of the records."""
    lines = ["| finding | paper | notebook | figure | status | powered | this project's result |",
             "|---|---|---|---|---|---|---|"]
    powered_rows = []
    for c in CLAIMS:
        rec, powered = read_record(c.id, None, home), read_record(c.id, "powered", home)
        setup = "setup: " if c.kind == "setup" else ""
        status, result = "not run", "not run yet (`make reproduce`)"
        if rec is not None:
            status = rec.get("status", "not run")
            result = (f"{tests_text(rec)}{rec.get('sentence', rec.get('result', ''))} "
                      f"(preset `{rec['preset']}`, {rec['time'][:10]})")
        if setup:
            status, result = setup + status, "setup check, not a claim of the paper (not counted): " + result
        pstatus = powered.get("status", "not run") if powered else "not run"
        lines.append(f"| {c.claim} | {c.where} | `notebooks/{c.id}.py` | {c.figure} | **{status}** | {pstatus} | "
                     f"{result.replace('|', '/')} |")
        if powered is not None:
            powered_rows.append(
                f"| {c.claim} | `notebooks/{c.id}.py` | **{setup}{pstatus}** | "
                f"{(tests_text(powered) + powered.get('sentence', powered.get('result', ''))).replace('|', '/')} "
                f"({powered['time'][:10]}) |")
    full, short = lines, readme_table(home)
    if powered_rows:
        full = lines + ["", "The same findings under the `powered` design (`make reproduce PRESET=powered`):", "",
                        "| finding | notebook | status | this project's result |", "|---|---|---|---|", *powered_rows]
    tallies = "\n\n" + tally(home) + ".\n\n" + tally(home, "powered") + ".\n"
    keeps = {name: redraw_keeps(design_records(name, home)) for name in DESIGNS if design_records(name, home)}
    designs = "".join("\n" + render_design(name, home, k) for name, k in keeps.items())
    readme_designs = "".join(design_summary(name, home, k) for name, k in keeps.items())  # one list
    return "\n".join(full) + tallies + designs, "\n".join(short) + "\n" + ("\n" + readme_designs if keeps else "")


def readme_table(home: str | Path | None = None) -> list[str]:
    """The README's findings table: one short line per claim (tiny's records): the claim in its `short` words, the
    paper's test and the control, each with its status and headline effect [95% CI], for each design that ran the
    tally of each test over its settings (a descriptive design: each test's status and effect; `readme_cell`), and
    the figures; the whole claim and every check are in papers/claims.md."""
    designs = [name for name in DESIGNS if design_records(name, home)]
    lines = ["| finding (notebook) | the paper's test | the control | "
             + "".join(f"`{d}` settings{' (descriptive)' if d in DESCRIPTIVE_DESIGNS else ''}: the paper's test; "
                       "the control | " for d in designs) + "figures |",
             "|---|---|---|" + "---|" * len(designs) + "---|"]
    for c in CLAIMS:
        rec = read_record(c.id, None, home)
        roles = test_statuses(rec)
        cells = [f"**{roles[r]}** {headline(rec, r)}".strip() if r in roles else
                 (f"**{rec['status']}**" if rec and r == "paper" else "-") for r in ("paper", "control")]
        if rec is None:
            cells = ["not run", "not run"]
        tallies = "".join(f"{readme_cell(d, c.id, home)} | " for d in designs)
        figures = ", ".join(f"[{f}](figures/{f}.png)" for f in c.figures)
        lines.append(f"| {c.short} ([{c.id[:2]}](notebooks/{c.id}.py)) | {cells[0]} | {cells[1]} | {tallies}"
                     f"{figures} |")
    return lines + ["", "Every check, both presets and what each pair of statuses means: "
                    "[papers/claims.md](papers/claims.md)."]


def _shown(path: Path | None) -> set[str]:
    """The ids of the findings whose row in the table of the file at `path` shows a result (not "not run")."""
    if path is None or not path.is_file():
        return set()
    rows = [line for line in path.read_text().splitlines() if line.startswith("| ")]
    return {c.id for c in CLAIMS for row in rows
            if f"notebooks/{c.id}.py" in row and "not run yet" not in row and "| not run | not run |" not in row}


def write_claims(home: str | Path | None = None, claims_path: str | Path = CLAIMS_PATH,
                 readme_path: str | Path | None = README_PATH, *, missing_ok: bool = False) -> str | None:
    """Write `papers/claims.md` and replace the README's block between the `claims` markers (which keeps powered's
    status column only) and, between the `lead` markers, each descriptive design's lead (`lead_lines`: one line per
    claim); returns the claims table. When the store under `home` has no record of a finding that
    either file shows a result for, nothing is written: ValueError naming the findings, or None with `missing_ok`
    (after a preset whose records live apart, e.g. `make reproduce PRESET=powered` on a store without tiny's)."""
    readme = None if readme_path is None else Path(readme_path)
    shown = _shown(Path(claims_path)) | _shown(readme)
    missing = [c.id for c in CLAIMS if c.id in shown and not (findings_dir(home) / f"{c.id}.json").is_file()]
    if missing and missing_ok:
        return None
    if missing:
        raise ValueError(f"the run store's findings ({findings_dir(home)}) lack {', '.join(missing)}, whose results "
                         f"{claims_path} or the README show; nothing was written (run those notebooks, or set "
                         f"ESREASON_HOME to the store that holds them)")
    table, short = _render(home)
    atomic_write_bytes(Path(claims_path), (
        "# Findings: the paper's claims and this project's measurements\n\n"
        "Generated by `make claims` (`esreason_lib.paper.claims`) from the records the notebooks write; "
        "do not edit.\n\n" + "".join(line + "\n\n" for line in reviewed_lines())
        + table).encode())
    if readme is not None and readme.is_file():
        text = readme.read_text()
        lead = "".join(line + "\n" for d in DESCRIPTIVE_DESIGNS if design_records(d, home)
                       for line in lead_lines(d, home))
        for name, block in (("claims", short), ("lead", lead)):
            pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
            text = pattern.sub(lambda m, block=block: m.group(1) + block + m.group(2), text)
        atomic_write_bytes(readme, text.encode())
    return table
