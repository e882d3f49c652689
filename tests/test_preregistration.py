"""The registered design: `papers/preregistration.md` is what the specs generate, and records name its commit."""

import pytest

from esreason_lib.paper import design_size, pilot_oc, preregistration, provenance, records
from esreason_lib.paper.findings import Check, make_finding
from esreason_lib.paper.studies.presets import DESIGNS, get_preset
from esreason_lib.paper.studies.registry import CLAIMS, DELTA_RULE, declared


def test_the_committed_registration_is_the_generated_one():
    assert preregistration.PATH.read_text() == preregistration.render("frontier"), (
        "papers/preregistration.md is stale: run `python -m esreason_lib.paper.preregistration --write`")


def test_the_registration_names_every_setting_test_and_the_delta_rule():
    text = preregistration.render()
    assert DELTA_RULE in text and all(f"`{s}`" in text for s in DESIGNS["frontier"])
    for c in CLAIMS:
        assert f"### `{c.id}`" in text and all(f"- **{t.role}** ({t.name})" in text for t in c.tests)
    assert declared("01_passk_es_vs_grpo", "control").primary == "ES Pass@K - GRPO's path at ES's Pass@1"


def test_design_completions_add_up_by_hand():
    p = get_preset("frontier-habit")
    c = design_size.design_completions(p, registered=True)  # the frontier's count, as registered
    es_run = 150 * 128 * 16  # iterations x prompts x population
    assert c["noise controls"] == 3 * 3 * es_run  # one per ES alpha and seed
    models = 15 * (1 + 15) + 9 * (1 + 15) + 9 * (1 + 15)  # 15 GRPO, 9 ES runs, 9 noise controls: 15 snapshots each
    per_model = (770 + 100) * 65
    assert c["evaluation (notebook 01)"] == (models + 1) * per_model + (15 + 9 + 9 + 1) * per_model
    assert list(c) == ["training", "noise controls", "evaluation (notebook 01)"]  # notebook 01 only by default


def test_notebook_01_counts_what_compute_evaluates_by_hand():
    p = get_preset("pretrained-smollm2")
    # finals: base + 9 GRPO + 3 ES runs + 3 noise controls = 16, at T = 0.6 only (its side temperature is the
    # evidence's); snapshots: GRPO's path only, step 10 of 20 (the final step is the final model): 9 x 1; each on
    # (200 + 100) problems x 16, no greedy
    assert design_size.comparison_completions(p)[0] == (16 + 9) * 300 * 16 == 120_000
    c = design_size.design_completions(p)
    assert list(c) == ["training", "evaluation (notebook 01)"] and c["evaluation (notebook 01)"] == 120_000
    # every path; ES snapshots at 15 (one before 20), GRPO none; a greedy decode; T = 1 once, T = 0.6 not again
    q = get_preset("pretrained-smollm2", **{"comparison.path_methods": ("es", "grpo", "noise"),
                                            "es.snapshot_every": 15, "grpo.snapshot_every": 0, "eval.greedy": True,
                                            "comparison.side_temperatures": (1.0, 0.6, 1.0)})
    count, words = design_size.comparison_completions(q)
    assert count == (16 * 2 + 3 * 1 + 0 + 3 * 1) * 300 * (16 + 1) == 193_800
    assert "16 final models" in words and "(T = 0.6, 1)" in words and "+ 6 snapshots" in words
    assert "x 16 samples + a greedy decode" in words and "noise controls themselves generate none" in words


def test_pretrained_notebooks_02_04_05_add_up_by_hand():
    p = get_preset("pretrained-smollm2")
    # 02: 3 followed seeds x (ES: 20 iterations x 16 prompts x 8 members + (1 + 20 theta+ + 20 fresh) x 32 x 8)
    assert design_size.prop1_completions(p)[0] == 3 * (20 * 16 * 8 + 41 * 32 * 8) == 39_168
    # 04: base + ES 3 seeds x (unreset + 2 x 1 quantile reset + noise control); ES only; 200 x 16 each
    assert design_size.sparsity_completions(p)[0] == (1 + 3 * 4) * 200 * 16 == 41_600
    # 05: (base + 3 ES + 3 GRPO) x 1 held-out task x 112 x 16, + KL: 6 trained x 2 tasks x 32 prompts x 8 samples
    assert design_size.forgetting_completions(p)[0] == 7 * 112 * 16 + 6 * 2 * 32 * 8 == 15_616
    c = design_size.design_completions(p, ("01", "02", "04", "05"))
    assert list(c)[2:] == ["notebook 02 (ES runs, probes)", "notebook 04 (evaluations)",
                           "notebook 05 (held-out evaluations, KL)"]
    assert list(c.values())[2:] == [39_168, 41_600, 15_616]
    assert design_size.counted_notebooks("pretrained") == ("01", "02", "04", "05")
    assert design_size.counted_notebooks("frontier") == ("01",)  # as registered


def test_a_design_whose_eval_takes_the_whole_split_cannot_be_counted():
    from dataclasses import replace

    p = get_preset("pretrained-smollm2")
    p = replace(p, sparsity=replace(p.sparsity, eval=replace(p.sparsity.eval, n_problems=None)))
    with pytest.raises(ValueError, match="sparsity.eval.n_problems is None"):
        design_size.sparsity_completions(p)


def test_the_frontier_text_is_the_committed_one_and_has_no_pilot_section():
    text = preregistration.render("frontier")
    assert text == preregistration.PATH.read_text() and pilot_oc.TITLE not in text
    assert "each sequence's first stage" in text and "notebook 02 (" not in text


def test_pretrained_arms_name_only_the_controls_of_its_notebooks():
    arms = preregistration.render("pretrained").split("## Arms", 1)[1].split("\n## ", 1)[0]
    assert "each sequence's first stage" not in arms
    assert "noise injection" in arms and "the random reset of the same count" in arms


def test_a_design_setting_records_its_registration_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "registration", lambda path=None: {"registered_commit": "abc123"})
    f = make_finding("x", [Check("c", 0.15, 0.1, 0.2, 0.05)])
    records.record_finding("01_passk_es_vs_grpo", f, preset="frontier-clean", home=tmp_path)
    assert records.read_record("01_passk_es_vs_grpo", "frontier-clean", tmp_path)["registered_commit"] == "abc123"
    records.record_finding("01_passk_es_vs_grpo", f, preset="tiny", home=tmp_path)
    assert "registered_commit" not in records.read_record("01_passk_es_vs_grpo", "tiny", tmp_path)


def test_registered_commit_outside_git_is_none(tmp_path):
    assert provenance.registered_commit(tmp_path / "never-committed.md") is None


def test_pretrained_registration_names_the_left_out_claims_with_their_reasons_and_no_checks():
    from esreason_lib.paper.studies.pretrained_design import PRETRAINED_LEFT_OUT

    text = preregistration.render("pretrained")
    for c in CLAIMS:
        section = text.split(f"### `{c.id}`", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        if c.id[:2] in PRETRAINED_LEFT_OUT:
            assert section.startswith(": not in this design\n\n"), c.id
            assert f"Not run: {PRETRAINED_LEFT_OUT[c.id[:2]]}." in section and "primary:" not in section, c.id
        else:
            assert "not in this design" not in section and "  - primary: " in section, c.id
    assert "Gemma 3 270M" in text and "fit the 8-hour budget" in text and "measured by the sweep" in text
    deltas = text.split("## Deltas", 1)[1].split("## Size", 1)[0]
    assert [line[2:4] for line in deltas.splitlines() if line.startswith("- ")] == ["01", "02", "04", "05"]
    assert "registered text of the `frontier` design" in text and "n = 16, K in [1, 2, 4, 8]" in text


def test_left_out_reasons_cover_exactly_the_notebooks_a_design_skips():
    from esreason_lib.paper.studies.presets import DESIGN_NOTEBOOKS

    every = {c.id[:2] for c in CLAIMS}
    assert set(preregistration.LEFT_OUT) == set(DESIGN_NOTEBOOKS)
    for design, runs in DESIGN_NOTEBOOKS.items():
        assert set(preregistration.LEFT_OUT[design]) == every - set(runs), design


def test_pretrained_size_uses_its_own_measured_rate_by_hand():
    text = preregistration.render("pretrained")
    size = text.split("## Size", 1)[1]
    assert "wall time at 18.1-20.2 completions per wall-second" in size and "2048" not in size
    total = 30_720 + 120_000 + 39_168 + 41_600 + 15_616  # training ... notebook 05, by hand above
    assert sum(design_size.design_completions(get_preset("pretrained-smollm2"), ("01", "02", "04", "05")).values()) \
        == total
    hours = (total / (2 * 768 / 76.2) / 3600, total / (768 / 42.4) / 3600)
    assert f"| 39,168 | 41,600 | 15,616 | {hours[0]:.1f}-{hours[1]:.1f} |" in size and 3 < hours[0] < hours[1] < 4
    assert "nothing else running" in size and "lower bound" in size and "pilot_pretrained_training" in size
    assert "upper bound" not in size and "noise controls |" not in size and "notebook 01: (16 final models" in size
    assert "are not counted" not in size and "not counted:" not in size  # 03 and 06 are not run
    assert "notebook 04: 13 models" in size and "6 trained models x 2 tasks x 32 prompts x 8 = 3,072" in size
    assert design_size.design_rate("frontier").slow == design_size.design_rate("frontier").fast == 2048.0


def test_an_undeclared_rate_or_left_out_reason_is_refused(monkeypatch):
    with pytest.raises(ValueError, match="declares no completion rate"):
        design_size.design_rate("nowhere")
    monkeypatch.setattr(preregistration, "LEFT_OUT", {"pretrained": {"00": "x", "03": "y"}})
    with pytest.raises(ValueError, match="does not run notebook 06 and declares no reason"):
        preregistration.render("pretrained")


def test_completion_rate_refuses_a_bad_range_or_clock():
    from esreason_lib.paper.studies.preset_spec import CompletionRate

    for slow, fast, clock, match in ((0.0, 1.0, "wall", "0 < slow <= fast"), (2.0, 1.0, "wall", "slow=2.0"),
                                     (1.0, 1.0, "gpu", "clock must be 'core' or 'wall', got 'gpu'")):
        with pytest.raises(ValueError, match=match):
            CompletionRate(slow, fast, clock, "somewhere")


def test_write_rewrites_the_designs_own_registration_file(tmp_path, monkeypatch):
    files = {"frontier": tmp_path / "frontier.md", "pretrained": tmp_path / "pretrained.md"}
    monkeypatch.setattr(preregistration, "DESIGN_REGISTRATIONS", files)
    assert preregistration.main(["--design", "pretrained", "--write"]) == 0
    text = files["pretrained"].read_text()
    assert text == preregistration.render("pretrained") and not files["frontier"].exists()
    assert "`python -m esreason_lib.paper.preregistration --design pretrained --write`" in text
