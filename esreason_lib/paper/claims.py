"""The findings table: what the paper claims, where, and what this project's run measured. Renders only.

The claims and their tests are declared once (`studies.registry.CLAIMS`); the notebooks store what they measured
(`paper.records`). `write_claims()` renders `papers/claims.md` and the README's findings block from those records,
so both always show the last measured status and numbers. It never replaces a result already shown there by "not
run yet": when the run store lacks the record of a finding that either file shows a result for (an empty or another
store), it refuses and writes nothing.

A finding of kind "setup" (notebook 00: the base has the habit it was built to have) is shown and never counted in
a tally. The table shows tiny and powered (`TABLE_PRESETS`); a scale never run says "not run". A record with tests
holds its tests (the paper's test and the control, each with its status); its result cell starts with both and a
sentence on what the pair means (`pair_meaning`). Every tally counts each status (`status.STATUSES`; `smaller than
delta` reads "not above delta"). A multi-setting design (`presets.DESIGNS`) gets one row per claim and setting
(`render_design`), the status the registration gave where it differs (`deviations`), and per claim and test a tally
over its measurements: settings that share one measurement (the same primary check, to the digit) count once.
"""

from __future__ import annotations

import re
from pathlib import Path

from esreason_lib.paper.deviations import DEVIATIONS, co_primary_names, moved, recompute
from esreason_lib.paper.provenance import registered_late
from esreason_lib.paper.records import read_record, test_statuses
from esreason_lib.paper.redraw import keep_line, redraw_keeps
from esreason_lib.paper.status import STATUSES
from esreason_lib.paper.studies.presets import DESIGN_NOTEBOOKS, DESIGNS
from esreason_lib.paper.studies.registry import CLAIMS
from esreason_lib.paths import CLAIMS_PATH, DEFAULT_PRESET, README_PATH, findings_dir
from esreason_lib.store.bundle import reviewed_lines
from esreason_lib.store.integrity import atomic_write_bytes

TABLE_PRESETS = (DEFAULT_PRESET, "powered")
"""The presets whose records the findings table shows (tiny's rows, powered's column and table); any other preset's
records (smoke, tiny-exact: `esreason compare-findings`) are kept in the store and never shown there."""
PAPER_SAYS = {"reproduced": "holds as the paper tests it", "not reproduced": "fails as the paper tests it",
              "smaller than delta": "as the paper tests it, not above delta",
              "not resolved": "not resolved as the paper tests it",
              "undecidable at this design": "the paper's test cannot go either way here"}
"""What the paper's test's status says, as the first half of `pair_meaning`."""
CONTROL_SAYS = {"reproduced": "survives the control", "not reproduced": "the control goes against it",
                "smaller than delta": "under the control, not above delta (the alternative leaves less than delta)",
                "not resolved": "the control cannot tell", "undecidable at this design":
                "the control cannot go either way here"}
"""What the control's status adds, as the second half of `pair_meaning`."""
ROLE_NAMES = {"paper": "the paper's test", "control": "the control"}
COUNTED = ("reproduced / not reproduced / smaller than delta (not above delta) / not resolved / undecidable at this "
           "design")
"""The order of the counts in a design's tally table (`STATUSES`)."""


def pair_meaning(paper: str, control: str | None) -> str:
    """One sentence on what the paper's test and the control mean together, e.g. "holds as the paper tests it;
    under the control, not above delta (the alternative leaves less than delta)"."""
    if control is None:
        return PAPER_SAYS[paper]
    return PAPER_SAYS[paper] + "; " + CONTROL_SAYS[control]


def tests_text(rec: dict) -> str:
    """"paper test (name): **status**; control (name): **status**; meaning. " for a record with tests, else ""."""
    tests = rec.get("tests", [])
    if not tests:
        return ""
    roles = test_statuses(rec)
    parts = [f"{t['role']} test ({t['name']}): **{t['status']}**" for t in tests]
    return "; ".join(parts) + f"; {pair_meaning(roles.get('paper', tests[0]['status']), roles.get('control'))}. "


def counts(statuses, extra: tuple[str, ...] = ()) -> dict[str, int]:
    """{status: how many of `statuses` have it} for every status of `STATUSES` (zeros included), then `extra`."""
    statuses = list(statuses)
    unknown = [s for s in statuses if s not in STATUSES + extra]
    if unknown:
        raise ValueError(f"statuses must be among {STATUSES + extra}, got {unknown}")
    return {s: statuses.count(s) for s in STATUSES + extra}


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


def headline(rec: dict | None, role: str = "paper") -> str:
    """The effect and 95% interval of the primary check of a record's `role` test ("+0.153 [+0.100, +0.207]"), or
    "" when the record has no such test."""
    test = next((t for t in (rec or {}).get("tests", []) if t["role"] == role), None)
    check = next((c for c in (rec or {}).get("checks", []) if test and c["name"] == test["primary"]), None)
    return f"{check['effect']:+.3f} [{check['ci_low']:+.3f}, {check['ci_high']:+.3f}]" if check else ""


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
    keeps = {name: redraw_keeps(_design_records(name, home)) for name in DESIGNS if _design_records(name, home)}
    designs = "".join("\n" + render_design(name, home, k) for name, k in keeps.items())
    readme_designs = "".join("\n" + design_summary(name, home, k) for name, k in keeps.items())
    return "\n".join(full) + tallies + designs, "\n".join(short) + "\n" + readme_designs


def readme_table(home: str | Path | None = None) -> list[str]:
    """The README's findings table: one short line per claim (tiny's records): the claim in its `short` words, the
    paper's test and the control, each with its status and headline effect [95% CI], for each design that ran the
    tally of each test over its settings (`design_tally`), and the figures; the whole claim and every check are in
    papers/claims.md."""
    designs = [name for name in DESIGNS if _design_records(name, home)]
    lines = ["| finding (notebook) | the paper's test | the control | "
             + "".join(f"`{d}` settings: the paper's test; the control | " for d in designs) + "figures |",
             "|---|---|---|" + "---|" * len(designs) + "---|"]
    for c in CLAIMS:
        rec = read_record(c.id, None, home)
        roles = test_statuses(rec)
        cells = [f"**{roles[r]}** {headline(rec, r)}".strip() if r in roles else
                 (f"**{rec['status']}**" if rec and r == "paper" else "-") for r in ("paper", "control")]
        if rec is None:
            cells = ["not run", "not run"]
        tallies = "".join(f"{design_tally(d, c.id, home)} | " for d in designs)
        figures = ", ".join(f"[{f}](figures/{f}.png)" for f in c.figure.split(", ") if f)
        lines.append(f"| {c.short} ([{c.id[:2]}](notebooks/{c.id}.py)) | {cells[0]} | {cells[1]} | {tallies}"
                     f"{figures} |")
    return lines + ["", "Every check, both presets and what each pair of statuses means: "
                    "[papers/claims.md](papers/claims.md)."]


# ------------------------------------------------------------------------------------ multi-setting designs


NOT_IN_DESIGN = "not in this design"
"""A design's cell for a claim whose notebook it does not run (`presets.DESIGN_NOTEBOOKS`)."""


def in_design(design: str, finding_id: str) -> bool:
    """Whether `design` runs the notebook of `finding_id` (every notebook unless `DESIGN_NOTEBOOKS` names some)."""
    return design not in DESIGN_NOTEBOOKS or finding_id[:2] in DESIGN_NOTEBOOKS[design]


def _design_records(design: str, home) -> list[dict]:
    """Every record with tests of a claim (kind "claim") that `design` runs (`in_design`), of its settings, claim
    by claim, setting by setting."""
    recs = [read_record(c.id, s, home) for c in CLAIMS if c.kind == "claim" and in_design(design, c.id)
            for s in DESIGNS[design]]
    return [r for r in recs if r is not None and r.get("tests")]


def measurements(records: list[dict], role: str) -> list[tuple[tuple[str, ...], str]]:
    """[(settings, status)] of the `role` test over `records` (one claim's, one per setting; the status as
    `deviations.recompute` gives it now): settings whose test has the same primary and co-primary checks, to the
    digit (name, effect, interval), are one measurement, counted once."""
    groups: dict[tuple, tuple[list[str], str]] = {}
    for rec in records:
        test = next((t for t in rec["tests"] if t["role"] == role), None)
        if test is None:
            continue
        names = [test["primary"], *co_primary_names(rec, test)]
        key = tuple((c["name"], c["effect"], c["ci_low"], c["ci_high"]) for n in names for c in rec["checks"]
                    if c["name"] == n)
        now = next(s.now for s in recompute(rec) if s.role == role)
        groups.setdefault(key, ([], now))[0].append(rec["preset"])
    return [(tuple(settings), status) for settings, status in groups.values()]


def _tally_cell(found: list[tuple[tuple[str, ...], str]]) -> str:
    """"3 / 0 / 0 / 0 / 1 of 4" (counts in `STATUSES` order over the measurements), with the settings that share
    one measurement named."""
    if not found:
        return "not run"
    n = counts(status for _, status in found)
    shared = [" = ".join(f"`{s}`" for s in settings) for settings, _ in found if len(settings) > 1]
    return (" / ".join(str(v) for v in n.values()) + f" of {len(found)}"
            + (f" ({'; '.join(shared)}: one measurement)" if shared else ""))


def design_tally(design: str, finding_id: str, home: str | Path | None = None) -> str:
    """"2 / 0 / 1 / 0 / 1 of 4; 0 / 3 / 1 / 0 / 0 of 4": the paper's test's and the control's statuses of
    `finding_id` counted over `design`'s measurements (`measurements`, `_tally_cell`); "-" for the setup check."""
    if next(c.kind for c in CLAIMS if c.id == finding_id) != "claim":
        return "-"
    if not in_design(design, finding_id):
        return NOT_IN_DESIGN
    mine = [r for r in _design_records(design, home) if r["id"] == finding_id]
    return "; ".join(_tally_cell(measurements(mine, role)) for role in ("paper", "control"))


def tally_table(design: str, home: str | Path | None = None) -> list[str]:
    """Per claim of `design`, the paper's test's and the control's statuses counted over their measurements
    (`measurements`), every status shown."""
    recs = _design_records(design, home)
    lines = [f"| claim | the paper's test ({COUNTED}, of Y measurements) | the control (the same) |", "|---|---|---|"]
    for c in (c for c in CLAIMS if c.kind == "claim"):
        mine = [r for r in recs if r["id"] == c.id]
        cells = ([_tally_cell(measurements(mine, role)) for role in ("paper", "control")] if in_design(design, c.id)
                 else [NOT_IN_DESIGN] * 2)
        lines.append(f"| {c.short} ({c.id[:2]}) | {cells[0]} | {cells[1]} |")
    return lines


def deviation_lines(design: str, home: str | Path | None = None) -> list[str]:
    """One line per dated change that moved a status of `design`'s records: how many of its test statuses it moved
    and which (recomputed from the records, `deviations.recompute`)."""
    statuses = [s for r in _design_records(design, home) for s in recompute(r)]
    lines = []
    for d in (d for d in DEVIATIONS if d.stage):
        got = moved(statuses, d.stage)
        if got:
            listed = "; ".join(f"`{s}` {i[:2]} {role}: {before} -> {after}" for s, i, role, before, after in got)
            lines.append(f"Since {d.date}{f' ({d.commit})' if d.commit else ''}, after these runs, {d.short}: "
                         f"{len(got)} of the {len(statuses)} test statuses differ from what the registration "
                         f"gives ({listed}; papers/preregistration.md, Deviations).")
    return lines


def render_design(design: str, home: str | Path | None = None, keeps: dict | None = None) -> str:
    """The claims of a multi-setting design: one row per claim and setting with the paper's test and the control
    (each with its probability of keeping its status on a redraw, `redraw_keeps` unless given as `keeps`, and the
    registration's status beside where it differs), what the pair means and the record's notes; then the tally
    table, the redraw line and the deviations."""
    recs = _design_records(design, home)
    keeps = redraw_keeps(recs) if keeps is None else keeps
    lines = [f"The `{design}` design, one row per claim and setting (`make reproduce PRESET=<setting>`). Each status "
             "has in brackets the probability that a full redraw keeps it and, where it differs, the status the "
             "registered rule and tests give:", "",
             "| finding | setting | paper's test | control | what the pair means | notes |",
             "|---|---|---|---|---|---|"]
    for rec in recs:
        by_role = {s.role: s for s in recompute(rec)}
        cells = {role: "-" if role not in by_role else _status_cell(by_role[role], keeps.get(
            (rec["preset"], rec["id"], role))) for role in ("paper", "control")}
        meaning = (pair_meaning(by_role["paper"].now, by_role["control"].now if "control" in by_role else None)
                   if "paper" in by_role else "-")
        notes = "; ".join(rec.get("notes", [])).replace("|", "/") or "-"
        lines.append(f"| `{rec['id']}` | `{rec['preset']}` | {cells['paper']} | {cells['control']} | {meaning} | "
                     f"{notes}{registered_late(rec)} |")
    return "\n".join(lines + ["", "Per claim, " + _tally_intro(design), "", *tally_table(design, home), "",
                              keep_line(keeps), "", "\n\n".join(deviation_lines(design, home))]) + "\n"


def _status_cell(statuses, keep: float | None) -> str:
    """"not reproduced (keeps 0.93; registered: undecidable at this design)" for one test of a design's row."""
    parts = ([f"keeps {keep:.2f}"] if keep is not None else []) + (
        [f"registered: {statuses.registered}"] if statuses.registered != statuses.now else [])
    return statuses.now + (f" ({'; '.join(parts)})" if parts else "")


def _tally_intro(design: str) -> str:
    return (f"how many of the `{design}` settings ({', '.join(f'`{s}`' for s in DESIGNS[design])}) gave each status "
            "(settings that share one measurement count once):")


def design_summary(design: str, home: str | Path | None = None, keeps: dict | None = None) -> str:
    """The README's list under its table for a design, one item each: what its column counts (`design_tally`), the
    redraw line (`keep_line`) and each deviation line; every row is in papers/claims.md."""
    keeps = redraw_keeps(_design_records(design, home)) if keeps is None else keeps
    legend = (f"The `{design}` column counts, per test, {COUNTED} over its settings "
              f"({', '.join(f'`{s}`' for s in DESIGNS[design])}), of Y measurements (settings that share one "
              "measurement count once).")
    return "".join(f"- {item}\n" for item in (legend, keep_line(keeps), *deviation_lines(design, home)) if item)


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
    status column only); returns the claims table. When the store under `home` has no record of a finding that
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
        pattern = re.compile(r"(<!-- claims:start -->\n).*?(<!-- claims:end -->)", re.S)
        if pattern.search(text):
            atomic_write_bytes(readme, pattern.sub(lambda m: m.group(1) + short + m.group(2), text).encode())
    return table
