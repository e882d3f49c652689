# esreason: the whole setup is `make test` (or `make setup`), then `make reproduce`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))

.PHONY: setup test reproduce figures notebooks lab browser-check claims clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if ! command -v nvidia-smi >/dev/null 2>&1; then \
		echo "CPU machine: installing torch==2.13.0 (CPU wheel)"; \
		$(PY) -m pip install --quiet torch==2.13.0; \
	fi
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed  ## the package with the dev and notebook extras (JupyterLab, ipywidgets, jupytext)

test: setup  ## pyflakes-level lint (unused names, undefined names, syntax), then the suite
	$(VENV)/bin/ruff check --select F --quiet esreason_lib tests benchmarks notebooks
	$(PY) -m pytest -q

reproduce: setup
	$(PY) -m esreason_lib reproduce --jobs 2 $(NOTEBOOKS)

figures: setup  ## re-executes the notebooks; cached runs make this a redraw, missing runs are computed
	$(PY) -m esreason_lib reproduce --jobs 2 $(NOTEBOOKS)

notebooks: setup  ## registers the kernel and pairs each source with a git-ignored .ipynb (sources stay as committed)
	$(PY) -m ipykernel install --user --name esreason --display-name "esreason (.venv)"
	$(VENV)/bin/jupytext --sync $(NOTEBOOKS)

LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json

lab: notebooks  ## JupyterLab on notebooks/; a double-clicked .py source opens as a notebook (jupytext)
	mkdir -p $(dir $(LAB_SETTINGS))
	printf '%s\n' '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}' \
		> $(LAB_SETTINGS)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

$(VENV)/.browser: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[dev,browser]"
	touch $@

browser-check: $(VENV)/.browser  ## not in CI: executed build/notebooks/*.ipynb in headless Chromium (apt-get install chromium)
	$(PY) scripts/browser_check.py

claims: setup
	$(PY) -m esreason_lib claims

clean:
	rm -rf build
