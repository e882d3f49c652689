"""Presets never overwrite each other: a smoke run through every documented route (the library calls the notebooks
make, `esreason reproduce --preset smoke NOTEBOOK`, plain papermill with `-p preset smoke`, make) leaves tiny's
figures, finding records, executed notebooks and findings rows byte for byte as they were."""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from esreason_lib import paths  # noqa: E402
from esreason_lib.paper import claims, records  # noqa: E402
from esreason_lib.paper.findings import Check, make_finding  # noqa: E402
from esreason_lib.paper.studies import registry  # noqa: E402

NOTEBOOK = paths.NOTEBOOK_DIR / "00_base_models.py"  # the shortest notebook at smoke (~20 s)


def _hashes(*roots: Path) -> dict[str, str]:
    """{path: sha256} of every file under `roots`."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for root in roots for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture
def tiny_world(tmp_path, monkeypatch):
    """A store, figures folder, build folder, README and claims.md holding tiny's results (a record per finding,
    a file per committed figure name, an executed notebook), every writable place of a run pointed under tmp."""
    home, figures, build = tmp_path / "runs", tmp_path / "figures", tmp_path / "build"
    monkeypatch.setenv("ESREASON_HOME", str(home))
    monkeypatch.setenv("ESREASON_FIGURES", str(figures))
    monkeypatch.setattr(paths, "BUILD_DIR", build)
    for c in registry.CLAIMS:
        records.record_finding(c.id, make_finding(f"tiny {c.id}", [Check("e", 0.2, 0.1, 0.3, 0.05)]), preset="tiny")
        for name in c.figures:
            for suffix in (".png", ".pdf"):
                (figures / f"{name}{suffix}").parent.mkdir(parents=True, exist_ok=True)
                (figures / f"{name}{suffix}").write_bytes(f"tiny {name}".encode())
    build.mkdir()
    (build / f"{NOTEBOOK.stem}.ipynb").write_text("tiny's executed notebook")
    readme, claims_md = tmp_path / "README.md", tmp_path / "claims.md"
    readme.write_text("intro\n<!-- claims:start -->\n<!-- claims:end -->\n")
    claims.write_claims(claims_path=claims_md, readme_path=readme)
    monkeypatch.setattr(claims.write_claims, "__defaults__", (None, claims_md, readme))
    return {"home": home, "figures": figures, "build": build, "readme": readme, "claims": claims_md,
            "before": _hashes(home / "findings", figures, build, readme, claims_md)}


def _tiny_files(world) -> dict[str, str]:
    """The hashes of tiny's files now (smoke's own folders excluded)."""
    smoke = [world["home"] / "findings" / "smoke", world["figures"] / "smoke", world["build"] / "smoke"]
    now = _hashes(world["home"] / "findings", world["figures"], world["build"], world["readme"], world["claims"])
    return {p: h for p, h in now.items() if not any(Path(p).is_relative_to(s) for s in smoke)}


def test_smoke_through_the_library_calls_leaves_tiny_untouched(tiny_world):
    import matplotlib.pyplot as plt

    from esreason_lib.paper.plots import save_figure

    fig, _ = plt.subplots()
    saved = save_figure(fig, "00_base_passk", preset="smoke")
    plt.close(fig)
    record = records.record_finding("00_base_models", make_finding("smoke", [Check("e", 0.0, -0.1, 0.1, 0.05)]),
                                   preset="smoke")
    assert saved[0] == tiny_world["figures"] / "smoke" / "00_base_passk.png"
    assert record == tiny_world["home"] / "findings" / "smoke" / "00_base_models.json"
    assert _tiny_files(tiny_world) == tiny_world["before"]


@pytest.mark.slow
def test_smoke_through_the_cli_and_plain_papermill_leaves_tiny_untouched(tiny_world, capsys):
    """`esreason reproduce --preset smoke NOTEBOOK` (default out-dir, then its claims step), then papermill itself
    with `-p preset smoke` on the notebook converted to .ipynb: smoke's figure, record and executed notebook land in
    smoke's folders; tiny's files and rows keep their bytes."""
    import jupytext
    import papermill

    from esreason_lib.cli import main

    assert main(["reproduce", "--preset", "smoke", str(NOTEBOOK)]) == 0
    assert "smoke test: numbers mean nothing" in capsys.readouterr().out  # the claims step names it, writes nothing
    assert (tiny_world["build"] / "smoke" / f"{NOTEBOOK.stem}.ipynb").is_file()
    assert (tiny_world["figures"] / "smoke" / "00_base_passk.png").is_file()
    assert records.read_record("00_base_models", "smoke")["preset"] == "smoke"
    assert _tiny_files(tiny_world) == tiny_world["before"]

    shutil.rmtree(tiny_world["figures"] / "smoke")
    source = tiny_world["build"] / "smoke" / "plain.ipynb"
    jupytext.write(jupytext.read(NOTEBOOK), source, fmt="ipynb")
    papermill.execute_notebook(str(source), str(source.with_name("plain.out.ipynb")), parameters={"preset": "smoke"},
                               progress_bar=False, cwd=str(paths.REPO_ROOT))
    assert (tiny_world["figures"] / "smoke" / "00_base_passk.png").is_file()
    assert _tiny_files(tiny_world) == tiny_world["before"]


def test_make_keeps_a_presets_notebooks_and_claims_apart(tmp_path):
    """`make -n ... PRESET=smoke`: every notebook runs at smoke into build/notebooks/smoke, no figures folder is
    forced on the library (it keys figures itself), and the claims step is told the preset."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "executed", "claims", f"PY={sys.executable}", "PRESET=smoke"],
                         cwd=paths.REPO_ROOT, capture_output=True, text=True, check=True).stdout
    runs = [line for line in out.splitlines() if " reproduce " in line]
    assert runs and all("--preset smoke --out-dir build/notebooks/smoke " in line for line in runs)
    assert "ESREASON_FIGURES" not in (paths.REPO_ROOT / "Makefile").read_text()
    tiny = subprocess.run(["make", "-n", "executed", f"PY={sys.executable}"], cwd=paths.REPO_ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert all("--out-dir build/notebooks " in line for line in tiny.splitlines() if " reproduce " in line)


def test_paths_key_every_place_by_preset(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_FIGURES", str(tmp_path / "f"))
    assert paths.figures_dir() == paths.figures_dir("tiny") == tmp_path / "f"
    assert paths.figures_dir("smoke") == tmp_path / "f" / "smoke"
    assert paths.findings_dir(tmp_path, "tiny") == tmp_path / "findings"
    assert paths.findings_dir(tmp_path, "powered") == tmp_path / "findings" / "powered"
    assert paths.executed_dir() == paths.BUILD_DIR and paths.executed_dir("smoke") == paths.BUILD_DIR / "smoke"
    for bad in ("", "../x", ".hidden", 3):
        with pytest.raises(ValueError, match="preset must be a plain preset name"):
            paths.preset_folder(tmp_path, bad)


def test_a_redraw_that_computes_the_same_finding_keeps_its_record_and_time(tmp_path, monkeypatch):
    """`make figures` recomputes every finding from stored results: the same finding keeps the time it was first
    measured (the README shows the run date, not the redraw date) and the record's bytes; a new result is dated now."""
    import json

    home = tmp_path / "runs"
    path = records.record_finding("05_forgetting", make_finding("kept", [Check("e", 0.2, 0.1, 0.3, 0.05)]),
                                 preset="tiny", home=home)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "time": "2020-01-02T03:04:05+00:00"}, indent=1))
    before = path.read_bytes()
    records.record_finding("05_forgetting", make_finding("kept", [Check("e", 0.2, 0.1, 0.3, 0.05)]), preset="tiny",
                          home=home)
    assert path.read_bytes() == before
    assert "2020-01-02" in claims.render_claims(home)
    records.record_finding("05_forgetting", make_finding("changed", [Check("e", 0.2, 0.1, 0.3, 0.05)]),
                          preset="tiny", home=home)
    assert json.loads(path.read_text())["time"] != "2020-01-02T03:04:05+00:00"


def test_redrawing_an_imported_record_keeps_its_time_and_its_mark(tmp_path):
    """A fresh clone's `make figures` recomputes the findings the bundle brought (marked imported) from the bundle's
    tables: the same finding keeps the time it was measured, so the README's dates do not move, and its mark (in the
    record: papers/claims.md reads the same whether drawn from the bundle or computed); a changed finding computed
    here (not under `make figures`, which stops on it: tests/test_provenance.py) loses both."""
    import json

    from esreason_lib.store.bundle import IMPORTED

    home = tmp_path / "runs"
    finding = make_finding("kept", [Check("e", 0.2, 0.1, 0.3, 0.05)])
    path = records.record_finding("05_forgetting", finding, preset="tiny", home=home)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "time": "2020-01-02T03:04:05+00:00", IMPORTED: True}, indent=1))
    records.record_finding("05_forgetting", finding, preset="tiny", home=home)
    redrawn = json.loads(path.read_text())
    assert redrawn["time"] == "2020-01-02T03:04:05+00:00" and redrawn[IMPORTED] is True
    assert "(preset `tiny`, 2020-01-02) |" in claims.render_claims(home)
    records.record_finding("05_forgetting", make_finding("changed", [Check("e", 0.2, 0.1, 0.3, 0.05)]),
                          preset="tiny", home=home)
    changed = json.loads(path.read_text())
    assert IMPORTED not in changed and changed["time"] != "2020-01-02T03:04:05+00:00"
