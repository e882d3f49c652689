import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from esreason_lib.paper import claims, design_tallies, records, summary  # noqa: E402
from esreason_lib.paper.findings import Check, make_finding  # noqa: E402


def test_summary_row_prints_the_stored_numbers_and_draws_the_claimed_side_right_of_the_threshold():
    greater = {"name": "g", "effect": 0.3, "ci_low": 0.2, "ci_high": 0.4, "direction": "greater", "threshold": 0.1,
               "delta": 0.02, "status": "reproduced"}
    row = summary.summary_row("01", greater)
    assert row == pytest.approx(
        {"finding": "01", "check": "g", "effect": 0.3, "ci_low": 0.2, "ci_high": 0.4, "x": 0.2, "x_low": 0.1,
         "x_high": 0.3, "delta": 0.02, "status": "reproduced", "role": "", "primary": False,
         "text": "+0.300 [+0.200, +0.400], claimed > 0.1"})
    less = {**greater, "direction": "less", "threshold": 0.0, "role": "control"}  # below 0 is the claimed side
    row = summary.summary_row("01", less)
    assert (row["x"], row["x_low"], row["x_high"]) == pytest.approx((-0.3, -0.4, -0.2))
    assert (row["effect"], row["text"], row["role"]) == (0.3, "+0.300 [+0.200, +0.400], claimed < 0", "control")
    assert summary.summary_row("01", {**greater, "kind": "the paper's test"})["role"] == "paper"
    assert summary.summary_row("01", greater, "control", True)["primary"]
    undecidable = {**greater, "threshold": 0.0, "status": "undecidable at this design", "reason": "a ceiling"}
    assert summary.summary_row("01", undecidable)["text"] == "+0.300 [+0.200, +0.400]; undecidable: a ceiling"
    long = {**undecidable, "reason": "P(reproduced | effect = delta) = 0.21 < 0.5 at this design (the interval alone: "
                                     "not resolved)"}
    assert summary.summary_row("01", long)["text"].endswith("undecidable: P(reproduced | effect = delta) = 0.21 < 0.5 "
                                                            "at this design")


def test_the_figure_prints_the_numbers_of_the_readme_and_claims_md_for_the_same_check(tmp_path, monkeypatch):
    """One number per check everywhere: for each test's primary check, the figure's row (`summary_table`, what
    `plot_forest` prints) carries the README cell's effect and interval and claims.md's, under the same name."""
    from esreason_lib.paper.findings import Test

    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "runs"))
    below = Check("entropy below base", -0.059, -0.08, -0.03, 0.02, direction="less", n_seeds=3)
    above = Check("pass@16 - greedy above 0.10", 0.505, 0.455, 0.555, 0.03, threshold=0.10)
    side = Check("a secondary", 0.01, -0.02, 0.04, 0.03)
    finding = make_finding("x", [side], tests=[Test("paper", "the paper's", above, (side,)),
                                               Test("control", "noise", below)])
    records.record_finding("05_forgetting", finding, preset="tiny")  # declares no co-primary check
    rows = summary.summary_table().set_index("check")
    record = records.read_record("05_forgetting")
    readme, full = "\n".join(claims.readme_table()), claims.render_claims()
    for role, check in (("paper", above), ("control", below)):
        row = rows.loc[check.name]
        assert (row["role"], row["primary"]) == (role, True)
        number = design_tallies.headline(record, role)
        assert row["text"].startswith(number) and number in readme  # the README's cell
        assert f"{check.name}: {number}" in full  # claims.md's sentence (`Check.describe`)
    assert rows.loc["entropy below base", "text"] == "-0.059 [-0.080, -0.030], claimed < 0"
    assert rows.loc["entropy below base", "x"] == pytest.approx(0.059)  # drawn on the claimed side
    assert not rows.loc["a secondary", "primary"]
    fig, ax = summary.plot_forest(summary.summary_table())
    labels = {t.get_text() for t in ax.get_yticklabels()}
    assert {"\u2605 pass@16 - greedy above 0.10", "\u2605 control: entropy below base", "a secondary"} <= labels
    assert "+0.505 [+0.455, +0.555], claimed > 0.1" in [t.get_text() for t in ax.texts]


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
    rows = pd.DataFrame({"finding": ["01", "01", "05"], "check": ["a", "b", "c"], "x": [0.1, -0.2, 0.0],
                         "x_low": [0.05, -0.3, -0.1], "x_high": [0.15, -0.1, 0.1], "delta": [0.02, 0.0, 0.01],
                         "status": ["reproduced", "not reproduced", "undecidable at this design"],
                         "role": ["paper", "control", ""], "primary": [True, False, False],
                         "text": ["+0.100 [+0.050, +0.150]", "t2", "t3; undecidable: a floor"]})
    fig, ax = summary.plot_forest(rows)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[1:3] == ["\u2605 a", "control: b"] and labels[4] == "c" and len(labels) == 5  # two headers
    intervals = [line for line in ax.lines if len(line.get_xdata()) == 2 and line.get_xdata()[0] != line.get_xdata()[1]]
    assert [tuple(line.get_xdata()) for line in intervals] == [(0.05, 0.15), (-0.3, -0.1), (-0.1, 0.1)]
    assert intervals[0].get_color() == summary.STATUS_COLORS["reproduced"]
    assert intervals[0].get_linewidth() > intervals[1].get_linewidth()  # the primary check stands out
    assert [t.get_text() for t in ax.texts] == ["+0.100 [+0.050, +0.150]", "t2", "t3; undecidable: a floor"]


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


def test_the_figure_stars_every_check_that_sets_a_status_co_primary_ones_too(tmp_path, monkeypatch):
    """Both checks a claim's paper test needs (its primary and the co-primary) are starred and drawn larger, in a
    record that stores "also" and in one written before co-primary checks existed (its first secondary, as the
    registry declares one co-primary for 01's paper test)."""
    from esreason_lib.paper.findings import Test

    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "runs"))
    lead, co = Check("Pass@K above GRPO", 0.15, 0.1, 0.2, 0.05), Check("Pass@1 above base", 0.02, 0.01, 0.03, 0.02)
    side, noise = Check("entropy below base", -0.05, -0.08, -0.03, 0.02, direction="less"), \
        Check("ES above noise", 0.1, 0.05, 0.15, 0.04)
    finding = make_finding("x", tests=[Test("paper", "p", lead, (side,), also=(co,)), Test("control", "n", noise)])
    records.record_finding("01_passk_es_vs_grpo", finding, preset="tiny")
    rows = summary.summary_table().set_index("check")
    assert list(rows["primary"]) == [True, True, False, True] and rows.loc["Pass@1 above base", "role"] == "paper"
    fig, ax = summary.plot_forest(summary.summary_table())
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[1:] == ["\u2605 Pass@K above GRPO", "\u2605 Pass@1 above base", "entropy below base",
                          "\u2605 control: ES above noise"]
    sizes = [float(c.get_sizes()[0]) for c in ax.collections]
    assert sizes[0] == sizes[1] == sizes[3] > sizes[2]  # the deciding checks drawn larger
    old = records.read_record("01_passk_es_vs_grpo")
    old["tests"][0].pop("also")
    old["tests"][0]["secondary"] = ["Pass@1 above base", "entropy below base"]
    assert summary.check_roles(old)["Pass@1 above base"] == ("paper", True)
    assert summary.check_roles(old)["entropy below base"] == ("paper", False)
