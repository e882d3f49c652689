"""The notebooks' prose tells the one status rule (docs/statuses.md): each notebook displays `summary.status_rule`
(its tests and primary checks as `studies.registry.CLAIMS` declares them), and no markdown cell restates an older rule
(all checks ANDed into the status, a CI excluding delta called `not reproduced`, the control called the verdict)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from esreason_lib.paper.studies.registry import CLAIMS
from esreason_lib.paper.summary import STATUS_RULE, status_rule

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.py"))
OLD_RULES = {
    r"only (when|if) all": "a status ANDed over all checks (one primary check per test sets it)",
    r"`reproduced` only (when|if)": "a status ANDed over checks",
    r"excludes every effect that large is `not reproduced`": "a CI below delta is `smaller than delta`",
    r"\bverdicts?\b": "a status, not a verdict (and the control is not 'the verdict')",
    r"`not resolved` when an interval contains zero": "`not resolved`: the interval holds the threshold and delta",
}
"""Phrases of rules the notebooks once stated, and what the one rule says instead."""

TESTS = {c.id: c.tests for c in CLAIMS}
"""Each claim's declared tests (`registry.TestSpec`: paper's test first), by notebook stem."""


def markdown_cells(source: str) -> list[str]:
    """The text of each `# %% [markdown]` cell of a jupytext percent source (comment marks removed)."""
    cells = re.split(r"^# %%.*$", source, flags=re.M)
    heads = re.findall(r"^# %%.*$", source, flags=re.M)
    return ["\n".join(line[2:] for line in body.strip().splitlines())
            for head, body in zip(heads, cells[1:]) if "[markdown]" in head]


def test_markdown_cells_reads_only_markdown():
    source = "# %% [markdown]\n# a *b*\n# c\n\n# %%\nx = 1\n# %% [markdown]\n# d\n"
    assert markdown_cells(source) == ["a *b*\nc", "d"]


def test_status_rule_names_the_declared_primary_checks_and_the_rule():
    text = status_rule("05_forgetting")
    for spec in TESTS["05_forgetting"]:
        assert f"*{spec.name}*" in text and f"*{spec.primary}*" in text
    assert text.endswith(STATUS_RULE) and "docs/statuses.md" in text
    assert "shown beside it" not in status_rule("00_base_models")  # one test, no control
    with pytest.raises(ValueError, match="status_rule: no tests declared for '07_x'"):
        status_rule("07_x")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_shows_the_one_rule_and_restates_no_older_one(path):
    source = path.read_text()
    assert f'display(Markdown(status_rule("{path.stem}")))' in source
    for cell in markdown_cells(source):
        flat = " ".join(cell.split())
        for pattern, why in OLD_RULES.items():
            assert not re.search(pattern, flat), f"{path.name}: {pattern!r} restates an older rule: {why}"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if len(TESTS.get(p.stem, ())) > 1], ids=lambda p: p.stem)
def test_each_notebooks_prose_names_its_registered_control(path):
    """The introduction names the control the registry declares (05's once named another than the README)."""
    control = next(spec for spec in TESTS[path.stem] if spec.role == "control")
    prose = " ".join(" ".join(markdown_cells(path.read_text())).split())
    assert "control" in prose and (control.name in prose or control.primary in prose), control.name
