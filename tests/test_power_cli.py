"""`esreason power`: components from synthetic stored finding records, the MDE table and the cheapest design."""

import numpy as np

from esreason_lib import cli
from esreason_lib.paper import claims
from esreason_lib.paper.findings import effect_check, make_finding
from esreason_lib.paper.power_report import report, stored_checks
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
