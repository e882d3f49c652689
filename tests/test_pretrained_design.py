"""The `pretrained` design (issue 43 part B): its one setting's values, its problem splits, held-out tasks with
arguments of their own (`HeldoutTask`), and the notebooks it runs. The 01 comparison path on a stand-in base:
tests/test_pretrained_design_run.py."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from esreason_lib.paper.studies import base_models, forgetting
from esreason_lib.paper.studies.preset_spec import HeldoutTask
from esreason_lib.paper.studies.presets import DESIGNS, PRESETS, get_preset, preset_notebooks
from esreason_lib.paper.studies.pretrained_design import HELDOUT, PRETRAINED_OVERRIDES, PRETRAINED_SPLITS
from esreason_lib.tasks import get_task

NAME = "pretrained-smollm2"


def test_the_design_is_one_setting_derived_from_tiny_design_by_one_table():
    from esreason_lib.paper.studies.presets import DERIVATIONS

    assert DESIGNS["pretrained"] == (NAME,)
    assert DERIVATIONS[NAME] == ("tiny-design", PRETRAINED_OVERRIDES)
    assert get_preset(NAME) is PRESETS[NAME]


def test_the_setting_holds_the_briefed_values():
    p = get_preset(NAME)
    assert (p.base_model, p.control_model, p.task) == ("smollm2-135m", None, "multistep")
    assert p.task_kwargs == {"terms": 2, "digits": 2, "style": "short", "test_fraction": 0.2}
    assert p.zoo_bases() == ["smollm2-135m"] and p.seeds == (4, 5, 6)
    es = p.es
    assert (es.population_size, es.sigma, es.alpha, es.iterations, es.prompts_per_step) == (8, 1e-3, 3e-3, 20, 16)
    assert (es.greedy, es.max_new_tokens, es.backend, es.checkpoint_every, es.snapshot_every) == (
        True, 64, "fast", 5, 10)
    g = p.grpo
    assert (g.group_size, g.prompts_per_step, g.iterations, g.lr, g.beta, g.clip_eps, g.temperature) == (
        8, 8, 20, 1e-5, 0.0, 0.2, 1.0)
    assert (g.max_new_tokens, g.forward, g.share_prefixes, g.shared_prompts, g.sampler) == (
        64, "native", True, True, "inverse-cdf")
    assert (g.checkpoint_every, g.snapshot_every) == (5, 10)
    assert p.comparison.grpo_lrs == (3e-6, 1e-5, 3e-5) and p.comparison.es_alphas == (3e-3,)
    assert p.comparison.grpo_lrs[0] < p.grpo.lr < p.comparison.grpo_lrs[-1]  # the preset's lr inside its grid
    for spec, problems in ((p.eval, 200), (p.sparsity.eval, 200), (p.forgetting.eval, 112)):
        assert (spec.n_problems, spec.n_samples, spec.ks, spec.temperature, spec.greedy) == (
            problems, 16, (1, 2, 4, 8), 0.6, False)
        assert (spec.max_new_tokens, spec.forward, spec.share_prefixes, spec.sampler) == (
            64, "native", True, "inverse-cdf")
    # deltas by rule B, as the frontier's; Proposition 1 over the whole run on independent samples
    frontier = get_preset("frontier-habit")
    for field in ("delta_pass1", "delta_passk", "delta_entropy"):
        assert getattr(p.comparison, field) == getattr(frontier.comparison, field)
    # Pass@K rising the frontier's 0.02 over the whole followed run (its 30 iterations there, 20 here)
    assert p.prop1.delta_change * p.prop1.iterations == pytest.approx(frontier.prop1.delta_change * 30) == 0.02
    assert p.prop1.delta_link == frontier.prop1.delta_link
    assert p.prop1.independent_link and p.prop1.iterations == p.es.iterations and p.lemma.sigmas == ()


def test_selection_problems_are_never_test_problems():
    """Notebook 01 tests on the first `eval.n_problems` of the pool and chooses step sizes on the next
    `selection_problems` (`comparison.evaluation_spec`): the splits name exactly those, inside the task's pool."""
    p = get_preset(NAME)
    assert p.splits == PRETRAINED_SPLITS
    n, extra = p.eval.n_problems, p.comparison.selection_problems
    assert p.splits.indices("test", n).tolist() == list(range(n))
    assert p.splits.indices("selection").tolist() == list(range(n, n + extra))
    assert p.sparsity.eval.n_problems <= n and p.prop1.probe_prompts <= n  # both read test problems only
    pool = get_task(p.task, **p.test_task_kwargs()).examples("test", n=p.splits.pool, seed=p.splits.seed)
    assert len(pool) == p.splits.pool
    with pytest.raises(ValueError, match="found only 2449"):  # the pool is the whole held-out draw
        get_task(p.task, **p.test_task_kwargs()).examples("test", n=p.splits.pool + 1, seed=p.splits.seed)


def test_the_held_out_task_has_its_own_arguments_and_pool():
    p = get_preset(NAME)
    assert p.heldout_tasks == (HELDOUT,) and p.heldout() == (HELDOUT,)
    assert HELDOUT.task == "multistep" and HELDOUT.label != p.task
    assert HELDOUT.kwargs == {"terms": 2, "digits": 1, "style": "short", "test_fraction": 0.9}
    task = get_task(HELDOUT.task, **HELDOUT.kwargs)
    problems = task.examples("test", n=p.forgetting.eval.n_problems)
    assert len(problems) == p.forgetting.eval.n_problems and problems[0]["expression"].count(" ") == 2


def test_plain_names_read_as_held_out_tasks_without_arguments():
    smoke = get_preset("smoke")
    assert smoke.heldout() == (HeldoutTask("addition", "addition", {}), HeldoutTask("sorting", "sorting", {}))


@pytest.mark.parametrize("entries, pattern", [
    (("addition", HeldoutTask("addition", "addition", {"digits": 1})), r"distinct labels, got \['addition', 'addi"),
    ((("addition", {"digits": 1}),), r"entries must be task names or HeldoutTask, got \('addition'"),
])
def test_bad_held_out_entries_are_named(entries, pattern):
    with pytest.raises(ValueError, match=pattern):
        get_preset("smoke", heldout_tasks=entries)


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(label="", task="addition", kwargs={}), r"HeldoutTask\.label must be a non-empty str, got ''"),
    (dict(label="a", task=3, kwargs={}), r"HeldoutTask\.task must be a non-empty str, got 3"),
    (dict(label="a", task="addition", kwargs=[("digits", 1)]), r"HeldoutTask\.kwargs must be a dict"),
])
def test_held_out_task_fields_are_checked(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        HeldoutTask(**kwargs)


ONE_DIGIT = HeldoutTask("addition-1", "addition", {"digits": 1})


def _recording_evaluate(calls):
    def evaluate_ref(ref, task, task_kwargs, spec, *, device, home, progress):
        calls.append((ref, task, dict(task_kwargs)))
        table = pd.DataFrame({"problem_id": ["p0", "p1"], "n": spec.n_samples, "c": [0, 1], "greedy_correct": 0,
                              "distinct_correct": 0})
        curve = pd.DataFrame({"k": list(spec.ks), "pass_at_k": 0.5})
        return SimpleNamespace(table=table, curve=curve)
    return evaluate_ref


def test_forgetting_evaluates_each_held_out_task_with_its_arguments_under_its_label(monkeypatch, tmp_path):
    preset = get_preset("smoke", heldout_tasks=("sorting", ONE_DIGIT))
    calls = []
    monkeypatch.setattr(forgetting, "evaluate_ref", _recording_evaluate(calls))
    problems = forgetting.heldout_problems(preset, {("es", 0): "dir/es"}, home=tmp_path, progress=False)
    assert calls == [(r, t, k) for r in ("smoke", "dir/es")
                     for t, k in (("sorting", {}), ("addition", {"digits": 1}))]
    assert list(dict.fromkeys(problems["task"])) == ["sorting", "addition-1"]


def test_forgetting_kl_prompts_come_from_the_held_out_task_with_its_arguments(monkeypatch, tmp_path):
    preset = get_preset("smoke", heldout_tasks=(ONE_DIGIT,), **{"forgetting.kl_prompts": 2})
    made = []
    real = forgetting.get_task

    def get_task_recorded(name, **kwargs):
        made.append((name, kwargs))
        return real(name, **kwargs)

    monkeypatch.setattr(forgetting, "get_task", get_task_recorded)
    monkeypatch.setattr(forgetting, "load_model", lambda ref, **kw: (object(), None))
    monkeypatch.setattr(forgetting, "heldout_lm_records", lambda base, n: None)
    monkeypatch.setattr(forgetting, "cached", lambda kind, config, names, compute, **kw: compute())
    stats = forgetting.model_stats(preset, preset.base_model, home=tmp_path)  # the base: KL 0, never sampled
    assert made == [("countdown", {}), ("addition", {"digits": 1})]
    assert stats[stats["quantity"] == "kl"]["scope"].tolist() == ["countdown", "addition-1"]


def test_base_models_evaluate_held_out_tasks_with_their_arguments(monkeypatch, tmp_path):
    preset = get_preset("smoke", heldout_tasks=(ONE_DIGIT,))
    calls = []
    monkeypatch.setattr(base_models, "evaluate_ref", _recording_evaluate(calls))
    monkeypatch.setattr(base_models, "load_model", lambda name, **kw: (SimpleNamespace(), None))
    monkeypatch.setattr(base_models, "num_parameters", lambda model: 1)
    tables = base_models.compute(preset, models=["smoke"], home=tmp_path, progress=False)
    assert calls == [("smoke", "countdown", {}), ("smoke", "addition", {"digits": 1})]
    assert tables["summary"]["task"].tolist() == ["countdown", "addition-1"]


def test_the_design_declares_its_notebooks():
    assert preset_notebooks(NAME) == ("01", "02", "04", "05")
    assert all(preset_notebooks(s) is None for s in ("tiny", "smoke", *DESIGNS["frontier"]))


def test_the_makefile_runs_each_setting_s_declared_notebooks_and_installs_its_base():
    """`make computed PRESET=<setting>` executes exactly the notebooks `DESIGN_NOTEBOOKS` declares (read from the
    Makefile's expanded `EXECUTED`), other presets every notebook; the base's target installs the extra first."""
    import subprocess

    from esreason_lib.paper.studies.presets import DESIGN_NOTEBOOKS
    from esreason_lib.paths import REPO_ROOT

    def executed(preset: str) -> list[str]:
        out = subprocess.run(["make", "-n", "-p", f"PRESET={preset}", "-f", "Makefile", "clean"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=60).stdout
        line = next(x for x in out.splitlines() if x.startswith("EXECUTED := "))
        return sorted(p.rsplit("/", 1)[1][:2] for p in line.split(":=", 1)[1].split())

    every = sorted(p.name[:2] for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    for design, settings in DESIGNS.items():
        for setting in settings:
            assert executed(setting) == sorted(DESIGN_NOTEBOOKS.get(design, every)), setting
    assert executed("tiny") == every
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "pretrain-smollm2-135m: $(VENV)/.pretrained" in makefile and get_preset(NAME).zoo_bases() == [
        "smollm2-135m"]


def test_claims_render_the_notebooks_out_of_the_design_as_such(tmp_path, monkeypatch):
    """The `pretrained` design's records name its own registration file; its tally reads "not in this design" for
    notebooks 03 and 06, "not run" for a notebook it runs but has not run yet; a stray 03 record is not counted."""
    from test_claims import _two_tests

    from esreason_lib.paper import claims, design_tallies, provenance, records

    asked = []
    monkeypatch.setattr(provenance, "registration", lambda path=None: asked.append(path) or {
        "registered_commit": "a" * 40, "registered_at": "2030-01-01T00:00:00+00:00", "registration_sha256": "0" * 64})
    home = tmp_path / "runs"
    for finding_id in ("01_passk_es_vs_grpo", "03_sequential"):
        records.record_finding(finding_id, _two_tests("reproduced", "not resolved"), preset=NAME, home=home)
    assert asked == [provenance.DESIGN_REGISTRATIONS["pretrained"]] * 2
    assert asked[0].name == "preregistration-pretrained.md"
    text = design_tallies.render_design("pretrained", home)
    # a descriptive design (presets.DESCRIPTIVE_DESIGNS): each status with its effect and interval, and the note
    assert ("| `01_passk_es_vs_grpo` | `pretrained-smollm2` | reproduced, +0.150 [+0.100, +0.200] | "
            "not resolved, +0.050 [-0.100, +0.200] |") in text
    note = design_tallies.descriptive_note("pretrained")
    assert note.startswith("A descriptive design, with no primary check (papers/preregistration-pretrained.md")
    assert note in text and note in design_tallies.design_summary("pretrained", home)
    assert design_tallies.descriptive_note("frontier") == "" and "descriptive" not in design_tallies.design_summary(
        "frontier", home)
    # its README cell: each test's status and effect (one setting, so unnamed), not a count of one
    assert design_tallies.readme_cell("pretrained", "01_passk_es_vs_grpo", home) == (
        "**reproduced** +0.150 [+0.100, +0.200]; **not resolved** +0.050 [-0.100, +0.200]")
    assert design_tallies.readme_cell("pretrained", "02_js_diversity", home) == "not run; not run"
    assert design_tallies.readme_cell("pretrained", "06_population_scaling", home) == "not in this design"
    assert design_tallies.readme_cell("pretrained", "00_base_models", home) == "-"
    header = claims.readme_table(home)[0]
    assert "`pretrained` settings (descriptive): the paper's test; the control" in header
    assert "`03_sequential`" not in text
    assert "(03) | not in this design | not in this design |" in text
    assert "(06) | not in this design | not in this design |" in text and "(02) | not run | not run |" in text
    assert design_tallies.design_tally("pretrained", "06_population_scaling", home) == "not in this design"
    assert design_tallies.design_tally("pretrained", "01_passk_es_vs_grpo", home) == (
        "1 / 0 / 0 / 0 / 0 of 1; 0 / 0 / 0 / 1 / 0 of 1")
    assert design_tallies.design_tally("frontier", "03_sequential", home) == "not run; not run"


def test_a_descriptive_design_is_registered_with_no_primary_check():
    """Every design the claims show as descriptive has a committed registration that says it has no primary check,
    and every design whose registration says so is shown as descriptive."""
    from esreason_lib.paper.provenance import DESIGN_REGISTRATIONS
    from esreason_lib.paper.studies.presets import DESCRIPTIVE_DESIGNS

    says = {d for d, path in DESIGN_REGISTRATIONS.items() if "This design has no primary check." in path.read_text()}
    assert says == set(DESCRIPTIVE_DESIGNS) == {"pretrained"}


def test_the_pretrained_design_lets_04_and_05_start_beside_01_and_tiny_keeps_the_order():
    """`make executed`: under tiny, 04 and 05 wait for 01; under the pretrained setting (01 takes hours) they do
    not, so the second core runs 02, 04 and 05 while 01 runs (make's own database, a dry run). There, notebook 02's
    followed seeds are jobs of their own (`prefill --trajectories`, one shard each), which 02 waits for; under tiny
    02 computes them itself."""
    import subprocess

    from esreason_lib.paths import REPO_ROOT

    def prerequisites(preset: str, notebook: str) -> list[str]:
        out = subprocess.run(["make", "-C", str(REPO_ROOT), "-n", "-p", "executed", f"PRESET={preset}", "PY=true"],
                             capture_output=True, text=True, check=True).stdout
        folder = "build/notebooks" + ("" if preset == "tiny" else f"/{preset}")
        line = next(x for x in out.splitlines() if x.startswith(f"{folder}/{notebook}.ipynb:"))
        return line.split(":", 1)[1].split()

    assert "build/notebooks/01_passk_es_vs_grpo.ipynb" in prerequisites("tiny", "04_sparsity")
    assert prerequisites(NAME, "04_sparsity") == ["notebooks/04_sparsity.py"]
    assert prerequisites(NAME, "05_forgetting") == ["notebooks/05_forgetting.py"]
    assert prerequisites(NAME, "02_js_diversity") == ["notebooks/02_js_diversity.py", "trajectory-0", "trajectory-1",
                                                      "trajectory-2"]
    assert prerequisites("tiny", "02_js_diversity") == ["notebooks/02_js_diversity.py"]
    out = subprocess.run(["make", "-C", str(REPO_ROOT), "-n", "trajectory-1", f"PRESET={NAME}", "PY=python"],
                         capture_output=True, text=True, check=True).stdout
    assert f"python -m esreason_lib prefill --preset {NAME} --trajectories --shard 1/3" in out


def test_a_descriptive_row_shows_every_check_that_sets_a_status_and_the_registration_has_its_co_primary(
        tmp_path, monkeypatch):
    """01's paper test on the pretrained design: a co-primary against the paper sets the status; the row and the
    README cell show both checks' effects, the notes every check, and the registered status is the same (the
    design registered its co-primary: no frontier deviation is listed); the legend says what the column gives."""
    from esreason_lib.paper import claims, design_tallies, deviations, provenance, records
    from esreason_lib.paper.findings import Check, Test, make_finding

    monkeypatch.setattr(provenance, "registration", lambda path=None: {
        "registered_commit": "a" * 40, "registered_at": "2026-01-01T00:00:00+00:00", "registration_sha256": "0" * 64})
    home = tmp_path / "runs"
    passk = Check("ES Pass@8 - GRPO Pass@8", 0.15, 0.1, 0.2, 0.05, delta=0.02)
    pass1 = Check("ES Pass@1 - base", -0.15, -0.2, -0.1, 0.05, delta=0.01)
    control = Check("ES Pass@8 - GRPO's path", 0.05, -0.1, 0.2, 0.05, delta=0.02)
    finding = make_finding("ES Pass@8 - GRPO Pass@8: +0.150 [+0.100, +0.200] (reproduced); ...", tests=[
        Test("paper", "as the paper", passk, also=(pass1,)), Test("control", "matched", control)])
    records.record_finding("01_passk_es_vs_grpo", finding, preset=NAME, home=home)
    rec = records.read_record("01_passk_es_vs_grpo", NAME, home)
    paper = next(s for s in deviations.recompute(rec) if s.role == "paper")
    assert (paper.registered, paper.now) == ("not reproduced", "not reproduced")
    row = next(line for line in design_tallies.render_design("pretrained", home).splitlines()
               if line.startswith("| `01_passk_es_vs_grpo`"))
    assert "| not reproduced, +0.150 [+0.100, +0.200] and -0.150 [-0.200, -0.100] |" in row
    assert "registered:" not in row and "every check: ES Pass@8 - GRPO Pass@8: +0.150" in row
    assert design_tallies.deviation_lines("pretrained", home) == []
    assert design_tallies.readme_cell("pretrained", "01_passk_es_vs_grpo", home) == (
        "**not reproduced** +0.150 [+0.100, +0.200] and -0.150 [-0.200, -0.100]; "
        "**not resolved** +0.050 [-0.100, +0.200]")
    legend = design_tallies.design_summary("pretrained", home).splitlines()[0]
    assert legend.startswith("- The `pretrained` column gives, per test and setting (`pretrained-smollm2`), its "
                             "status and the effect [95% CI] of each check that sets it")
    assert "column counts" not in legend
    assert claims.readme_table(home)[0].count("(descriptive)") == 1
    # the README's lead: one line per claim of the design, every check that sets a status named
    lead = design_tallies.lead_lines("pretrained", home)
    assert lead[0] == ("- ES: Pass@1 up, Pass@K above GRPO's, entropy kept (01): the paper's test **not reproduced** "
                       "(ES Pass@8 - GRPO Pass@8: +0.150 [+0.100, +0.200]; ES Pass@1 - base: -0.150 [-0.200, -0.100]); "
                       "the control **not resolved** (ES Pass@8 - GRPO's path: +0.050 [-0.100, +0.200]). "
                       "[01_frontier](figures/pretrained-smollm2/01_frontier.png)")
    assert [line.split(": ", 1)[1] for line in lead[1:4]] == ["no record yet."] * 3  # 02, 04, 05 not run yet
    assert lead[4] == ("- 03, 06: not in this design ([preregistration-pretrained.md]"
                       "(papers/preregistration-pretrained.md) says why).")
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- lead:start -->\nold\n<!-- lead:end -->\n"
                      "<!-- claims:start -->\n<!-- claims:end -->\n")
    claims.write_claims(home, claims_path=tmp_path / "claims.md", readme_path=readme)
    text = readme.read_text()
    assert text.startswith("intro\n<!-- lead:start -->\n" + "".join(line + "\n" for line in lead) + "<!-- lead:end -->")


def test_the_pretrained_registration_lists_its_own_deviations_after_the_registered_text():
    from esreason_lib.paper import deviations, provenance

    text = provenance.DESIGN_REGISTRATIONS["pretrained"].read_text()
    registered, appended = text.split(provenance.DEVIATIONS_HEADING, 1)
    assert text.endswith("\n" + deviations.render_section("pretrained"))
    assert all(f"**{d.date}**" in appended for d in deviations.PRETRAINED_DEVIATIONS)
    assert "clause" not in appended and "Clarified, changing no check" in appended
    assert deviations.render_section("frontier") != deviations.render_section("pretrained")
