"""What changed after a design's registration, dated, and the statuses each change moved.

The registered text of a registration (`papers/preregistration.md`, `papers/preregistration-pretrained.md`) never
changes; `preregistration.render` appends its design's deviations (`DESIGN_DEVIATIONS`) as a dated section. Each
`Deviation` lists the statuses it moved, and `recompute` derives them again from the records
(`tests/test_deviations.py` checks the two agree on the committed bundle), so the section, claims.md and the README
say the same thing. A test's status three ways (`TestStatuses`):
- `registered`: as its design registered it: under that rule (`REGISTERED_RULES`), the primary check alone for the
  `frontier` (`CO_PRIMARIES_LATER`), with its co-primaries for a design registered later;
- `rule_now`: its primary check alone under the current rule (what f4301ab moved);
- `now`: the primary with its co-primary checks (`findings.Test.also`) under the current rule: what is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from esreason_lib.paper.records import DESIGN_OF, stored_check
from esreason_lib.paper.status import STATUSES, combined_status, status_and_reason
from esreason_lib.paper.studies.grids import GRID_RULE
from esreason_lib.paper.studies.registry import declared


@dataclass(frozen=True)
class Deviation:
    """One dated change made after the registration, why, and the statuses it moved."""

    date: str
    """When it was made (ISO date)."""
    short: str
    """The change in a few words, for the README's line under the design's tally."""
    commit: str
    """The commit that made it ("" for a rule about future designs only)."""
    what: str
    """The change in one sentence."""
    why: str
    """Why, in one sentence (and whether it was made after seeing results)."""
    moved: tuple[tuple[str, str, str, str, str], ...] = ()
    """(setting, finding id, role, status before, status after) for each test status it changed, claim by claim
    and setting by setting in the design's order."""
    stage: str = ""
    """Which change of `TestStatuses` it is: "rule" (registered -> rule_now), "test" (rule_now -> now), or "" (it
    moves no status)."""

    def __post_init__(self):
        if self.stage not in ("", "rule", "test"):
            raise ValueError(f"Deviation.stage must be '', 'rule' or 'test', got {self.stage!r}")
        for row in self.moved:
            if len(row) != 5 or row[3] not in STATUSES or row[4] not in STATUSES:
                raise ValueError(f"Deviation.moved rows are (setting, id, role, before, after) with statuses of "
                                 f"{STATUSES}, got {row!r}")


_U, _NR = "undecidable at this design", "not reproduced"
DEVIATIONS: tuple[Deviation, ...] = (
    Deviation("2026-12-05", "the status rule", "f4301ab",
              "The status rule: a `not reproduced` is undecidable only when an effect of delta fails more than 10% "
              "of the time, a `not resolved` when an effect of delta passes under half the time, and `smaller than "
              "delta` always counts (registered: every outcome but a pass was undecidable when an effect of delta "
              "passes under half the time).",
              "Made after the `frontier-multi` record had been seen: the registered rule hid intervals wholly "
              "against the paper (01's control there, -0.051 [-0.094, -0.007]) as undecidable.",
              (("frontier-habit", "01_passk_es_vs_grpo", "control", _U, _NR),
               ("frontier-multi", "01_passk_es_vs_grpo", "control", _U, _NR),
               ("frontier-habit", "04_sparsity", "paper", _U, _NR),
               ("frontier-clean", "04_sparsity", "paper", _U, _NR),
               ("frontier-multi", "04_sparsity", "paper", _U, _NR),
               ("frontier-clean", "05_forgetting", "paper", _U, _NR),
               ("frontier-clean", "05_forgetting", "control", _U, "smaller than delta"),
               ("frontier-multi", "05_forgetting", "paper", _U, _NR)), "rule"),
    Deviation("2026-12-07", "01's paper test also needs ES's Pass@1 above the base", "",
              "01's paper test needs ES's Pass@1 above the base as well as its Pass@K above GRPO's (a co-primary "
              "check, registered as a secondary): the test is `reproduced` only when both are.",
              "The claim is \"ES raises Pass@1 and keeps a higher Pass@K than GRPO\"; on `frontier-m` ES's Pass@1 "
              "did not move (-0.0013 [-0.0048, +0.0022]) and the Pass@K lead was the base's. Made after seeing it.",
              (("frontier-m", "01_passk_es_vs_grpo", "paper", "reproduced", "smaller than delta"),), "test"),
    Deviation("2026-12-07", "grids extend until the tuned value is inside", "", "Future designs: " + GRID_RULE,
              "GRPO tuned for Pass@1 chose lr 1e-4, the top of its grid, in every setting; the arms at an edge of "
              "their grid are named wherever they are used. No status moves."),
)
"""Every change after the `frontier` registration, oldest first."""
PRETRAINED_DEVIATIONS: tuple[Deviation, ...] = (
    Deviation("2026-12-07", "three phrases of the registration clarified", "",
              "Clarified, changing no check, delta, arm, size or rule: (1) in 01's paper test, \"ES Pass@1 - base\", "
              "listed above as a secondary in the frontier's registered wording, is a co-primary check of this "
              "design (`Test.also`), as the rates table names it: the test is `reproduced` only when both checks "
              "are; (2) \"computed as in the frontier design\" means the same checks and tests: the statuses use "
              "the current rule (`paper.status`), not the frontier's registered one, and under it `smaller than "
              "delta` counts (its interval excludes delta); (3) \"no model of the design is one a pilot has seen\" "
              "means no trained model: the base is the pilots' and the design's.",
              "Written after the design's training runs had started and before any evaluation, finding or status "
              "existed: a review found the three phrases ambiguous. No status can move."),
)
"""Every change after the `pretrained` registration, oldest first."""
DESIGN_DEVIATIONS: dict[str, tuple[Deviation, ...]] = {"frontier": DEVIATIONS, "pretrained": PRETRAINED_DEVIATIONS}
"""Each registered design's deviations (`render_section`, `design_tallies.deviation_lines`)."""


@dataclass(frozen=True)
class TestStatuses:
    """One test of one record, its status three ways (module docstring)."""

    __test__ = False  # not a pytest class

    setting: str
    """The preset the record belongs to."""
    finding_id: str
    """The claim."""
    role: str
    """"paper" or "control"."""
    registered: str
    """Primary alone, registered rule."""
    rule_now: str
    """Primary alone, current rule."""
    now: str
    """Primary and co-primary checks, current rule (what the tables show)."""


def co_primary_names(record: dict, test: dict) -> list[str]:
    """The names of `test`'s co-primary checks in `record`: its stored "also", or, for a record written before
    co-primary checks existed, the first of its secondaries, as many as its declaration's `also` (the
    registration listed them first among the secondaries: `preregistration.render`)."""
    if "also" in test:
        return list(test["also"])
    return list(test.get("secondary", []))[:len(declared(record["id"], test["role"]).also)]


REGISTERED_RULES = {"frontier": "registered"}
"""The status rule (`status.RULES`) each design was registered with, where it is not the current one: the
`frontier` design's (`DEVIATIONS`); a design registered later (`pretrained`) uses the current rule."""
CO_PRIMARIES_LATER = frozenset({"frontier"})
"""The designs registered before co-primary checks existed (`DEVIATIONS`, 2026-12-07): their `registered` status
is the primary check's alone; a design registered later (`pretrained`) registered its co-primaries."""


def recompute(record: dict) -> list[TestStatuses]:
    """Each test of `record`, its status three ways, from its stored checks (module docstring); `registered` under
    the rule its design was registered with (`REGISTERED_RULES`, else the current one), with the co-primary checks
    where its design registered them (`CO_PRIMARIES_LATER`)."""
    design = DESIGN_OF.get(record["preset"])
    rule = REGISTERED_RULES.get(design, "current")
    out = []
    for test in record.get("tests", []):
        primary = stored_check(record, test["primary"])
        also = [stored_check(record, n) for n in co_primary_names(record, test)]
        registered = (primary,) if design in CO_PRIMARIES_LATER else (primary, *also)
        out.append(TestStatuses(record["preset"], record["id"], test["role"],
                                combined_status(status_and_reason(c, rule)[0] for c in registered),
                                status_and_reason(primary)[0],
                                combined_status(status_and_reason(c)[0] for c in (primary, *also))))
    return out


def moved(statuses, stage: str) -> tuple[tuple[str, str, str, str, str], ...]:
    """(setting, finding id, role, before, after) of every test in `statuses` whose status `stage` ("rule" or
    "test") changed."""
    stages = {"rule": ("registered", "rule_now"), "test": ("rule_now", "now")}
    if stage not in stages:
        raise ValueError(f"stage must be 'rule' or 'test', got {stage!r}")
    before, after = stages[stage]
    return tuple((s.setting, s.finding_id, s.role, getattr(s, before), getattr(s, after)) for s in statuses
                 if getattr(s, before) != getattr(s, after))


def render_section(design: str = "frontier") -> str:
    """`design`'s Deviations section of its registration (Markdown, appended after the registered text), "" for a
    design without deviations."""
    if not DESIGN_DEVIATIONS.get(design):
        return ""
    lines = ["## Deviations (dated; the registered text above is unchanged)", "",
             "Each change made after this design was registered, and the test statuses it moved (recomputed from "
             "the records by `esreason_lib/paper/deviations.py`; papers/claims.md shows both).", ""]
    for d in DESIGN_DEVIATIONS[design]:
        where = f" ({d.commit})" if d.commit else ""
        lines.append(f"- **{d.date}**{where}: {d.what} {d.why}")
        lines += [f"  - `{s}` {i[:2]} {role} test: {before} under the registration, {after} now"
                  for s, i, role, before, after in d.moved]
    return "\n".join(lines) + "\n"
