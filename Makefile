# Two commands set up a fresh machine: `make test` and `make evolve` (`make setup-gpu` adds the MuJoCo Warp backend).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
GPU_STAMP := $(VENV)/.installed-gpu

.PHONY: setup setup-gpu docs lint test test-slow fuzz evolve

setup: $(STAMP)

# Re-install whenever requirements.txt or pyproject.toml changes. derl itself is installed editable
# (-e: this checkout's code, no copy), without build isolation: setuptools comes from requirements.txt.
$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(WHEELS) --upgrade pip
	$(PY) -m pip install --quiet $(WHEELS) -r requirements.txt
	$(PY) -m pip install --quiet --no-build-isolation --no-deps -e .
	touch $(STAMP)

# The MuJoCo Warp backend (SIM.BACKEND warp; docs/guides/gpus.md#simulating-on-a-gpu) on top of `make setup`:
# requirements-gpu.txt, kept out of requirements.txt so the default install stays CPU-only and lean.
setup-gpu: $(GPU_STAMP)

$(GPU_STAMP): $(STAMP) requirements-gpu.txt
	$(PY) -m pip install --quiet $(WHEELS) -r requirements-gpu.txt
	touch $(GPU_STAMP)

# The documentation site (docs/, mkdocs.yml) into site/, warnings as errors: a broken link or anchor, a page
# left out of the nav or a docstring mkdocstrings cannot read fails the build. requirements-docs.txt is
# kept out of requirements.txt (nothing in derl imports it) and installed into the same venv on first use.
DOCS_STAMP := $(VENV)/.installed-docs

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

$(DOCS_STAMP): $(STAMP) requirements-docs.txt
	$(PY) -m pip install --quiet -r requirements-docs.txt
	touch $(DOCS_STAMP)

# ruff, then the architecture check: the import floors in pyproject.toml [tool.importlinter]
# (docs/design/architecture.md#layers), imports inside functions included, and derl never importing the
# benchmarks (tools/benchmarks: not installed, so tools/ goes on its path); then the type check (mypy,
# pyproject.toml [tool.mypy]): a misspelt config key or a wrong argument in the typed packages fails.
lint: setup
	$(VENV)/bin/ruff check derl tools tests evo_single_proc.py
	PYTHONPATH=tools $(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy

# The test suite's own packages (requirements-test.txt: Hypothesis), installed into the same venv on first use.
TEST_STAMP := $(VENV)/.installed-test

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install --quiet $(WHEELS) -r requirements-test.txt
	touch $(TEST_STAMP)

# The property tests (tests/properties/) run here too: a fixed, derandomized few examples each.
test: lint docs $(TEST_STAMP)
	MUJOCO_GL=egl $(PY) -m pytest -q -n auto --dist loadfile -m "not slow" tests

# Slower end-to-end and statistical tests, kept out of `make test`.
test-slow: setup
	MUJOCO_GL=egl $(PY) -m pytest -q -m slow tests

# The fuzzer (docs/contributing.md#fuzzing): every test marked `fuzz` with FUZZ_EXAMPLES examples per
# in-process property (a share of them for a property that starts processes; 2000: over 10,000 in all) and
# FUZZ_SEEDS seeds of the simulated cluster (tests marked `fuzz` read DERL_FUZZ_SEEDS). A failure prints its
# example and the blob that replays it; FUZZ_SEED=N draws the same examples again.
FUZZ_EXAMPLES ?= 2000
FUZZ_SEEDS ?= 200
FUZZ_SEED ?=
fuzz: $(TEST_STAMP)
	DERL_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) DERL_FUZZ_SEEDS=$(FUZZ_SEEDS) DERL_FUZZ_SEED=$(FUZZ_SEED) MUJOCO_GL=egl \
		$(PY) -m pytest -q -n auto -m fuzz --hypothesis-show-statistics tests

# A small real evolution run (configs/evo/quick.yml, a few minutes on 2 cores); rerun to resume.
evolve: setup
	MUJOCO_GL=egl $(PY) evo_single_proc.py --cfg configs/evo/quick.yml
	$(PY) tools/status.py output/quick
	@echo "results: output/quick (summary.json, metadata/, models/); next: docs/getting-started.md#your-first-study"

# `make gpu-check`: does SIM.BACKEND warp work on this machine's GPU? A verdict table and
# output/gpu_check.json (tools/gpu_check.py). warp (setup-gpu, ~149 MB) is installed only where
# `nvidia-smi -L` lists a GPU (asked only when gpu-check is a goal); elsewhere the tool says in one line
# that there is none. make exits 2 whenever the tool fails: `.venv/bin/python tools/gpu_check.py` exits
# with the tool's own code (1: a check failed or no GPU, 2: bad input).
ifneq ($(filter gpu-check,$(MAKECMDGOALS)),)
GPU_LISTED := $(shell nvidia-smi -L 2>/dev/null | grep '^GPU ')
endif
gpu-check: setup $(if $(GPU_LISTED),setup-gpu)
	MUJOCO_GL=egl $(PY) tools/gpu_check.py

# Offline install for GPU nodes without internet: `make wheelhouse` (on a machine with internet)
# downloads every wheel of requirements.txt and requirements-gpu.txt (warp-lang alone is ~149 MB, torch
# with its CUDA libraries a few GB) for PYTHON_VERSION and PLATFORM into wheelhouse/; copy the checkout
# with it to the node, where `make setup-gpu` (and `make setup`) install from it, never from the index.
PYTHON_VERSION ?= 3.12
PLATFORM ?= manylinux_2_28_x86_64
WHEELHOUSE := wheelhouse
WHEELS = $(if $(wildcard $(WHEELHOUSE)/*.whl),--no-index --find-links $(WHEELHOUSE))

.PHONY: gpu-check wheelhouse
wheelhouse:
	$(PYTHON) -m pip download --quiet --dest $(WHEELHOUSE) --only-binary=:all: \
		--python-version $(PYTHON_VERSION) --platform $(PLATFORM) \
		pip -r requirements.txt -r requirements-gpu.txt -r requirements-test.txt
