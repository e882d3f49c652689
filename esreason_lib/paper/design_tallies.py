"""How a test's status reads and how a design's statuses are counted, rendered by `claims` into papers/claims.md and
the README.

The words for each status of the paper's test and the control (`pair_meaning`), the counts in `STATUSES` order
(`counts`), a test's headline effect (`headline`), and a design's (`presets.DESIGNS`) rows, one per claim and
setting (`render_design`, with the status the registration gave where it differs: `deviations`), its tally per
claim and test over its measurements (settings that share one measurement, the same primary check to the digit,
count once: `measurements`, `design_tally`, `tally_table`), its README cell and summary (`readme_cell`,
`design_summary`). A descriptive design (`presets.DESCRIPTIVE_DESIGNS`: registered with no primary check) shows
each test's status with the effect and interval of every check that sets it, and says so (`descriptive_note`).
`preregistration` reads `in_design` and `NOT_IN_DESIGN` from here.
"""

from __future__ import annotations

from pathlib import Path

from esreason_lib.paper.deviations import DESIGN_DEVIATIONS, co_primary_names, moved, recompute
from esreason_lib.paper.provenance import DESIGN_REGISTRATIONS, registered_late
from esreason_lib.paper.records import read_record
from esreason_lib.paper.redraw import keep_line, redraw_keeps
from esreason_lib.paper.status import STATUSES
from esreason_lib.paper.studies.presets import DESCRIPTIVE_DESIGNS, DESIGN_NOTEBOOKS, DESIGNS
from esreason_lib.paper.studies.registry import CLAIMS
from esreason_lib.paths import REPO_ROOT

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
COUNTED = ("reproduced / not reproduced / smaller than delta (not above delta) / not resolved / undecidable at this "
           "design")
"""The order of the counts in a design's tally table (`STATUSES`)."""


def pair_meaning(paper: str, control: str | None) -> str:
    """One sentence on what the paper's test and the control mean together, e.g. "holds as the paper tests it;
    under the control, not above delta (the alternative leaves less than delta)"."""
    if control is None:
        return PAPER_SAYS[paper]
    return PAPER_SAYS[paper] + "; " + CONTROL_SAYS[control]


def counts(statuses, extra: tuple[str, ...] = ()) -> dict[str, int]:
    """{status: how many of `statuses` have it} for every status of `STATUSES` (zeros included), then `extra`."""
    statuses = list(statuses)
    unknown = [s for s in statuses if s not in STATUSES + extra]
    if unknown:
        raise ValueError(f"statuses must be among {STATUSES + extra}, got {unknown}")
    return {s: statuses.count(s) for s in STATUSES + extra}


ROLE_NAMES = {"paper": "the paper's test", "control": "the control"}
"""How the README and papers/claims.md name each test role."""


def status_checks(rec: dict, test: dict, *, co_primaries: bool = True) -> list[dict]:
    """The stored checks of `rec` that set `test`'s status: its primary, then (with `co_primaries`) each
    co-primary (`deviations.co_primary_names`)."""
    names = [test["primary"], *(co_primary_names(rec, test) if co_primaries else ())]
    return [c for n in names for c in rec.get("checks", []) if c["name"] == n]


def headline(rec: dict | None, role: str = "paper", *, co_primaries: bool = False) -> str:
    """The effect and 95% interval of the primary check of a record's `role` test ("+0.153 [+0.100, +0.207]"), with
    `co_primaries` then of each co-primary check ("... and +0.020 [-0.004, +0.044]": every check that sets the
    test's status), or "" when the record has no such test."""
    test = next((t for t in (rec or {}).get("tests", []) if t["role"] == role), None)
    if test is None:
        return ""
    return " and ".join(f"{c['effect']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"
                        for c in status_checks(rec, test, co_primaries=co_primaries))


# ------------------------------------------------------------------------------------ multi-setting designs


NOT_IN_DESIGN = "not in this design"
"""A design's cell for a claim whose notebook it does not run (`presets.DESIGN_NOTEBOOKS`)."""


def in_design(design: str, finding_id: str) -> bool:
    """Whether `design` runs the notebook of `finding_id` (every notebook unless `DESIGN_NOTEBOOKS` names some)."""
    return design not in DESIGN_NOTEBOOKS or finding_id[:2] in DESIGN_NOTEBOOKS[design]


def design_records(design: str, home) -> list[dict]:
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
        key = tuple((c["name"], c["effect"], c["ci_low"], c["ci_high"]) for c in status_checks(rec, test))
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
    mine = [r for r in design_records(design, home) if r["id"] == finding_id]
    return "; ".join(_tally_cell(measurements(mine, role)) for role in ("paper", "control"))


def readme_cell(design: str, finding_id: str, home: str | Path | None = None) -> str:
    """The README's cell of `design` for `finding_id`: its tally (`design_tally`), or for a descriptive design
    (`presets.DESCRIPTIVE_DESIGNS`) each setting's paper test and control as "**status** effect [95% CI]" (the
    setting named when the design has several): a count says little where no status is evidence."""
    mine = [r for r in design_records(design, home) if r["id"] == finding_id] if design in DESCRIPTIVE_DESIGNS else []
    if not mine:  # a counting design, the setup check, a claim not in the design or not run yet
        return design_tally(design, finding_id, home)
    cells = []
    for rec in mine:
        now = {s.role: s.now for s in recompute(rec)}
        named = f"`{rec['preset']}`: " if len(DESIGNS[design]) > 1 else ""
        cells.append(named + "; ".join(f"**{now[role]}** {headline(rec, role, co_primaries=True)}".strip()
                                       if role in now else "-" for role in ("paper", "control")))
    return "; ".join(cells)


def lead_lines(design: str, home: str | Path | None = None) -> list[str]:
    """The README's lead for a descriptive `design`: one line per claim it runs, each test's status with every
    check that sets it (name, effect, 95% interval; the setting named when the design has several), "no record
    yet" before its notebook has run, and a link to the claim's first figure as the notebook drew it for the
    design's (first) setting; then one line naming the claims it leaves out (its registration says why)."""
    recs, lines, left_out = design_records(design, home), [], []
    for c in (c for c in CLAIMS if c.kind == "claim"):
        if not in_design(design, c.id):
            left_out.append(c.id[:2])
            continue
        parts = []
        for rec in (r for r in recs if r["id"] == c.id):
            now = {s.role: s.now for s in recompute(rec)}
            named = f"`{rec['preset']}`: " if len(DESIGNS[design]) > 1 else ""
            for test in (t for role in ROLE_NAMES for t in rec["tests"] if t["role"] == role):
                checks = "; ".join(f"{ch['name']}: {ch['effect']:+.3f} [{ch['ci_low']:+.3f}, {ch['ci_high']:+.3f}]"
                                   for ch in status_checks(rec, test))
                parts.append(f"{named}{ROLE_NAMES[test['role']]} **{now[test['role']]}** ({checks})")
        first = c.figures[0] if parts and c.figures else None
        figure = f" [{first}](figures/{DESIGNS[design][0]}/{first}.png)" if first else ""
        lines.append(f"- {c.short} ({c.id[:2]}): " + ("; ".join(parts) if parts else "no record yet") + f".{figure}")
    if left_out:
        path = registration(design)
        lines.append(f"- {', '.join(left_out)}: {NOT_IN_DESIGN} ([{path.name}]({path}) says why).")
    return lines


def tally_table(design: str, home: str | Path | None = None) -> list[str]:
    """Per claim of `design`, the paper's test's and the control's statuses counted over their measurements
    (`measurements`), every status shown."""
    recs = design_records(design, home)
    lines = [f"| claim | the paper's test ({COUNTED}, of Y measurements) | the control (the same) |", "|---|---|---|"]
    for c in (c for c in CLAIMS if c.kind == "claim"):
        mine = [r for r in recs if r["id"] == c.id]
        cells = ([_tally_cell(measurements(mine, role)) for role in ("paper", "control")] if in_design(design, c.id)
                 else [NOT_IN_DESIGN] * 2)
        lines.append(f"| {c.short} ({c.id[:2]}) | {cells[0]} | {cells[1]} |")
    return lines


def registration(design: str) -> Path:
    """`design`'s registration file, relative to the repository (`provenance.DESIGN_REGISTRATIONS`)."""
    return DESIGN_REGISTRATIONS[design].relative_to(REPO_ROOT)


def deviation_lines(design: str, home: str | Path | None = None) -> list[str]:
    """One line per dated change that moved a status of `design`'s records: how many of its test statuses it moved
    and which (recomputed from the records, `deviations.recompute`)."""
    statuses = [s for r in design_records(design, home) for s in recompute(r)]
    lines = []
    for d in (d for d in DESIGN_DEVIATIONS.get(design, ()) if d.stage):
        got = moved(statuses, d.stage)
        if got:
            listed = "; ".join(f"`{s}` {i[:2]} {role}: {before} -> {after}" for s, i, role, before, after in got)
            lines.append(f"Since {d.date}{f' ({d.commit})' if d.commit else ''}, after these runs, {d.short}: "
                         f"{len(got)} of the {len(statuses)} test statuses differ from what the registration "
                         f"gives ({listed}; {registration(design)}, Deviations).")
    return lines


def render_design(design: str, home: str | Path | None = None, keeps: dict | None = None) -> str:
    """The claims of a design: one row per claim and setting with the paper's test and the control (each with its
    probability of keeping its status on a redraw, `redraw_keeps` unless given as `keeps`, the registration's
    status beside where it differs and, for a descriptive design, the effect and 95% interval of each check that
    sets it), what the pair means and the record's notes (a descriptive design's: every check, its `sentence`);
    then the tally table, the redraw line and the deviations."""
    recs = design_records(design, home)
    keeps = redraw_keeps(recs) if keeps is None else keeps
    descriptive = design in DESCRIPTIVE_DESIGNS
    lines = [f"The `{design}` design, one row per claim and setting (`make reproduce PRESET=<setting>`). Each status "
             "has in brackets the probability that a full redraw keeps it and, where it differs, the status the "
             "registered rule and tests give" + (
                 "; then the effect and 95% interval of each check that sets it (the primary check, then any "
                 f"co-primary), and the notes hold every check. {descriptive_note(design)}" if descriptive else ":"),
             "", "| finding | setting | paper's test | control | what the pair means | notes |",
             "|---|---|---|---|---|---|"]
    for rec in recs:
        by_role = {s.role: s for s in recompute(rec)}
        cells = {role: "-" if role not in by_role else ", ".join(x for x in (_status_cell(by_role[role], keeps.get(
            (rec["preset"], rec["id"], role))), descriptive and headline(rec, role, co_primaries=True)) if x)
            for role in ("paper", "control")}
        meaning = (pair_meaning(by_role["paper"].now, by_role["control"].now if "control" in by_role else None)
                   if "paper" in by_role else "-")
        notes = "; ".join(rec.get("notes", []) + ([f"every check: {rec['sentence']}"] if descriptive and rec.get(
            "sentence") else [])).replace("|", "/") or "-"
        lines.append(f"| `{rec['id']}` | `{rec['preset']}` | {cells['paper']} | {cells['control']} | {meaning} | "
                     f"{notes}{registered_late(rec)} |")
    return "\n".join(lines + ["", "Per claim, " + _tally_intro(design), "", *tally_table(design, home), "",
                              keep_line(keeps), "", "\n\n".join(deviation_lines(design, home))]) + "\n"


def _status_cell(statuses, keep: float | None) -> str:
    """"not reproduced (keeps 0.93; registered: undecidable at this design)" for one test of a design's row."""
    parts = ([f"keeps {keep:.2f}"] if keep is not None else []) + (
        [f"registered: {statuses.registered}"] if statuses.registered != statuses.now else [])
    return statuses.now + (f" ({'; '.join(parts)})" if parts else "")


def descriptive_note(design: str) -> str:
    """The sentence that names `design` descriptive (`presets.DESCRIPTIVE_DESIGNS`) and says how its statuses read,
    "" for any other design."""
    if design not in DESCRIPTIVE_DESIGNS:
        return ""
    return (f"A descriptive design, with no primary check ({registration(design)}, \"How this design is read\"): "
            "no check could decide at a size this machine affords, so an open interval or `undecidable at this "
            "design` there is no evidence either way; its counts are never added to another design's.")


def _tally_intro(design: str) -> str:
    return (f"how many of the `{design}` settings ({', '.join(f'`{s}`' for s in DESIGNS[design])}) gave each status "
            "(settings that share one measurement count once):")


def design_summary(design: str, home: str | Path | None = None, keeps: dict | None = None) -> str:
    """The README's list under its table for a design, one item each: what its column shows (`readme_cell`), the
    redraw line (`keep_line`) and each deviation line; every row is in papers/claims.md."""
    keeps = redraw_keeps(design_records(design, home)) if keeps is None else keeps
    settings = ", ".join(f"`{s}`" for s in DESIGNS[design])
    legend = (f"The `{design}` column counts, per test, {COUNTED} over its settings ({settings}), of Y measurements "
              "(settings that share one measurement count once).")
    if design in DESCRIPTIVE_DESIGNS:
        legend = (f"The `{design}` column gives, per test and setting ({settings}), its status and the effect "
                  f"[95% CI] of each check that sets it (the primary check, then any co-primary). "
                  f"{descriptive_note(design)}")
    return "".join(f"- {item}\n" for item in (legend, keep_line(keeps), *deviation_lines(design, home)) if item)
