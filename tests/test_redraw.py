"""`paper.redraw`: each test's probability of keeping its status on a redraw, and the sentence counting them."""

from __future__ import annotations

import dataclasses

import numpy as np

from esreason_lib.paper.findings import effect_check, redraw_keep
from esreason_lib.paper.redraw import keep_line, redraw_keeps


def test_keep_line_counts_known_probabilities_against_both_bars():
    keeps = {("s", "01", "paper"): 0.9, ("s", "01", "control"): 0.3, ("s", "02", "paper"): None,
             ("t", "01", "paper"): 0.8}
    line = keep_line(keeps)
    assert "2 of these 3 tests keep it with probability >= 0.8, 1 with probability below 0.5." in line
    assert "1 of these 3 tests keep it with probability >= 0.9" in keep_line(keeps, at=0.9)
    assert keep_line({}) == "" and keep_line({("s", "01", "paper"): None}) == ""


def test_redraw_keeps_takes_each_tests_primary_and_co_primary_checks():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.3, 0.05, (3, 40)), rng.normal(0.2, 0.05, (3, 40))  # [seeds, problems]
    clear = effect_check("clear", a, b, delta=0.02, oc_sims=0)
    null = effect_check("null", a, a + rng.normal(0, 0.05, (3, 40)), delta=0.02, oc_sims=0)
    stored = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(c).items()}
              for c in (clear, null)]
    record = {"preset": "s", "id": "01", "checks": stored,
              "tests": [{"role": "paper", "primary": "clear", "also": []},
                        {"role": "control", "primary": "clear", "also": ["null"]}]}
    keeps = redraw_keeps([record])
    assert set(keeps) == {("s", "01", "paper"), ("s", "01", "control")}
    assert keeps["s", "01", "paper"] == redraw_keep([clear])
    assert keeps["s", "01", "control"] == redraw_keep([clear, null])
