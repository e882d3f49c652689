"""`esreason power`: components from synthetic stored finding records, the MDE table and the cheapest design."""

import json

import numpy as np

from esreason_lib import cli
from esreason_lib.paper import claims
from esreason_lib.paper.findings import effect_check, make_finding
from esreason_lib.paper.power_report import oc_table, report, stored_check_objects, stored_checks
from esreason_lib.paper.studies.presets import get_preset


def _record(home, delta, preset="tiny"):
    rng = np.random.default_rng(0)
    problem = rng.normal(0, 0.3, 200)
    a = 0.02 + problem + rng.normal(0, 0.05, (3, 200))
    b = problem + rng.normal(0, 0.05, (3, 200))
    check = effect_check("ES above GRPO", a, b, delta=delta)
    claims.record_finding("05_forgetting", make_finding("synthetic", [check]), preset=preset, home=home)
    return check


def test_power_reads_components_and_names_the_cheapest_design(tmp_path, monkeypatch, capsys):
    check = _record(tmp_path, delta=0.05)
    (comp, delta), = stored_checks("tiny", tmp_path).values()
    assert delta == 0.05 and comp.arms == 2 and comp.problem > comp.seed
    assert check.components == (comp.seed, comp.problem, comp.resid, comp.arms)
    text = report(get_preset("tiny"), tmp_path)
    assert "cheapest design deciding every decidable check" in text and "05_forgetting: ES above GRPO" in text
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path))
    assert cli.main(["power", "--preset", "tiny"]) == 0
    assert "cheapest design" in capsys.readouterr().out


def test_power_says_when_no_design_fits(tmp_path):
    _record(tmp_path, delta=1e-4)
    text = report(get_preset("tiny"), tmp_path)
    assert "no candidate design decides" in text and "ES above GRPO" in text


def test_power_without_records_says_so(tmp_path):
    assert "no stored checks" in report(get_preset("powered"), tmp_path)


def test_power_prints_each_checks_operating_characteristic_and_reads_old_records(tmp_path, capsys):
    _record(tmp_path, delta=0.05)
    path = claims.record_path("05_forgetting", "tiny", tmp_path)
    rec = json.loads(path.read_text())
    for c in rec["checks"]:  # a record written before issue 31: no `fixed`, no `oc`
        c.pop("fixed"), c.pop("oc")
    path.write_text(json.dumps(rec))
    (check,) = stored_check_objects("tiny", tmp_path).values()
    assert check.oc is None and check.fixed == "" and check.components is not None
    text = report(get_preset("tiny"), tmp_path)
    assert "operating characteristic at the design each check ran" in text and "(the frontier settings)" in text
    own = oc_table({"x": check})
    assert own["n_problems"].iloc[0] == 200 and own["P(rep|delta)"].iloc[0] > 0.5 and own["undecidable"].iloc[0] == ""
    tiny = oc_table({"x": check}, design=(3, 4))  # 50 times fewer problems: the delta is out of reach
    assert tiny["P(rep|delta)"].iloc[0] < 0.5 and tiny["undecidable"].iloc[0].startswith("P(rep|delta)")


def test_power_skips_a_malformed_record_with_claims_warning(tmp_path):
    """Issue 47: a record that is a JSON list (or not JSON) is skipped with the warning `claims` gives, never a
    crash; the good record beside it still counts."""
    import pytest

    from esreason_lib.store.integrity import RunStoreWarning

    _record(tmp_path, delta=0.05)
    folder = claims.records_dir("tiny", tmp_path)
    (folder / "01_passk_es_vs_grpo.json").write_text("[1, 2]")
    (folder / "02_js_diversity.json").write_text("{not json")
    for read in (stored_checks, stored_check_objects):
        with pytest.warns(RunStoreWarning) as caught:
            assert list(read("tiny", tmp_path)) == ["05_forgetting: ES above GRPO"]
        said = " ".join(str(w.message) for w in caught)
        assert "01_passk_es_vs_grpo.json: expected a JSON object, got a list" in said
        assert "02_js_diversity.json: unreadable" in said


def test_claims_refuses_an_unknown_preset(capsys):
    assert cli.main(["claims", "--preset", "no-such-preset"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "preset 'no-such-preset' is not one of" in err
