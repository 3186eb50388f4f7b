# Two commands set up a fresh machine: `make test` and `make evolve`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup lint test test-slow evolve

setup: $(STAMP)

# Re-install whenever requirements.txt changes.
$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

lint: setup
	$(VENV)/bin/ruff check derl tools tests evo_single_proc.py

test: lint
	MUJOCO_GL=egl $(PY) -m pytest -q -m "not slow" tests

# Slower end-to-end and statistical tests, kept out of `make test`.
test-slow: setup
	MUJOCO_GL=egl $(PY) -m pytest -q -m slow tests

# A small real evolution run (configs/evo/quick.yml, a few minutes on 2 cores); rerun to resume.
evolve: setup
	MUJOCO_GL=egl $(PY) evo_single_proc.py --cfg configs/evo/quick.yml
	$(PY) tools/status.py output/quick
	@echo "results: output/quick (summary.json, metadata/, models/; see README)"
