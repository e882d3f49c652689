# esreason: the whole setup is `make test` (or `make setup`), then `make reproduce`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))

.PHONY: setup test reproduce figures notebooks claims zoo-check clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if ! command -v nvidia-smi >/dev/null 2>&1; then \
		echo "CPU machine: installing torch==2.13.0 (CPU wheel)"; \
		$(PY) -m pip install --quiet torch==2.13.0; \
	fi
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

test: setup  ## pyflakes-level lint (unused names, undefined names, syntax), then the suite
	$(VENV)/bin/ruff check --select F --quiet esreason_lib tests benchmarks notebooks
	$(PY) -m pytest -q

reproduce: setup
	$(PY) -m esreason_lib reproduce --jobs 2 $(NOTEBOOKS)

figures: setup  ## re-executes the notebooks; cached runs make this a redraw, missing runs are computed
	$(PY) -m esreason_lib reproduce --jobs 2 $(NOTEBOOKS)

notebooks: setup
	$(PY) -m ipykernel install --user --name esreason --display-name "esreason (.venv)"
	$(VENV)/bin/jupytext --sync $(NOTEBOOKS)

claims: setup
	$(PY) -m esreason_lib claims

zoo-check: setup  ## rebuild every shipped zoo model at one thread and compare its weights hash (qwen2-s: ~6 min on a busy machine)
	$(PY) benchmarks/zoo_weights.py

clean:
	rm -rf build
