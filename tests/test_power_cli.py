"""`esreason power`: components from synthetic stored finding records, the MDE table and the cheapest design."""

import json

import numpy as np

from esreason_lib import cli
from esreason_lib.paper import records
from esreason_lib.paper.findings import effect_check, make_finding
from esreason_lib.paper.power_report import oc_table, report, stored_check_objects, stored_checks
from esreason_lib.paper.studies.presets import get_preset


def _record(home, delta, preset="tiny"):
    rng = np.random.default_rng(0)
    problem = rng.normal(0, 0.3, 200)
    a = 0.02 + problem + rng.normal(0, 0.05, (3, 200))
    b = problem + rng.normal(0, 0.05, (3, 200))
    check = effect_check("ES above GRPO", a, b, delta=delta)
    records.record_finding("05_forgetting", make_finding("synthetic", [check]), preset=preset, home=home)
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
    path = records.record_path("05_forgetting", "tiny", tmp_path)
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
    # an open interval would not count there; a pass or a failure still would if rare under what it rules out
    assert tiny["P(rep|delta)"].iloc[0] < 0.5 and tiny["undecidable"].iloc[0] == "not resolved"
    assert "status" not in tiny  # no interval at a design it did not run


def test_power_and_the_claims_give_every_check_the_same_status(tmp_path):
    """One status rule: `esreason power`'s status at a check's own design is the status the record (and so the
    claims and the notebooks) shows, for checks of every outcome, the old rule's disagreement included (a low-powered
    interval wholly on the other side: `not reproduced` now, `undecidable` under the registered rule)."""
    rng = np.random.default_rng(0)
    problem = rng.normal(0, 0.3, 200)
    b = problem + rng.normal(0, 0.05, (3, 200))
    checks = [effect_check(f"effect {e:+.2f}", problem + e + rng.normal(0, 0.05, (3, 200)), b, delta=delta)
              for e, delta in ((0.02, 0.05), (-0.05, 0.003), (0.0, 0.5), (0.001, 0.01), (-0.001, 0.002))]
    finding = make_finding("synthetic", checks)
    records.record_finding("05_forgetting", finding, preset="tiny", home=tmp_path)
    stored = stored_check_objects("tiny", tmp_path)
    table = oc_table(stored).set_index("check")
    rec = records.read_record("05_forgetting", "tiny", tmp_path)
    shown = {f"05_forgetting: {c['name']}": c["status"] for c in rec["checks"]}  # what papers/claims.md prints
    assert table["status"].to_dict() == shown
    from esreason_lib.paper.summary import verdict_table  # the notebooks' table (matplotlib: imported here only)

    notebook = verdict_table(finding)  # what the notebook shows under its finding
    assert {f"05_forgetting: {n}": s for n, s in zip(notebook["check"], notebook["status"])} == shown
    assert len(set(shown.values())) >= 3  # several outcomes, not one
    wrong = stored["05_forgetting: effect -0.05"]
    assert shown["05_forgetting: effect -0.05"] == "not reproduced" and wrong.oc[0] < 0.5  # counted, though weak


def test_power_skips_a_malformed_record_with_claims_warning(tmp_path):
    """Issue 47: a record that is a JSON list (or not JSON) is skipped with the warning `claims` gives, never a
    crash; the good record beside it still counts."""
    import pytest

    from esreason_lib.store.integrity import RunStoreWarning

    _record(tmp_path, delta=0.05)
    folder = records.records_dir("tiny", tmp_path)
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
