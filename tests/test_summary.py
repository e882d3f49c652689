import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from esreason_lib.paper import records, summary  # noqa: E402
from esreason_lib.paper.findings import Check, make_finding  # noqa: E402


def test_summary_row_puts_the_claimed_side_right_of_the_threshold():
    greater = {"name": "g", "effect": 0.3, "ci_low": 0.2, "ci_high": 0.4, "direction": "greater", "threshold": 0.1,
               "delta": 0.02, "status": "reproduced"}
    assert summary.summary_row("01", greater) == pytest.approx(
        {"finding": "01", "check": "g", "effect": 0.2, "ci_low": 0.1, "ci_high": 0.3, "delta": 0.02,
         "status": "reproduced", "role": ""})
    less = {**greater, "direction": "less", "threshold": 0.0, "role": "control"}  # below 0 is the claimed side
    row = summary.summary_row("01", less)
    assert (row["effect"], row["ci_low"], row["ci_high"]) == pytest.approx((-0.3, -0.4, -0.2))
    assert row["role"] == "control"
    assert summary.summary_row("01", {**greater, "kind": "the paper's test"})["role"] == "test"


def test_write_summary_draws_every_stored_check_into_the_presets_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "runs"))
    monkeypatch.setenv("ESREASON_FIGURES", str(tmp_path / "figures"))
    with pytest.raises(ValueError, match="no stored check under .*findings/powered"):
        summary.summary_table("powered")
    checks = [Check("a", 0.2, 0.1, 0.3, 0.05), Check("b", -0.1, -0.2, 0.0, 0.05, direction="less")]
    records.record_finding("05_forgetting", make_finding("x", checks), preset="tiny")
    records.record_finding("00_base_models", make_finding("y", checks[:1], kind="setup"), preset="powered")
    assert list(summary.summary_table()["check"]) == ["a", "b"]
    assert summary.write_summary()[0] == tmp_path / "figures" / "summary.png"
    assert summary.write_summary("powered")[0] == tmp_path / "figures" / "powered" / "summary.png"
    first = (tmp_path / "figures" / "summary.png").read_bytes()
    summary.write_summary()
    assert (tmp_path / "figures" / "summary.png").read_bytes() == first  # a redraw gives the same bytes


def test_plot_forest_draws_one_row_per_check_in_its_status_colour():
    rows = pd.DataFrame({"finding": ["01", "01", "05"], "check": ["a", "b", "c"], "effect": [0.1, -0.2, 0.0],
                         "ci_low": [0.05, -0.3, -0.1], "ci_high": [0.15, -0.1, 0.1], "delta": [0.02, 0.0, 0.01],
                         "status": ["reproduced", "not reproduced", "not resolved"], "role": ["test", "control", ""]})
    fig, ax = summary.plot_forest(rows)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[1:3] == ["a", "control: b"] and labels[4] == "c" and len(labels) == 5  # two finding headers
    intervals = [line for line in ax.lines if len(line.get_xdata()) == 2 and line.get_xdata()[0] != line.get_xdata()[1]]
    assert [tuple(line.get_xdata()) for line in intervals] == [(0.05, 0.15), (-0.3, -0.1), (-0.1, 0.1)]
    assert intervals[0].get_color() == summary.STATUS_COLORS["reproduced"]
    assert "+0.100 [+0.050, +0.150]" in [t.get_text() for t in ax.texts]


def test_verdict_table_has_one_row_per_check_under_its_test():
    from esreason_lib.paper.findings import Check, Finding, Test, make_finding

    paper, side = Check("ES above GRPO", 0.15, 0.1, 0.2, 0.05, n_seeds=3), Check("greedy", 0.01, -0.02, 0.04, 0.06)
    control, extra = Check("ES above noise", -0.01, -0.03, 0.01, 0.04, delta=0.02), Check("other", 0.5, 0.4, 0.6, 0.1)
    finding = make_finding("base pass@1 0.110", [extra],
                           tests=[Test("paper", "the paper's", paper, (side,)), Test("control", "noise", control)])
    table = summary.verdict_table(finding)
    assert list(table["check"]) == ["ES above GRPO", "greedy", "ES above noise", "other"]
    assert list(table["test"]) == ["paper", "paper", "control", ""]
    assert list(table["part"]) == ["primary", "secondary", "primary", ""]
    first = table.iloc[0]
    assert (first["effect"], first["95% interval"], first["MDE"], first["seeds"]) == (0.15, "[+0.100, +0.200]", 0.05, 3)
    assert first["status"] == "reproduced" and first["why"] == "CI on the claimed side"
    assert table.iloc[2]["delta"] == 0.02 and table.iloc[2]["status"] == control.status
    assert summary.verdict_lead(finding) == "base pass@1 0.110"
    assert summary.verdict_lead(make_finding("", [paper])) == ""
    bare = Finding("reproduced", "measured 0.3", (paper,))
    assert summary.verdict_lead(bare) == "measured 0.3" and list(summary.verdict_table(bare)["test"]) == [""]


def test_verdict_table_shows_a_co_primary_check_in_its_test():
    from esreason_lib.paper.findings import Check, Test, make_finding

    lead, moved = Check("Pass@K above GRPO", 0.15, 0.1, 0.2, 0.05), Check("Pass@1 above base", 0.0, -0.01, 0.01, 0.02)
    table = summary.verdict_table(make_finding("x", tests=[Test("paper", "p", lead, also=(moved,))]))
    assert list(table["part"]) == ["primary", "co-primary"] and list(table["test"]) == ["paper", "paper"]
