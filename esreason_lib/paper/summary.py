"""The summary figure: every check of every finding as one forest plot, from the finding records.

`summary_table(preset, home)` turns the stored checks of each finding (`records.read_record`) into rows: the effect
and 95% interval exactly as papers/claims.md and the README print them (`text`: one number per check everywhere),
and where the row is drawn (`x`, `x_low`, `x_high`: measured from the check's threshold, positive on the side the
paper claims), beside its `delta`, status, the test it belongs to (the paper's test or the control, from the
record's tests) and whether it is that test's primary check. `write_summary(preset, home)` draws them
(`plot_forest`) as `figures/summary.png` (`figures/<preset>/summary.png` for a preset other than tiny); `esreason
summary` (`make claims`, `make figures`) calls it. `verdict_table(finding)` is a computed finding's checks as the
table a notebook prints under its status (`verdict_lead`: the study's own sentence without the checks), and
`status_rule(finding_id)` the paragraph each notebook shows on how its status is reached (the one rule of
docs/statuses.md, with the primary checks the registry declares).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from esreason_lib.paper.deviations import co_primary_names
from esreason_lib.paper.findings import Finding
from esreason_lib.paper.plots import PALETTE, axes_or_new, finish_axes, save_figure
from esreason_lib.paper.records import read_record, records_dir
from esreason_lib.paper.studies.registry import CLAIMS
from esreason_lib.paths import DEFAULT_PRESET

SUMMARY_FIGURE = "summary"
"""The summary figure's file stem."""
_ROLES = {"test": "paper", "paper": "paper", "primary": "paper", "control": "control"}
STATUS_COLORS = {"reproduced": PALETTE[2], "smaller than delta": PALETTE[8], "not reproduced": PALETTE[3],
                 "not resolved": PALETTE[7], "undecidable at this design": PALETTE[4]}
"""A check's status colour in the summary forest plot (any other status: black)."""
REASON_WIDTH = 90
"""The most characters of an `undecidable` check's reason printed beside its row (the whole is in papers/claims.md)."""
PRIMARY_MARK = "\u2605 "
"""Put before the label of a primary or co-primary check in the figure (a star): the checks that set its test's
status."""


def check_numbers(check: dict) -> str:
    """"+0.153 [+0.100, +0.207]": a stored check's effect and 95% interval as every table prints them
    (`design_tallies.headline`, `findings.Check.describe`)."""
    return f"{check['effect']:+.3f} [{check['ci_low']:+.3f}, {check['ci_high']:+.3f}]"


def check_note(check: dict) -> str:
    """`check_numbers`, then the claimed side when it is not "above 0" ("claimed < 0", "claimed > -0.020") and,
    for a check `undecidable at this design`, why (its reason without what the interval alone says, shortened to
    `REASON_WIDTH` characters)."""
    direction, threshold = check.get("direction", "greater"), check.get("threshold", 0.0)
    side = "" if direction == "greater" and threshold == 0 else \
        f", claimed {'>' if direction == 'greater' else '<'} {threshold:g}"
    reason = textwrap.shorten(str(check.get("reason", "")).split(" (the interval alone")[0], REASON_WIDTH,
                              placeholder=" ...")
    why = f"; undecidable: {reason}" if str(check["status"]).startswith("undecidable") and reason else ""
    return check_numbers(check) + side + why


def check_roles(record: dict) -> dict[str, tuple[str, bool]]:
    """{check name: (its test's role, whether it sets that test's status: its primary check or a co-primary one,
    `deviations.co_primary_names`)} from a record's tests (a check in two tests keeps its first, the checks that
    set a status before the secondary ones)."""
    roles: dict[str, tuple[str, bool]] = {}
    for test in record.get("tests", []):
        deciding = [test["primary"], *co_primary_names(record, test)]
        for name, primary in [*((n, True) for n in deciding),
                              *((n, False) for n in test.get("secondary", []) if n not in deciding)]:
            roles.setdefault(name, (test["role"], primary))
    return roles


def summary_row(finding: str, check: dict, role: str = "", primary: bool = False) -> dict:
    """One stored check as a forest-plot row: its effect and interval as stored (printed as `text`,
    `check_note`), where it is drawn (`x`, `x_low`, `x_high`: shifted by its threshold and signed so that the
    claimed side is positive, "less" checks flipped), its delta (0 when it has none), status, `role` ("paper",
    "control" or "": default the check's own `role` or `kind` field) and whether it sets its test's status
    (`check_roles`)."""
    sign = 1.0 if check.get("direction", "greater") == "greater" else -1.0
    threshold = check.get("threshold", 0.0)
    low, high = sorted(sign * (check[k] - threshold) for k in ("ci_low", "ci_high"))
    own = str(check.get("role", check.get("kind", ""))).lower()
    return {"finding": finding, "check": check["name"], "effect": check["effect"], "ci_low": check["ci_low"],
            "ci_high": check["ci_high"], "x": sign * (check["effect"] - threshold), "x_low": low, "x_high": high,
            "delta": check.get("delta") or 0.0, "status": check["status"],
            "role": role or next((v for k, v in _ROLES.items() if k in own), ""), "primary": bool(primary),
            "text": check_note(check)}


def summary_table(preset: str | None = None, home: str | Path | None = None) -> pd.DataFrame:
    """The rows of every stored check of `preset`'s findings (`summary_row`, roles from each record's tests), in
    the findings table's order; ValueError naming the records' folder when none is stored."""
    rows = []
    for c in CLAIMS:
        record = read_record(c.id, preset, home) or {}
        roles = check_roles(record)
        rows += [summary_row(c.id, check, *roles.get(check["name"], ("", False))) for check in record.get("checks", [])]
    if not rows:
        raise ValueError(f"no stored check under {records_dir(preset, home)}: run the notebooks first")
    return pd.DataFrame(rows)


def row_label(row) -> str:
    """A row's label: a star for a primary or co-primary check, "control: " for the control's checks, then the
    check's name."""
    return (PRIMARY_MARK if row["primary"] else "") + ("control: " if row["role"] == "control" else "") + \
        str(row["check"])


def plot_forest(rows: pd.DataFrame, ax=None):
    """Every check as one row of a forest plot (rliable's style): drawn at its effect and 95% interval measured
    from its threshold on the claimed side (0 = the threshold; right of 0 = the direction the paper claims), a
    tick at its `delta`, the colour of its status; rows grouped under their finding, the paper's test's checks as
    circles, the control's as squares, the checks that set each test's status (its primary and any co-primary
    check: `row["primary"]`) starred and larger; beside each row the numbers
    every table prints for it (`text`), with the reason of an `undecidable`.

    `rows` has the columns of `summary_table`: one row per check, top to bottom."""
    fig, ax = axes_or_new(ax, figsize=(9, 1.0 + 0.28 * (len(rows) + rows["finding"].nunique())))
    y, ticks, labels = 0, [], []
    for finding, group in rows.groupby("finding", sort=False):
        ticks.append(y), labels.append(f"$\\bf{{{str(finding).replace('_', ' ').replace(' ', '~')}}}$")
        for _, r in group.iterrows():
            y -= 1
            color = STATUS_COLORS.get(r["status"], "black")
            ax.plot([r["x_low"], r["x_high"]], [y, y], color=color, lw=3.2 if r["primary"] else 2.0,
                    solid_capstyle="butt")
            ax.scatter(r["x"], y, color=color, zorder=3, s=60 if r["primary"] else 24,
                       marker="s" if r["role"] == "control" else "o", edgecolor="black",
                       linewidth=1.2 if r["primary"] else 0.5)
            if r["delta"] > 0:
                ax.plot([r["delta"]] * 2, [y - 0.3, y + 0.3], color="black", lw=1)
            ax.text(1.01, y, r["text"], fontsize=7, va="center", transform=ax.get_yaxis_transform(),
                    fontweight="bold" if r["primary"] else "normal")
            ticks.append(y), labels.append(row_label(r))
        y -= 1
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.set_ylim(y + 0.5, 0.5)
    ax.grid(axis="y", visible=False)
    for status, color in STATUS_COLORS.items():
        ax.plot([], [], color=color, lw=3, label=status)
    ax.plot([], [], color="black", lw=1, marker="|", ls="none", ms=8, label=r"$\delta$ (smallest effect of interest)")
    ax.plot([], [], color="0.5", marker="o", ls="none", ms=8, mec="black", mew=1.2,
            label=f"{PRIMARY_MARK}primary or co-primary check (together set its test's status)")
    finish_axes(ax, "distance from the check's threshold, the paper's claimed side positive (bars: 95% interval "
                "over training seeds and problems)", "", loc="upper center",
                bbox_to_anchor=(0.5, -0.6 / len(ticks) - 0.04), ncol=3)
    return fig, ax


def verdict_table(finding: Finding) -> pd.DataFrame:
    """`finding`'s checks as a table, one row per check: the test it belongs to ("paper" or "control"; "" for a
    check outside the tests) and its part there ("primary", and "co-primary" for a check the claim also needs: set
    the test's status; "secondary": shown beside it),
    the check, effect, 95% interval, MDE, delta, training seeds, status and why; tests in order, each primary first."""
    placed = [(t.role, part, c) for t in finding.tests
              for part, checks in (("primary", (t.primary,)), ("co-primary", t.also), ("secondary", t.secondary))
              for c in checks]
    rows, seen = [], set()
    for role, part, check in placed + [("", "", c) for c in finding.checks]:
        if id(check) in seen:
            continue
        seen.add(id(check))
        rows.append({"test": role, "part": part, "check": check.name,
                     "effect": round(check.effect, 3), "95% interval": f"[{check.ci_low:+.3f}, {check.ci_high:+.3f}]",
                     "MDE": round(abs(check.mde), 3), "delta": check.delta, "seeds": check.n_seeds,
                     "status": check.status, "why": check.reason})
    return pd.DataFrame(rows, columns=["test", "part", "check", "effect", "95% interval", "MDE", "delta", "seeds",
                                       "status", "why"])


def verdict_lead(finding: Finding) -> str:
    """The study's own sentence of `finding` (its measured numbers), without the tests' check descriptions that
    `findings.make_finding` appends and `verdict_table` shows."""
    if not finding.tests:
        return finding.sentence
    first = finding.tests[0]
    return finding.sentence.split(f"{first.role} test ({first.name}): ", 1)[0].rstrip("; ")


def write_summary(preset: str | None = None, home: str | Path | None = None) -> list[Path]:
    """Draw `summary_table(preset, home)` as the summary forest plot and save it in `preset`'s figures folder;
    returns the PNG and PDF paths."""
    fig, ax = plot_forest(summary_table(preset, home))
    ax.set_title("Every check of every finding; right of 0: the paper's side. Printed: the effect and 95% interval "
                 "as in papers/claims.md and the README", fontsize=9)
    paths = save_figure(fig, SUMMARY_FIGURE, preset=preset or DEFAULT_PRESET)
    plt.close(fig)
    return paths


STATUS_RULE = (
    "A check is `reproduced` when its 95% interval (over training seeds and problems) lies on the paper's side of "
    "its threshold without excluding delta, `not reproduced` on the other side, `smaller than delta` when it "
    "excludes every effect of at least delta, `not resolved` when it holds both the threshold and delta (or the "
    "seeds disagree), and `undecidable at this design` when its construction or its operating characteristic shows "
    "the outcome could not have gone the other way (the reason is printed beside it). Secondary checks are shown "
    "beside their test and never enter a status.")
"""The five statuses in one paragraph: docs/statuses.md's table, as `status_rule` quotes it."""


def status_rule(finding_id: str) -> str:
    """How `finding_id`'s status is reached, as Markdown a notebook displays: its tests and their primary checks
    as declared (`studies.registry.CLAIMS`), then `STATUS_RULE`, with a link to docs/statuses.md. ValueError
    naming the id when it declares no test."""
    specs = next((c.tests for c in CLAIMS if c.id == finding_id), ())
    if not specs:
        raise ValueError(f"status_rule: no tests declared for {finding_id!r} (have {[c.id for c in CLAIMS]})")
    roles = {"paper": "the paper's test", "control": "the control"}
    tests = [f"{roles[t.role]} (*{t.name}*), whose primary check is *{t.primary}*"
             + "".join(f" (with the co-primary *{a}*: both must hold)" for a in t.also) for t in specs]
    lead = (f"The finding's status is the status of {tests[0]}; {tests[1]}, is shown beside it with its own "
            f"status." if len(tests) > 1 else f"The finding's status is the status of {tests[0]}.")
    return (f"**How the status is reached** ([docs/statuses.md](../docs/statuses.md)). {lead} Each primary check "
            f"was declared before the run. {STATUS_RULE}")

