"""The summary figure: every check of every finding as one forest plot, from the finding records.

`summary_table(preset, home)` turns the stored checks of each finding (`records.read_record`) into signed rows: the
effect and 95% interval measured from the check's threshold, positive on the side the paper claims, beside its
`delta` and status. `write_summary(preset, home)` draws them (`plot_forest`) as `figures/summary.png`
(`figures/<preset>/summary.png` for a preset other than tiny); `esreason claims` (`make claims`, `make figures`)
calls it. A check's role (the paper's test or its control) is read from its `role` or `kind` field when the record
has one; else the rows are grouped by finding only. `verdict_table(finding)` is a computed finding's checks as the
table a notebook prints under its status (`verdict_lead`: the study's own sentence without the checks).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from esreason_lib.paper.findings import Finding
from esreason_lib.paper.plots import PALETTE, axes_or_new, finish_axes, save_figure
from esreason_lib.paper.records import read_record, records_dir
from esreason_lib.paper.studies.registry import CLAIMS
from esreason_lib.paths import DEFAULT_PRESET

SUMMARY_FIGURE = "summary"
"""The summary figure's file stem."""
_ROLES = {"test": "test", "paper": "test", "primary": "test", "control": "control"}
STATUS_COLORS = {"reproduced": PALETTE[2], "smaller than delta": PALETTE[8], "not reproduced": PALETTE[3],
                 "not resolved": PALETTE[7], "undecidable at this design": PALETTE[4]}
"""A check's status colour in the summary forest plot (any other status: black)."""


def plot_forest(rows: pd.DataFrame, ax=None):
    """Every check as one row of a forest plot (rliable's style): its effect and 95% interval on the claimed side
    of its threshold (0 = the threshold; right of 0 = the direction the paper claims), a tick at its `delta`, the
    colour of its status; rows grouped under their finding, the paper's tests as circles, controls as squares.

    `rows` has columns finding, check, effect, ci_low, ci_high, delta, status and role ("test", "control" or "":
    `summary_table`), effect and interval already signed and shifted; one row per check, top to bottom."""
    fig, ax = axes_or_new(ax, figsize=(9, 1.0 + 0.28 * (len(rows) + rows["finding"].nunique())))
    y, ticks, labels = 0, [], []
    for finding, group in rows.groupby("finding", sort=False):
        ticks.append(y), labels.append(f"$\\bf{{{str(finding).replace('_', ' ').replace(' ', '~')}}}$")
        for _, r in group.iterrows():
            y -= 1
            color = STATUS_COLORS.get(r["status"], "black")
            ax.plot([r["ci_low"], r["ci_high"]], [y, y], color=color, lw=2.2, solid_capstyle="butt")
            ax.scatter(r["effect"], y, color=color, zorder=3, s=28, marker="s" if r["role"] == "control" else "o",
                       edgecolor="black", linewidth=0.6)
            if r["delta"] > 0:
                ax.plot([r["delta"]] * 2, [y - 0.3, y + 0.3], color="black", lw=1)
            ax.text(1.01, y, f"{r['effect']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]", fontsize=7,
                    va="center", transform=ax.get_yaxis_transform())
            ticks.append(y), labels.append(("control: " if r["role"] == "control" else "") + str(r["check"]))
        y -= 1
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.set_ylim(y + 0.5, 0.5)
    ax.grid(axis="y", visible=False)
    for status, color in STATUS_COLORS.items():
        ax.plot([], [], color=color, lw=3, label=status)
    ax.plot([], [], color="black", lw=1, marker="|", ls="none", ms=8, label=r"$\delta$ (smallest effect of interest)")
    finish_axes(ax, "effect on the claimed side of the threshold (95% interval)", "", loc="upper center",
            bbox_to_anchor=(0.5, -0.6 / len(ticks) - 0.04), ncol=3)
    return fig, ax


def summary_row(finding: str, check: dict) -> dict:
    """One stored check as a forest-plot row: effect and interval shifted by its threshold and signed so that the
    claimed side is positive ("less" checks flipped), its delta (0 when it has none), status and role ("test",
    "control" or "")."""
    sign = 1.0 if check.get("direction", "greater") == "greater" else -1.0
    threshold = check.get("threshold", 0.0)
    low, high = sorted(sign * (check[k] - threshold) for k in ("ci_low", "ci_high"))
    role = str(check.get("role", check.get("kind", ""))).lower()
    return {"finding": finding, "check": check["name"], "effect": sign * (check["effect"] - threshold),
            "ci_low": low, "ci_high": high, "delta": check.get("delta") or 0.0, "status": check["status"],
            "role": next((v for k, v in _ROLES.items() if k in role), "")}


def summary_table(preset: str | None = None, home: str | Path | None = None) -> pd.DataFrame:
    """The rows of every stored check of `preset`'s findings (`summary_row`), in the findings table's order;
    ValueError naming the records' folder when none is stored."""
    rows = [summary_row(c.id, check) for c in CLAIMS for check in (read_record(c.id, preset, home) or {}).get(
        "checks", [])]
    if not rows:
        raise ValueError(f"no stored check under {records_dir(preset, home)}: run the notebooks first")
    return pd.DataFrame(rows)


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
    ax.set_title("Every check of every finding: effect and 95% interval (0 = the check's threshold)", fontsize=9)
    paths = save_figure(fig, SUMMARY_FIGURE, preset=preset or DEFAULT_PRESET)
    plt.close(fig)
    return paths
