"""The registered design: `papers/preregistration.md` is what the specs generate, and records name its commit."""

from esreason_lib.paper import preregistration, provenance, records
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
    c = preregistration.design_completions(p)
    es_run = 150 * 128 * 16  # iterations x prompts x population
    assert c["noise controls"] == 3 * 3 * es_run  # one per ES alpha and seed
    models = 15 * (1 + 15) + 9 * (1 + 15) + 9 * (1 + 15)  # 15 GRPO, 9 ES runs, 9 noise controls: 15 snapshots each
    per_model = (770 + 100) * 65
    assert c["evaluation"] == (models + 1) * per_model + (15 + 9 + 9 + 1) * per_model


def test_a_design_setting_records_its_registration_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "registration", lambda path=None: {"registered_commit": "abc123"})
    f = make_finding("x", [Check("c", 0.15, 0.1, 0.2, 0.05)])
    records.record_finding("01_passk_es_vs_grpo", f, preset="frontier-clean", home=tmp_path)
    assert records.read_record("01_passk_es_vs_grpo", "frontier-clean", tmp_path)["registered_commit"] == "abc123"
    records.record_finding("01_passk_es_vs_grpo", f, preset="tiny", home=tmp_path)
    assert "registered_commit" not in records.read_record("01_passk_es_vs_grpo", "tiny", tmp_path)


def test_registered_commit_outside_git_is_none(tmp_path):
    assert provenance.registered_commit(tmp_path / "never-committed.md") is None
