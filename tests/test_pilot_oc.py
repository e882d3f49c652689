"""The registration's "Operating characteristics before the first run" section (`paper.pilot_oc`) from a pilot's OC
file: the entry at the registered size, the bar, the reasons of the checks that miss it, a missing file."""

from __future__ import annotations

import json

import pytest

from esreason_lib.paper import pilot_oc, preregistration
from esreason_lib.paper.studies.preset_spec import PilotOC
from esreason_lib.paper.studies.presets import get_preset


def _oc(design: str, up: float, zero: float, down: float) -> dict:
    return {"design": design, "P(reproduced | +delta)": up, "P(reproduced | 0)": zero,
            "P(not reproduced | -delta)": down}


def _row(check: str, *oc: dict, **extra) -> dict:
    return {"check": check, "k": 1, "delta": 0.01, "effect": 0.1, "seeds": [2, 1],
            "components": {"seed": 0.0, "problem": 0.0, "resid": 0.01, "arms": 2}, "oc": list(oc), **extra}


ROWS = [_row("A passes", _oc("3x1000", 0.1, 0.0, 0.1), _oc("3x200", 0.62, 0.01, 0.55)),
        _row("B misses", _oc("3x200", 0.12, 0.0, 0.7), reason="its Pass@1 gain varies across problems"),
        _row("C misses on -delta", _oc("3x200", 0.9, 0.02, 0.49)),
        {"check": "D no ES seeds", "missing": ["es"]}]


@pytest.fixture
def oc_file(tmp_path, monkeypatch):
    """A pilot's OC file in tmp_path, named by the `pretrained` design (an absolute path: `root / path` is it)."""
    path = tmp_path / "oc.json"
    monkeypatch.setattr(preregistration, "PILOT_OC", {"pretrained": PilotOC(str(path), "Made by the fixture.")})
    return path


def test_the_section_reads_the_registered_size_and_applies_the_bar(oc_file):
    oc_file.write_text(json.dumps(ROWS))
    text = preregistration.render("pretrained")
    section = text.split(pilot_oc.TITLE, 1)[1].split("\n## ", 1)[0]  # up to the next section
    assert "`pretrained-smollm2` at its registered size 3x200" in section  # 3 seeds x 200 test problems
    assert "| A passes | 1 | 0.01 | 0.620 | 0.010 | 0.550 | yes |" in section  # the 3x200 entry, not 3x1000's
    assert "| B misses | 1 | 0.01 | 0.120 | 0.000 | 0.700 | no |" in section
    assert "| C misses on -delta | 1 | 0.01 | 0.900 | 0.020 | 0.490 | no |" in section
    assert "- B misses: not a primary in this design: its Pass@1 gain varies across problems" in section
    assert "- C misses on -delta: not a primary in this design: it misses the bar at 3x200 (the file gives no " \
           "reason)" in section
    assert "- D no ES seeds: not a primary in this design: the pilot has no records of es, so no estimate" in section
    assert "- A passes" not in section and section.rstrip().endswith("Made by the fixture.")
    assert "P(reproduced \\| +delta)" in section  # the header's pipes escaped in the Markdown table


def test_a_file_without_the_registered_size_is_an_error_naming_file_and_design(oc_file):
    oc_file.write_text(json.dumps([_row("A", _oc("3x1000", 0.6, 0.0, 0.6))]))
    with pytest.raises(ValueError, match=r"oc\.json: check 'A' has no operating characteristic at the registered "
                                         r"design '3x200' \(it has \['3x1000'\]\)"):
        preregistration.render("pretrained")


def test_a_missing_file_renders_a_line_so_the_draft_still_renders(oc_file):
    section = preregistration.render("pretrained").split(pilot_oc.TITLE, 1)[1]
    assert f"The pilot's OC file `{oc_file}` is missing" in section and "| check |" not in section


def test_the_committed_registration_is_the_rendered_one_and_has_no_primary():
    """papers/preregistration-pretrained.md is `render("pretrained")` as committed (its registered text: the rates
    of the committed OC file, each check not a primary with its reason, and the reading written before the first
    run), and no OC entry of the file meets the bar, as its reading says."""
    oc = preregistration.PILOT_OC["pretrained"]
    rows = pilot_oc.read_rows(pilot_oc.REPO_ROOT / oc.path)
    text = (pilot_oc.REPO_ROOT / "papers" / "preregistration-pretrained.md").read_text()
    assert text == preregistration.render("pretrained")
    assert not any(pilot_oc.meets_bar(entry) for row in rows for entry in row.get("oc", ()))
    section = text.split(pilot_oc.TITLE, 1)[1]
    assert section.count("not a primary in this design") == len(rows)
    reading = text.split(pilot_oc.READING_TITLE, 1)[1]
    assert "**This design has no primary check.**" in reading and "descriptive" in reading


def test_a_reading_renders_after_the_rates_and_none_renders_nothing():
    with_reading = PilotOC("papers/none.json", "Made by hand.", reading="Read it so.")
    lines = pilot_oc.section(with_reading, [get_preset("pretrained-smollm2")])
    assert lines[-3:] == [pilot_oc.READING_TITLE, "", "Read it so."]
    assert pilot_oc.READING_TITLE not in pilot_oc.section(PilotOC("papers/none.json", "p"),
                                                          [get_preset("pretrained-smollm2")])
    with pytest.raises(ValueError, match="reading"):
        PilotOC("x.json", "p", reading=None)


def test_meets_bar_needs_both_rates_at_half():
    assert pilot_oc.meets_bar(_oc("x", 0.5, 0.3, 0.5))
    assert not pilot_oc.meets_bar(_oc("x", 0.49, 0.0, 0.9)) and not pilot_oc.meets_bar(_oc("x", 0.9, 0.0, 0.49))
    assert pilot_oc.size_label(get_preset("pretrained-smollm2")) == "3x200"


@pytest.mark.parametrize("rows, match", [
    ({"check": "A"}, "must hold a list of rows"),
    ([{"k": 1}], "row 0 must be an object with a str 'check'"),
    ([{"check": "A"}], r"row 0 \('A'\) must hold either 'missing' or 'oc'"),
    ([{"check": "A", "missing": ["es"], "reason": 3}], "has a 'reason' that is not a str: 3"),
])
def test_a_malformed_file_is_refused_naming_the_row(tmp_path, rows, match):
    path = tmp_path / "oc.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(ValueError, match=match):
        pilot_oc.read_rows(path)


def test_pilot_oc_refuses_an_empty_field_or_a_file_that_is_not_json():
    for args, match in ((("", "p"), "PilotOC.path must be a non-empty str"),
                        (("a.json", ""), "PilotOC.provenance must be a non-empty str"),
                        (("a.csv", "p"), "PilotOC.path must name a .json file, got 'a.csv'")):
        with pytest.raises(ValueError, match=match):
            PilotOC(*args)


def test_a_row_with_its_own_registered_size_is_read_there(oc_file):
    held_out = _row("E held-out", _oc("3x200", 0.0, 0.0, 0.0), _oc("3x112", 0.7, 0.03, 0.6), registered="3x112")
    oc_file.write_text(json.dumps([held_out]))
    section = preregistration.render("pretrained").split(pilot_oc.TITLE, 1)[1]
    assert "| E held-out | 1 | 0.01 | 0.700 | 0.030 | 0.600 | yes |" in section
    with pytest.raises(ValueError, match="'3x50'"):
        pilot_oc.pick({**held_out, "registered": "3x50"}, "3x200", oc_file)


def test_the_readings_numbers_are_the_committed_pilot_files():
    """The registration's reading: no check meets the bar at ES's population 32, and a seed spread shrunk to a
    quarter brings only ES's own training-task checks (01's co-primary, 02's restated test) to it, at >= 1,000
    problems."""
    root = pilot_oc.REPO_ROOT / "benchmarks"
    population32 = pilot_oc.read_rows(root / "pilot_pretrained_oc_population32.json")
    assert population32 and not any(pilot_oc.meets_bar(e) for row in population32 for e in row["oc"])
    what_if = pilot_oc.read_rows(root / "pilot_pretrained_what_if.json")
    meeting = {(row["check"].split(":")[0], e["design"]) for row in what_if for e in row["oc"]
               if pilot_oc.meets_bar(e)}
    assert meeting and {check for check, _ in meeting} == {"01 co-primary", "02 paper (restated)"}
    assert all(int(design.split("x")[1]) >= 1000 for _, design in meeting)
    reading = preregistration.PILOT_OC["pretrained"].reading
    assert "population 32" in reading and "only ES's own training-task checks" in reading and ">= 1,000" in reading
