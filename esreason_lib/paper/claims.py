"""The findings table: what the paper claims, where, and what this project's run measured.

Each notebook ends by calling `record_finding(id, finding)` with the `findings.Finding` its study computed from
its results (status, sentence and checks; never typed by hand). `write_claims()` renders `papers/claims.md` and
the README's findings table from those records, so both always show the last measured status and numbers. It
never replaces a result already shown there by "not run yet": when the run store lacks the record of a finding
that either file shows a result for (an empty or another store), it refuses and writes nothing.

A finding of kind "setup" (notebook 00: the base has the habit it was built to have) is shown in the table and
never counted in the tally of the paper's claims (`tally`). Each preset's records are kept apart (`findings/` for
tiny, `findings/<preset>/` for any other: `paths.findings_dir`), so a run at one preset never changes another's rows;
the table shows tiny and powered (`TABLE_PRESETS`), and a scale never run says "not run". A record keeps the time its
result was first measured: a redraw that computes the same finding (`make figures`) leaves it byte-identical.

A record with tests holds its tests (the paper's test and the control, each with its status); its
result cell starts with both and a sentence on what the pair means (`pair_meaning`). The settings of a
multi-setting design (`presets.DESIGNS`) keep their records apart too; `render_design` gives one row per claim and
setting and the line "the paper's test holds in X of Y settings, the control in Z of Y". Records without tests
render as before.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from esreason_lib.paper.findings import STATUSES, Finding
from esreason_lib.paper.notebooks import figure_names
from esreason_lib.paper.provenance import carried, registered_late
from esreason_lib.paper.studies.presets import DESIGNS
from esreason_lib.paths import CLAIMS_PATH, DEFAULT_PRESET, NOTEBOOK_DIR, README_PATH, findings_dir
from esreason_lib.store.bundle import reviewed_lines
from esreason_lib.store.integrity import atomic_write_bytes, read_json, warn_store


@dataclass(frozen=True)
class Claim:
    """One row of the findings table: a claim of the paper and the notebook that tests it."""

    id: str
    """Stable key, also the notebook stem that measures it."""
    claim: str
    """The paper's claim in one sentence."""
    where: str
    """Where the paper makes it."""
    short: str
    """The claim in a few words: the README's one short line per claim (`readme_table`)."""
    kind: str = "claim"
    """"claim" (counted in the tally) or "setup" (a property of the setup: shown, never counted)."""

    @property
    def figure(self) -> str:
        """The figure stems (in `figures/`) that show this project's result: those its notebook saves
        (`notebooks.figure_names`), comma-separated."""
        return ", ".join(figure_names(NOTEBOOK_DIR / f"{self.id}.py"))


CLAIMS: tuple[Claim, ...] = (
    Claim("00_base_models", "The base model solves some problems greedily and many more when sampled "
          "(latent capability).", "setup (base models)", "The base solves more when sampled than greedily",
          kind="setup"),
    Claim("01_passk_es_vs_grpo", "ES raises Pass@1 over the base and keeps higher Pass@K than GRPO; GRPO's token "
          "entropy collapses, ES's does not.", "main results: Pass@K curves, entropy",
          "ES: Pass@1 up, Pass@K above GRPO's, entropy kept"),
    Claim("02_js_diversity", "The ES population's JS diversity scales as Lemma 1 predicts, its coverage gain follows "
          "Lemma 2, and Proposition 1 bounds an update's Pass@K (the paper's account of ES's Pass@K gain).",
          "Lemmas 1-3, Proposition 1", "ES's diversity and coverage follow Lemmas 1-2 and Prop. 1"),
    Claim("03_sequential", "GRPO->ES (and ES->GRPO) at an equal update budget combine Pass@1 and Pass@K gains.",
          "sequential training", "GRPO then ES combines Pass@1 and Pass@K gains"),
    Claim("04_sparsity", "Resetting the many small ES updates to the base weights keeps the task gain "
          "(functional sparsity).", "functional sparsity", "Resetting ES's small updates keeps the gain (sparsity)"),
    Claim("05_forgetting", "ES does not cause catastrophic forgetting on held-out tasks.", "forgetting",
          "ES does not forget held-out tasks"),
    Claim("06_population_scaling", "Larger models need a smaller ES population; z-score reward normalization matters.",
          "Table 6, normalization ablation", "Larger models need smaller populations; z-scoring matters"),
)
_BY_ID = {c.id: c for c in CLAIMS}
TABLE_PRESETS = (DEFAULT_PRESET, "powered")
"""The presets whose records the findings table shows (tiny's rows, powered's column and table); any other preset's
records (smoke, tiny-exact: `esreason compare-findings`) are kept in the store and never shown there."""
DESIGN_SETTINGS = tuple(s for settings in DESIGNS.values() for s in settings)
"""The presets that are settings of a multi-setting design (their records name their registration commit)."""
PAPER_SAYS = {"reproduced": "holds as the paper tests it", "not reproduced": "fails as the paper tests it",
              "smaller than delta": "as the paper tests it, smaller than delta",
              "not resolved": "not resolved as the paper tests it",
              "undecidable at this design": "the paper's test cannot go either way here"}
"""What the paper's test's status says, as the first half of `pair_meaning`."""
CONTROL_SAYS = {"reproduced": "survives the control", "not reproduced": "the control goes against it",
                "smaller than delta": "under the control, smaller than delta (the alternative leaves no effect "
                                      "of interest)",
                "not resolved": "the control cannot tell", "undecidable at this design":
                "the control cannot go either way here"}
"""What the control's status adds, as the second half of `pair_meaning`."""


def pair_meaning(paper: str, control: str | None) -> str:
    """One sentence on what the paper's test and the control mean together, e.g. "holds as the paper tests it;
    under the control, smaller than delta (the alternative leaves no effect of interest)"."""
    if control is None:
        return PAPER_SAYS[paper]
    return PAPER_SAYS[paper] + "; " + CONTROL_SAYS[control]


def test_statuses(rec: dict | None) -> dict[str, str]:
    """{role: status} of a record's tests (empty for a record written before tests existed, or None)."""
    return {t["role"]: t["status"] for t in (rec or {}).get("tests", [])}


def tests_text(rec: dict) -> str:
    """"paper test (name): **status**; control (name): **status**; meaning. " for a record with tests, else ""."""
    tests = rec.get("tests", [])
    if not tests:
        return ""
    roles = test_statuses(rec)
    parts = [f"{t['role']} test ({t['name']}): **{t['status']}**" for t in tests]
    return "; ".join(parts) + f"; {pair_meaning(roles.get('paper', tests[0]['status']), roles.get('control'))}. "


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


def tally(home: str | Path | None = None, preset: str | None = None) -> str:
    """One sentence: how many of the paper's claims (kind "claim") are reproduced / not reproduced / not resolved
    / not run at this scale; setup checks are not counted."""
    counts = {s: 0 for s in STATUSES} | {"not run": 0}
    for c in CLAIMS:
        if c.kind != "claim":
            continue
        rec = read_record(c.id, preset, home)
        counts[rec["status"] if rec else "not run"] += 1
    n = sum(counts.values())
    scale = "last run" if preset in (None, DEFAULT_PRESET) else preset
    shown = {k: v for k, v in counts.items() if v or k in ("reproduced", "not reproduced", "not resolved", "not run")}
    return (f"{scale}: of the paper's {n} claims tested here, " + ", ".join(f"{v} {k}" for k, v in shown.items())
            + " (the setup check of notebook 00 is not counted)")


def record_finding(finding_id: str, finding: Finding, *, preset: str, home: str | Path | None = None) -> Path:
    """Store the computed `finding` (status, sentence, checks) for `finding_id` (one of `CLAIMS`) in `preset`'s
    records. Its `time` is when this result was first measured: the stored record's time when the record held the
    same finding (a redraw from stored results), else now; such a redraw of a record imported from a result bundle
    keeps its imported mark too, and under `make figures` must be that record (`provenance.carried`)."""
    if finding_id not in _BY_ID:
        raise ValueError(f"finding_id {finding_id!r} is not one of {sorted(_BY_ID)}")
    if not isinstance(finding, Finding):
        raise TypeError(f"finding must be a findings.Finding (a study's `finding(...)`), got {type(finding).__name__}")
    path = record_path(finding_id, preset, home)
    record = {"id": finding_id, **finding.to_json(), "preset": preset}
    record.update(carried(record, read_record(finding_id, preset, home) or {}, registered=preset in DESIGN_SETTINGS))
    atomic_write_bytes(path, json.dumps(record, indent=1).encode())  # fsynced: a full disk leaves the last record
    return path


def render_claims(home: str | Path | None = None, powered_table: bool = True) -> str:
    """The findings table as Markdown (rows without a record say so), then, when the `powered` preset has
    records, its findings with their results (with `powered_table`; else one line pointing to papers/claims.md)."""
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
    ran = [name for name in DESIGNS if _design_ran(name, home)]
    designs = "".join("\n" + render_design(name, home) for name in ran)
    readme_designs = "".join("\n" + design_line(name, home) + "\n" for name in ran)
    return "\n".join(full) + tallies + designs, "\n".join(short) + tallies + readme_designs


def headline(rec: dict | None, role: str = "paper") -> str:
    """The effect and 95% interval of the primary check of a record's `role` test ("+0.153 [+0.100, +0.207]"), or
    "" when the record has no such test."""
    test = next((t for t in (rec or {}).get("tests", []) if t["role"] == role), None)
    check = next((c for c in (rec or {}).get("checks", []) if test and c["name"] == test["primary"]), None)
    return f"{check['effect']:+.3f} [{check['ci_low']:+.3f}, {check['ci_high']:+.3f}]" if check else ""


def readme_table(home: str | Path | None = None) -> list[str]:
    """The README's findings table: one short line per claim (tiny's records): the claim in its `short` words, the
    paper's test and the control, each with its status and headline effect [95% CI], and the figures; the whole
    claim and every check are in papers/claims.md."""
    lines = ["| finding (notebook) | the paper's test | the control | figures |", "|---|---|---|---|"]
    for c in CLAIMS:
        rec = read_record(c.id, None, home)
        roles = test_statuses(rec)
        cells = [f"**{roles[r]}** {headline(rec, r)}".strip() if r in roles else
                 (f"**{rec['status']}**" if rec and r == "paper" else "-") for r in ("paper", "control")]
        if rec is None:
            cells = ["not run", "not run"]
        figures = ", ".join(f"[{f}](figures/{f}.png)" for f in c.figure.split(", ") if f)
        lines.append(f"| {c.short} ([{c.id[:2]}](notebooks/{c.id}.py)) | {cells[0]} | {cells[1]} | {figures} |")
    return lines + ["", "Every check, both presets and what each pair of statuses means: "
                    "[papers/claims.md](papers/claims.md)."]


def _design_ran(design: str, home) -> bool:
    """Whether any setting of `design` has a record."""
    return any(read_record(c.id, s, home) for s in DESIGNS[design] for c in CLAIMS)


def render_design(design: str, home: str | Path | None = None) -> str:
    """The claims of a multi-setting design (`presets.DESIGNS`): one row per claim and setting with the paper's
    test, the control and what the pair means; per claim the line "the paper's test holds in X of Y settings,
    the control in Z of Y" (Y: the settings that ran it; a test holds when `reproduced`)."""
    lines = [f"The `{design}` design, one row per claim and setting (`make reproduce PRESET=<setting>`):", "",
             "| finding | setting | paper's test | control | what the pair means |", "|---|---|---|---|---|"]
    records = _design_records(design, home)
    for c, ran in records:
        for s, r in ran.items():
            lines.append(f"| `{c.id}` | `{s}` | {r.get('paper', '-')} | {r.get('control', '-')} | "
                         f"{pair_meaning(r['paper'], r.get('control')) if 'paper' in r else '-'}"
                         f"{registered_late(read_record(c.id, s, home))} |")
    return "\n".join(lines + [""] + _tally_lines(records)) + "\n"


def _design_records(design: str, home) -> list[tuple]:
    """[(claim, {setting: {role: status}})] for each claim of `design`, over the settings that ran it."""
    out = []
    for c in (c for c in CLAIMS if c.kind == "claim"):
        ran = {s: test_statuses(read_record(c.id, s, home)) for s in DESIGNS[design]}
        out.append((c, {s: r for s, r in ran.items() if r}))
    return out


def design_line(design: str, home: str | Path | None = None) -> str:
    """The design's X-of-Y tally (`render_design`) in one line for the README: per claim 01-06, in how many of the
    settings that ran it the paper's test and the control hold (each setting's rows are in papers/claims.md)."""
    records = _design_records(design, home)
    held = {role: "/".join(str(_held(ran, role)) for _, ran in records) for role in ("paper", "control")}
    runs = "/".join(str(len(ran)) for _, ran in records)
    return (f"The `{design}` design ({', '.join(f'`{s}`' for s in DESIGNS[design])}): for claims "
            f"{'-'.join(c.id[:2] for c in (records[0][0], records[-1][0]))}, the paper's test holds in {held['paper']} "
            f"of {runs} settings, the control in {held['control']} (papers/claims.md).")


def _held(ran: dict, role: str) -> int:
    """In how many of the settings `ran` ({setting: {role: status}}) the test `role` is `reproduced`."""
    return sum(r.get(role) == "reproduced" for r in ran.values())


def _tally_lines(records: list[tuple]) -> list[str]:
    """Per claim of `_design_records`, "the paper's test holds in X of Y settings, the control in Z of Y" (Y: the
    settings that ran it; a test holds when `reproduced`)."""
    return [f"- `{c.id}`: the paper's test holds in {_held(ran, 'paper')} of {len(ran)} settings, the control in "
            f"{_held(ran, 'control')} of {len(ran)}" + ("" if ran else " (not run)") for c, ran in records]


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
