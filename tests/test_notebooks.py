"""Smoke runs: every notebook executes under papermill with `preset="smoke"` (tiny model, seconds of training).

All notebooks share one temporary run store, so the smoke zoo model is pretrained once and later notebooks reuse
earlier notebooks' runs, exactly as in `make reproduce`.
"""

import json
from pathlib import Path

import pytest

from esreason_lib.paper.notebooks import list_notebooks, run_notebook

NOTEBOOKS = list_notebooks()


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("notebooks")
    mp = pytest.MonkeyPatch()
    mp.setenv("ESREASON_HOME", str(root / "runs"))
    mp.setenv("ESREASON_FIGURES", str(root / "figures"))
    yield root
    mp.undo()


def test_every_notebook_has_a_parameters_cell_with_a_preset():
    import jupytext

    assert NOTEBOOKS, "no notebooks found"
    for path in NOTEBOOKS:
        nb = jupytext.read(path)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, path.name
        assert 'preset = "tiny"' in tagged[0].source, path.name


def noisy_outputs(executed: Path) -> list[dict]:
    """The error outputs and stderr stream outputs of an executed notebook: what a reader sees as a red block."""
    nb = json.loads(Path(executed).read_text())
    return [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "error" or (o.get("output_type") == "stream" and o.get("name") == "stderr")]


def test_noisy_outputs_finds_a_stderr_cell_and_progress_bars_leave_their_final_line(tmp_path):
    source = tmp_path / "99_noise.py"
    source.write_text('# %% tags=["parameters"]\npreset = "smoke"\n\n'
                      '# %%\nfrom esreason_lib.progress import progress_bar\nprint("fine")\n'
                      'for _ in progress_bar(range(3), desc="kept"):\n    pass\n'
                      'for _ in progress_bar(range(2), desc="dropped", leave=False):\n    pass\n\n'
                      '# %%\nimport sys\nprint("loud", file=sys.stderr)\n')
    executed = run_notebook(source, out_dir=tmp_path, progress=False)
    noisy = noisy_outputs(executed)
    assert [(o["name"], "".join(o["text"])) for o in noisy] == [("stderr", "loud\n")]
    bars = [o for o in json.loads(executed.read_text())["cells"][1]["outputs"] if o["output_type"] == "display_data"]
    lines = ["".join(o["data"].get("text/plain", "")) for o in bars]
    assert len(lines) == 2 and lines[0].startswith("kept: 100%") and "3/3" in lines[0], lines
    assert lines[1] == "" and "application/vnd.jupyter.widget-view+json" in bars[0]["data"], lines


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_with_smoke_preset(path, smoke_env):
    out = run_notebook(path, parameters={"preset": "smoke"}, out_dir=smoke_env / "build", progress=False)
    assert noisy_outputs(out) == []  # no error, no stderr (warnings, transformers' bars, tqdm without widgets)
    assert str(smoke_env) not in out.read_text(), "the executed notebook names a folder of this machine"
    assert list((smoke_env / "figures" / "smoke").glob(f"{path.stem[:2]}_*.png")), "the notebook saved no figure"
    assert (smoke_env / "runs" / "findings" / "smoke" / f"{path.stem}.json").is_file(), "it recorded no finding"


def test_makefile_runs_every_notebook_after_the_runs_it_reuses(tmp_path):
    """`make -n executed` lists one papermill run per notebook, with 03-05 after 01 and 06 after 00."""
    import shutil
    import subprocess
    import sys

    from esreason_lib.paths import REPO_ROOT

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "executed", f"PY={sys.executable}", "PRESET=smoke", f"NB={tmp_path}"],
                         cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    order = [line.split()[-1].split("/")[-1][:2] for line in out.splitlines() if " reproduce " in line]
    assert sorted(order) == [p.name[:2] for p in NOTEBOOKS]
    assert all(order.index("01") < order.index(n) for n in ("03", "04", "05")) and order.index("00") < order.index("06")
    assert all("--preset smoke" in line for line in out.splitlines() if " reproduce " in line)


def test_notebook_parameters_reads_the_tagged_cell(tmp_path):
    from esreason_lib.paper.notebooks import notebook_parameters

    assert all(notebook_parameters(p)["preset"] == "tiny" for p in list_notebooks())
    nb = tmp_path / "99_x.py"
    nb.write_text('# %%\nx = 1\n\n# %% tags=["parameters"]\npreset = "smoke"\nseeds = (0, 1)\n')
    assert notebook_parameters(nb) == {"preset": "smoke", "seeds": (0, 1)}
    nb.write_text("# %%\nx = 1\n")
    with pytest.raises(ValueError, match="'99_x.py' has no cell tagged 'parameters'"):
        notebook_parameters(nb)


def test_an_interrupted_or_failed_notebook_leaves_no_executed_notebook(tmp_path, monkeypatch):
    """papermill writes its output cell by cell: the run goes to a temporary file renamed only when complete, so
    Ctrl-C (or a failing cell) leaves neither a half-executed notebook nor a stale one from an earlier run."""
    import papermill

    from esreason_lib.paper.notebooks import NotebookError

    source = tmp_path / "99_x.py"
    source.write_text('# %% tags=["parameters"]\npreset = "smoke"\n\n# %%\nprint("ok")\n')
    out = tmp_path / "out"
    executed = run_notebook(source, out_dir=out)
    assert sorted(p.name for p in out.iterdir()) == ["99_x.ipynb"] and '"ok\\n"' in executed.read_text()

    def interrupted(_input, output, **_):
        Path(output).write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr(papermill, "execute_notebook", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_notebook(source, out_dir=out)
    assert list(out.iterdir()) == []
    monkeypatch.undo()
    source.write_text('# %% tags=["parameters"]\npreset = "smoke"\n\n# %%\nraise ValueError("boom, got\\n  1.0])")\n')
    with pytest.raises(NotebookError, match=r"99_x.py failed in cell 2: ValueError: boom, got$"):  # its first line
        run_notebook(source, out_dir=out)
    assert list(out.iterdir()) == []


def test_an_executed_notebook_names_no_absolute_path(tmp_path):
    """papermill records its input and output files, here temporary ones with absolute paths: the executed notebook
    keeps the source and its own path relative to the repository (or their names, outside it) and no folder of this
    machine (the notebook's working directory is the repository)."""
    from esreason_lib.paper.notebooks import portable_path
    from esreason_lib.paths import REPO_ROOT

    source = tmp_path / "99_x.py"
    source.write_text('# %% tags=["parameters"]\npreset = "smoke"\n\n# %%\nimport os\nprint(len(os.getcwd()))\n')
    executed = run_notebook(source, out_dir=tmp_path / "out")
    text = executed.read_text()
    papermill = json.loads(text)["metadata"]["papermill"]
    assert (papermill["input_path"], papermill["output_path"]) == ("99_x.py", "99_x.ipynb")
    assert str(tmp_path) not in text and str(REPO_ROOT) not in text and f'"{len(str(REPO_ROOT))}\\n"' in text
    assert portable_path(REPO_ROOT / "notebooks" / "00_base_models.py") == "notebooks/00_base_models.py"
    assert portable_path(REPO_ROOT / "build" / "notebooks" / ".." / "x.ipynb") == "build/x.ipynb"


def test_a_notebook_run_prints_no_progress_bar_and_no_kernel_warning(tmp_path, capfd):
    """Two notebooks run side by side (`make -j2`): no papermill cell bar to interleave, no kernel TCP warning."""
    source = tmp_path / "99_x.py"
    source.write_text('# %% tags=["parameters"]\npreset = "smoke"\n\n# %%\nprint("ok")\n')
    run_notebook(source, out_dir=tmp_path / "out")
    err = capfd.readouterr().err
    assert "Executing" not in err and "TCP" not in err, err
