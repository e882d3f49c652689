import pytest

from esreason_lib import claims, paths


def test_record_and_render_claims(tmp_path):
    home = tmp_path / "runs"
    table = claims.render_claims(home)
    assert table.count("not run yet") == len(claims.FINDINGS)
    claims.record_finding("05_forgetting", "Delta pass@1 on addition +0.01 | sorting -0.02", preset="smoke", home=home)
    table = claims.render_claims(home)
    assert "Delta pass@1 on addition +0.01 / sorting -0.02" in table  # pipes escaped for Markdown
    assert table.count("not run yet") == len(claims.FINDINGS) - 1
    with pytest.raises(ValueError, match="finding_id"):
        claims.record_finding("99_nope", "x", preset="smoke", home=home)


def test_write_claims_updates_readme_block(tmp_path):
    home = tmp_path / "runs"
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- claims:start -->\nold\n<!-- claims:end -->\nrest\n")
    claims.record_finding("00_base_models", "greedy 0.30", preset="tiny", home=home)
    claims.write_claims(home, claims_path=tmp_path / "claims.md", readme_path=readme)
    text = readme.read_text()
    assert "old" not in text and "greedy 0.30" in text and text.endswith("rest\n")
    assert "greedy 0.30" in (tmp_path / "claims.md").read_text()


def test_findings_dir_follows_home_and_env(tmp_path, monkeypatch):
    assert paths.findings_dir(tmp_path) == tmp_path / "findings"
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "store"))
    assert paths.findings_dir() == tmp_path / "store" / "findings"
    monkeypatch.delenv("ESREASON_HOME")
    assert paths.findings_dir() == paths.REPO_ROOT / "runs" / "findings"


def test_every_finding_names_a_notebook_and_its_committed_figures():
    """Each row of the table points at a notebook that exists and at figures that notebook saves."""
    from esreason_lib.notebooks import list_notebooks

    stems = [p.stem for p in list_notebooks()]
    assert [f.id for f in claims.FINDINGS] == stems
    for finding in claims.FINDINGS:
        source = (paths.REPO_ROOT / "notebooks" / f"{finding.id}.py").read_text()
        for figure in finding.figure.split(", "):
            assert f'"{figure}"' in source, f"{finding.id} does not save {figure}"
            assert (paths.REPO_ROOT / "figures" / f"{figure}.png").is_file()
