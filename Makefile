# Entry points. `make demo` sets everything up and runs the main job on the embedded default
# (local target, tiny synthetic model); `make test` runs the test suite.
VENV   := .venv
PY     := $(VENV)/bin/python
LAB    := $(VENV)/bin/lab
PYTHON ?= python3

.PHONY: deps setup demo test test-fast test-engine lint bench repro
.DEFAULT_GOAL := demo

deps:
	@bash scripts/system-deps.sh

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

setup: deps $(VENV)/.installed
	$(LAB) dvc-setup
	$(LAB) engine build
	$(LAB) engine build --flavor assert
	$(LAB) model tiny

demo: setup
	$(LAB) sweep
	$(LAB) arms
	$(LAB) profile
	$(LAB) replay exact
	$(LAB) replay span
	$(LAB) replay cost
	$(LAB) catalog track
	$(MAKE) repro

# dvc.yaml's stage commands call `lab`: run DVC with the venv on PATH
repro: $(VENV)/.installed
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc repro

test: setup
	$(VENV)/bin/pytest -q

# tiers for development (`make test` runs all of them): fast = no server, engine = the real server, slow = the rest
test-fast: $(VENV)/.installed
	$(VENV)/bin/pytest -q -m fast

test-engine: setup
	$(VENV)/bin/pytest -q -m "fast or engine"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: setup
	$(PY) benchmarks/engine_fake_vs_genuine.py
	$(PY) benchmarks/sweep_agreement.py
	$(PY) benchmarks/inproc_arms.py
	$(PY) benchmarks/profile_overhead.py
	$(PY) benchmarks/catalog_ingest.py
