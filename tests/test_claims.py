import pytest

from esreason_lib import paths
from esreason_lib.paper import claims, compare, design_tallies, records
from esreason_lib.paper.findings import Check, make_finding
from esreason_lib.paper.studies import registry


def _finding(sentence, low=0.1, high=0.2):
    return make_finding(sentence, [Check("effect", (low + high) / 2, low, high, 0.05)])


def test_record_and_render_claims(tmp_path):
    home = tmp_path / "runs"
    table = claims.render_claims(home)
    assert table.count("not run yet") == len(registry.CLAIMS)
    records.record_finding("05_forgetting", _finding("smoke's", -0.1, 0.2), preset="smoke", home=home)
    assert claims.render_claims(home).count("not run yet") == len(registry.CLAIMS)  # smoke's records are never shown
    records.record_finding("05_forgetting", _finding("Delta pass@1 on addition +0.01 | sorting -0.02", -0.1, 0.2),
                          preset="tiny", home=home)
    table = claims.render_claims(home)
    assert "Delta pass@1 on addition +0.01 / sorting -0.02" in table  # pipes escaped for Markdown
    assert "| **not resolved** |" in table  # the status column comes from the checks
    assert table.count("not run yet") == len(registry.CLAIMS) - 1
    with pytest.raises(ValueError, match="finding_id"):
        records.record_finding("99_nope", _finding("x"), preset="smoke", home=home)
    with pytest.raises(TypeError, match="findings.Finding"):
        records.record_finding("05_forgetting", "a string verdict", preset="smoke", home=home)


def test_write_claims_updates_readme_block(tmp_path):
    home = tmp_path / "runs"
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- claims:start -->\nOLD BLOCK\n<!-- claims:end -->\nrest\n")
    records.record_finding("00_base_models", _finding("greedy 0.30"), preset="tiny", home=home)
    claims.write_claims(home, claims_path=tmp_path / "claims.md", readme_path=readme)
    text = readme.read_text()
    assert "OLD BLOCK" not in text and text.endswith("rest\n")
    assert "greedy 0.30" in (tmp_path / "claims.md").read_text() and "**setup: reproduced**" in (
        tmp_path / "claims.md").read_text()
    row = next(line for line in text.splitlines() if "notebooks/00_base_models.py" in line)
    assert "**reproduced** +0.500 [+0.400, +0.600]" in row or "**reproduced**" in row  # the paper's test, headline
    assert "[papers/claims.md](papers/claims.md)" in text


def test_setup_finding_is_shown_never_counted_and_powered_is_separate(tmp_path):
    home = tmp_path / "runs"
    records.record_finding("00_base_models", make_finding("habit", [Check("e", 0.5, 0.4, 0.6, 0.05)], kind="setup"),
                          preset="tiny", home=home)
    assert "0 reproduced" in claims.tally(home) and "6 not run" in claims.tally(home)  # 00 is not a claim
    records.record_finding("05_forgetting", _finding("kept"), preset="tiny", home=home)
    assert "1 reproduced" in claims.tally(home) and "5 not run" in claims.tally(home)
    assert "6 not run" in claims.tally(home, "powered")  # powered never ran
    table = claims.render_claims(home)
    assert "setup check, not a claim of the paper" in table and "| **setup: reproduced** | not run |" in table
    records.record_finding("05_forgetting", _finding("powered kept"), preset="powered", home=home)
    assert (home / "findings" / "powered" / "05_forgetting.json").is_file()
    assert "1 reproduced" in claims.tally(home, "powered")
    main, powered = claims.render_claims(home).split("under the `powered` design")
    assert "kept" in main and "powered kept" not in main  # the main table shows the last run's result
    assert "| `notebooks/05_forgetting.py` | **reproduced** | paper test (the claim): **reproduced**; holds as the " \
           "paper tests it. powered kept" in powered
    assert "00_base_models" not in powered  # only findings the powered preset recorded
    short = claims.render_claims(home, powered_table=False)  # the README's version: powered's status column only
    assert "powered kept" not in short and "(papers/claims.md)" in short
    row = next(line for line in short.splitlines() if "notebooks/05_forgetting.py" in line)
    assert row.startswith(f"| {registry.CLAIMS[-2].short} (") and "| **reproduced**" in row  # one short line a claim
    assert registry.CLAIMS[-2].claim not in short.split("Every check")[0]  # the whole sentence is claims.md's


def test_findings_dir_follows_home_and_env(tmp_path, monkeypatch):
    assert paths.findings_dir(tmp_path) == tmp_path / "findings"
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "store"))
    assert paths.findings_dir() == tmp_path / "store" / "findings"
    monkeypatch.delenv("ESREASON_HOME")
    assert paths.findings_dir() == paths.REPO_ROOT / "runs" / "findings"


def test_every_finding_names_a_notebook_and_its_committed_figures():
    """Each row of the table points at a notebook that exists and at the figures that notebook saves (read from its
    source, so no figure is left out: 01_frontier_paths was, when the names were typed by hand)."""
    from esreason_lib.paper.notebooks import list_notebooks

    stems = [p.stem for p in list_notebooks()]
    assert [f.id for f in registry.CLAIMS] == stems
    for finding in registry.CLAIMS:
        source = (paths.REPO_ROOT / "notebooks" / f"{finding.id}.py").read_text()
        assert len(finding.figures) == source.count("save_figure(fig")
        for figure in finding.figures:
            assert f'"{figure}"' in source, f"{finding.id} does not save {figure}"
            assert (paths.REPO_ROOT / "figures" / f"{figure}.png").is_file()
    one = registry._BY_ID["01_passk_es_vs_grpo"]
    assert "01_frontier_paths" in one.figures and one.figure == ", ".join(one.figures)


def test_figure_names_reads_literal_names_and_refuses_others(tmp_path):
    from esreason_lib.paper.notebooks import figure_names

    nb = tmp_path / "99_x.py"
    nb.write_text('save_figure(fig, "99_a", preset=preset)\n_ = save_figure(\n    fig, "99_b")\nsave_figure(f, "")\n')
    assert figure_names(nb) == ("99_a", "99_b", "")
    nb.write_text('save_figure(fig, f"99_{k}", preset=preset)\n')
    with pytest.raises(ValueError, match=r"'99_x.py' saves a figure named by 'f\"99_\{k\}\"', not a string literal"):
        figure_names(nb)


def test_claims_against_a_store_without_findings_refuses_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from esreason_lib.cli import main

    home, readme, table = tmp_path / "runs", tmp_path / "README.md", tmp_path / "claims.md"
    readme.write_text("intro\n<!-- claims:start -->\nold\n<!-- claims:end -->\nrest\n")
    records.record_finding("00_base_models", _finding("greedy 0.30"), preset="tiny", home=home)
    claims.write_claims(home, claims_path=table, readme_path=readme)
    before = readme.read_text(), table.read_text()
    monkeypatch.setattr(claims.write_claims, "__defaults__", (tmp_path / "empty", table, readme))
    assert main(["claims"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert (len(err) == 1 and err[0].startswith("esreason: error: the run store's findings")
            and "00_base_models" in err[0])
    assert (readme.read_text(), table.read_text()) == before
    monkeypatch.setattr(claims.write_claims, "__defaults__", (home, table, readme))  # the store that holds it
    assert main(["claims"]) == 0 and "greedy 0.30" in table.read_text() and "00_base_models" in readme.read_text()


def test_compare_findings_puts_two_presets_checks_side_by_side(tmp_path, capsys):
    home = tmp_path / "runs"
    with pytest.raises(ValueError, match="share no stored check"):
        compare.render_comparison("tiny", "tiny-exact", home)
    records.record_finding("01_passk_es_vs_grpo", _finding("a", 0.1, 0.2), preset="tiny", home=home)
    records.record_finding("01_passk_es_vs_grpo", _finding("b", -0.3, 0.2), preset="tiny-exact", home=home)
    assert records.record_path("01_passk_es_vs_grpo", "tiny-exact", home).parent.name == "tiny-exact"
    table = compare.render_comparison("tiny", "tiny-exact", home)
    assert "| 01 | effect | +0.150 [+0.100, +0.200] | reproduced | -0.050 [-0.300, +0.200] | not resolved |" in table
    assert table.endswith("0 of 1 checks have the same status under both.\n")
    records.record_finding("01_passk_es_vs_grpo", _finding("c", 0.1, 0.2), preset="smoke", home=home)
    assert compare.render_comparison("tiny", "tiny-exact", home) == table  # smoke's run is kept apart from tiny's


def test_compare_findings_command(tmp_path, monkeypatch, capsys):
    from esreason_lib.cli import main

    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "runs"))
    assert main(["compare-findings", "tiny", "tiny-exact"]) == 2
    assert "share no stored check" in capsys.readouterr().err
    for preset in ("tiny", "tiny-exact"):
        records.record_finding("02_js_diversity", _finding("x"), preset=preset, home=tmp_path / "runs")
    assert main(["compare-findings", "tiny", "tiny-exact"]) == 0
    assert "1 of 1 checks have the same status" in capsys.readouterr().out


def test_claims_after_a_separate_preset_on_a_store_without_the_last_run(tmp_path, monkeypatch, capsys):
    """`make reproduce PRESET=tiny-exact` on an empty store: its records live apart, so the claims step leaves the
    committed tables alone and says where the findings are, instead of failing the whole run at its end."""
    from esreason_lib.cli import main

    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "runs"))
    claims_md = tmp_path / "claims.md"
    claims_md.write_text("| x | `notebooks/01_passk_es_vs_grpo.py` | shown |\n")
    monkeypatch.setattr(claims, "CLAIMS_PATH", claims_md)
    monkeypatch.setattr(claims.write_claims, "__defaults__", (None, claims_md, None))
    records.record_finding("01_passk_es_vs_grpo", _finding("x"), preset="tiny-exact", home=tmp_path / "runs")
    assert main(["claims", "--preset", "tiny-exact"]) == 0
    assert "left as they are" in capsys.readouterr().out and "shown" in claims_md.read_text()
    assert main(["claims", "--preset", "tiny"]) == 2
    assert "lack 01_passk_es_vs_grpo" in capsys.readouterr().err


def _two_tests(paper, control):
    from esreason_lib.paper.findings import Test

    def chk(role, low, high):
        return Check(f"{role} c", (low + high) / 2, low, high, 0.05, delta=0.05)

    cis = {"reproduced": (0.1, 0.2), "smaller than delta": (0.01, 0.03), "not reproduced": (-0.2, -0.1),
           "not resolved": (-0.1, 0.2)}
    return make_finding("x", tests=[Test("paper", "as the paper", chk("paper", *cis[paper])),
                                    Test("control", "matched", chk("control", *cis[control]))])


def test_pair_meaning_and_tests_in_the_result_cell(tmp_path):
    assert design_tallies.pair_meaning("reproduced", "smaller than delta") == (
        "holds as the paper tests it; under the control, not above delta (the alternative leaves less than delta)")
    assert design_tallies.pair_meaning("smaller than delta", None) == "as the paper tests it, not above delta"
    assert design_tallies.pair_meaning("reproduced", "reproduced") == (
        "holds as the paper tests it; survives the control")
    assert design_tallies.pair_meaning("not reproduced", "undecidable at this design") == (
        "fails as the paper tests it; the control cannot go either way here")
    assert design_tallies.pair_meaning("undecidable at this design", None) == (
        "the paper's test cannot go either way here")
    home = tmp_path / "runs"
    records.record_finding("01_passk_es_vs_grpo", _two_tests("reproduced", "smaller than delta"), preset="tiny",
                          home=home)
    table = claims.render_claims(home)
    assert ("paper test (as the paper): **reproduced**; control test (matched): **smaller than delta**; holds as the "
            "paper tests it; under the control, not above delta" in table)


def test_a_record_without_tests_renders_as_before(tmp_path):
    """The committed tiny and powered records predate tests: their rows must not change."""
    import json

    home = tmp_path / "runs"
    path = records.record_finding("05_forgetting", _finding("kept"), preset="tiny", home=home)
    rec = json.loads(path.read_text())
    del rec["tests"]
    path.write_text(json.dumps(rec))
    row = [r for r in claims.render_claims(home).splitlines() if "05_forgetting" in r][0]
    assert row.endswith(f"| **reproduced** | not run | kept; paper test (the claim): effect: +0.150 [+0.100, +0.200] "
                        f"(MDE 0.050; reproduced) (preset `tiny`, {rec['time'][:10]}) |")


def test_a_design_renders_one_row_per_claim_and_setting_and_counts_every_status(tmp_path):
    home = tmp_path / "runs"
    assert "The `frontier` design" not in claims.render_claims(home)  # never ran: no design table
    settings = claims.DESIGNS["frontier"]
    for setting, (paper, control) in zip(settings, [("reproduced", "smaller than delta"),
                                                    ("reproduced", "reproduced"), ("not reproduced", "not resolved")]):
        records.record_finding("01_passk_es_vs_grpo", _two_tests(paper, control), preset=setting, home=home)
    assert records.record_path("01_passk_es_vs_grpo", settings[0], home).parent.name == settings[0]
    text = design_tallies.render_design("frontier", home)
    assert ("| `01_passk_es_vs_grpo` | `frontier-habit` | reproduced | smaller than delta | holds as the paper tests "
            "it; under the control, not above delta (the alternative leaves less than delta) | - |") in text
    # the first two settings' paper tests are the same check to the digit: one measurement, counted once
    assert ("| ES: Pass@1 up, Pass@K above GRPO's, entropy kept (01) | 1 / 1 / 0 / 0 / 0 of 2 (`frontier-habit` = "
            "`frontier-clean`: one measurement) | 1 / 0 / 1 / 1 / 0 of 3 |") in text
    assert "| ES does not forget held-out tasks (05) | not run | not run |" in text
    assert text in claims.render_claims(home)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- claims:start -->\n<!-- claims:end -->\n")
    claims.write_claims(home, tmp_path / "claims.md", readme)
    text = readme.read_text()  # the tallies in the short table's own rows; the setting rows stay in claims.md
    assert design_tallies.design_tally("frontier", "01_passk_es_vs_grpo", home) == (
        "1 / 1 / 0 / 0 / 0 of 2 (`frontier-habit` = `frontier-clean`: one measurement); 1 / 0 / 1 / 1 / 0 of 3")
    row = next(line for line in text.splitlines() if "notebooks/01_passk_es_vs_grpo.py" in line)
    assert "| not run | not run | 1 / 1 / 0 / 0 / 0 of 2 (`frontier-habit`" in row
    assert "| `frontier` settings: the paper's test; the control |" in text
    assert design_tallies.design_tally("frontier", "00_base_models", home) == "-"
    assert design_tallies.design_summary("frontier", home) in text
    # one list item each: legend, redraw, deviations
    summary = design_tallies.design_summary("frontier", home).splitlines()
    assert summary[0].startswith("- The `frontier` column counts") and all(line.startswith("- ") for line in summary)
    assert "| `01_passk_es_vs_grpo` | `frontier-habit` |" not in text


def test_counts_show_every_status_and_refuse_an_unknown_one():
    assert design_tallies.counts(["reproduced", "reproduced", "not resolved"]) == {
        "reproduced": 2, "not reproduced": 0, "smaller than delta": 0, "not resolved": 1,
        "undecidable at this design": 0}
    assert design_tallies.counts(["not run"], ("not run",))["not run"] == 1
    with pytest.raises(ValueError, match="'proven'"):
        design_tallies.counts(["proven"])


def test_the_tally_counts_each_status_of_both_tests(tmp_path):
    home = tmp_path / "runs"
    records.record_finding("01_passk_es_vs_grpo", _two_tests("reproduced", "not reproduced"), preset="tiny",
                           home=home)
    records.record_finding("03_sequential", _two_tests("smaller than delta", "not resolved"), preset="tiny",
                           home=home)
    assert claims.tally(home) == (
        "last run: of the paper's 6 claims tested here, the paper's test 1 reproduced, 0 not reproduced, 1 smaller "
        "than delta, 0 not resolved, 0 undecidable at this design, 4 not run; the control 0 reproduced, 1 not "
        "reproduced, 0 smaller than delta, 1 not resolved, 0 undecidable at this design, 4 not run (the setup check "
        "of notebook 00 is not counted)")


def test_settings_sharing_one_measurement_count_once():
    def rec(preset, effect):
        check = {"name": "gap", "effect": effect, "ci_low": effect - 0.1, "ci_high": effect + 0.1, "mde": 0.1}
        return {"id": "06_population_scaling", "preset": preset, "checks": [check],
                "tests": [{"role": "paper", "primary": "gap", "secondary": [], "status": "not resolved"}]}
    found = design_tallies.measurements([rec("a", 0.01), rec("b", 0.01), rec("c", 0.02)], "paper")
    assert found == [(("a", "b"), "not resolved"), (("c",), "not resolved")]
    assert design_tallies.measurements([rec("a", 0.01)], "control") == []


def test_each_claim_has_a_few_words_for_the_readme():
    """The README's table gives each claim in its `short` words (one short line per claim); the sentence stays whole
    in papers/claims.md."""
    for c in registry.CLAIMS:
        assert 0 < len(c.short) <= 60 and len(c.short) < len(c.claim), c.id
