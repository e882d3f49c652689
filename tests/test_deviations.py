"""The registration's Deviations (`paper.deviations`): each listed status change is what a recomputation of the
records under the registered and the current rule gives, and the README, papers/claims.md and
papers/preregistration.md say the same as that recomputation on the committed bundle."""

import json
import tarfile

import pytest

from esreason_lib import paths
from esreason_lib.paper import claims, design_tallies, preregistration
from esreason_lib.paper.deviations import DEVIATIONS, Deviation, co_primary_names, moved, recompute, render_section
from esreason_lib.paper.findings import Check, Test, make_finding
from esreason_lib.paper.studies.presets import DESIGNS

BUNDLE = paths.REPO_ROOT / "papers" / "results" / "runs.tar.xz"


def _record(finding_id, preset, tests):
    return {"id": finding_id, "preset": preset, **make_finding("x", tests=tests).to_json()}


def test_recompute_gives_each_test_three_ways_and_moved_lists_the_changes():
    weak_fail = Check("fail", -0.2, -0.3, -0.1, 0.1, delta=0.05, oc=(0.3, 0.02, 0.01))
    lead = Check("lead", 0.15, 0.1, 0.2, 0.05, delta=0.05, oc=(0.9, 0.02, 0.0))
    still = Check("still", -0.001, -0.005, 0.003, 0.01, delta=0.01, oc=(0.98, 0.0, 0.0))
    rec = _record("01_passk_es_vs_grpo", "frontier-m", [Test("paper", "p", lead, also=(still,)),
                                                         Test("control", "c", weak_fail)])
    paper, control = recompute(rec)
    assert (paper.registered, paper.rule_now, paper.now) == ("reproduced", "reproduced", "smaller than delta")
    assert (control.registered, control.now) == ("undecidable at this design", "not reproduced")
    assert moved([paper, control], "rule") == (("frontier-m", "01_passk_es_vs_grpo", "control",
                                                "undecidable at this design", "not reproduced"),)
    assert moved([paper, control], "test") == (("frontier-m", "01_passk_es_vs_grpo", "paper", "reproduced",
                                                "smaller than delta"),)
    old = json.loads(json.dumps(rec))  # a record written before co-primary checks: "also" absent, listed first
    test = old["tests"][0]
    test["secondary"] = test.pop("also") + test["secondary"]
    assert co_primary_names(old, test) == ["still"] and recompute(old)[0] == paper
    # a design registered under the current rule (`pretrained`): the registered status is the current rule's
    later = recompute({**rec, "preset": "pretrained-smollm2"})[1]
    assert later.registered == later.rule_now == "not reproduced" and not moved([later], "rule")
    with pytest.raises(ValueError, match="stage"):
        Deviation("2026-12-07", "x", "", "w", "y", stage="later")
    with pytest.raises(ValueError, match="stage must be 'rule' or 'test', got 'later'"):
        moved([paper], "later")


def test_the_registration_appends_the_deviations_and_keeps_its_registered_text():
    text = preregistration.render("frontier")
    registered, appended = text.split("\n## Deviations")
    assert text.endswith("\n" + render_section()) and "## Deviations" not in registered
    assert "secondary: ES Pass@1 - base; GRPO (best-Pass@1 arm) eval token entropy below the base" in registered
    assert all(f"**{d.date}**" in appended for d in DEVIATIONS)


def _bundled_frontier_records(tmp_path):
    """The `frontier` settings' finding records in the committed bundle, written under `tmp_path/findings/`
    (the archive lists the records first: reading stops when every one is found)."""
    wanted = {f"findings/{s}/{c.id}.json" for s in DESIGNS["frontier"] for c in claims.CLAIMS}
    with tarfile.open(BUNDLE) as tar:
        for member in tar:
            if member.name in wanted:
                out = tmp_path / member.name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tar.extractfile(member).read())
                wanted.discard(member.name)
                if not wanted:
                    break
    assert not wanted, f"the bundle lacks {sorted(wanted)}"
    return tmp_path


@pytest.mark.skipif(not BUNDLE.is_file(), reason="no committed result bundle in this checkout")
def test_readme_claims_and_registration_agree_with_a_recomputation_of_the_bundle(tmp_path):
    home = _bundled_frontier_records(tmp_path)
    records = design_tallies.design_records("frontier", home)
    statuses = [s for r in records for s in recompute(r)]
    assert len(statuses) == 48  # 6 claims x 2 tests x 4 settings
    for d in DEVIATIONS:  # each listed change is what the two rules (and tests) give
        assert d.moved == (moved(statuses, d.stage) if d.stage else ()), d.date
    assert len(moved(statuses, "rule")) == 8 and all(s.registered == s.rule_now or s.registered ==
                                                     "undecidable at this design" for s in statuses)
    readme, claims_md = paths.README_PATH.read_text(), paths.CLAIMS_PATH.read_text()
    # what the tallies count, the redraw and deviations
    assert design_tallies.design_summary("frontier", home) in readme
    for c in claims.CLAIMS:  # each claim's tally (every status, shared measurements once) in both files
        row = next(line for line in readme.splitlines() if f"notebooks/{c.id}.py" in line)
        assert f"| {design_tallies.design_tally('frontier', c.id, home)} |" in row
    assert "\n".join(design_tallies.tally_table("frontier", home)) in claims_md
    for line in design_tallies.deviation_lines("frontier", home):
        assert line in readme and line in claims_md
    assert render_section() in preregistration.PATH.read_text()
    for s in statuses:  # each design row of claims.md shows the status now and, where it differs, the registered one
        row = next(r for r in claims_md.splitlines() if r.startswith(f"| `{s.finding_id}` | `{s.setting}` |"))
        cell = row.split(" | ")[2 if s.role == "paper" else 3]
        assert cell.startswith(s.now + " (keeps ") and (f"registered: {s.registered})" in cell) == (
            s.registered != s.now), row
