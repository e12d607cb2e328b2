# Entry points. `make demo` sets everything up and runs the main job on the embedded default
# (local target, tiny synthetic model); `make test` runs the test suite.
VENV   := .venv
PY     := $(VENV)/bin/python
LAB    := $(VENV)/bin/lab
PYTHON ?= python3

.PHONY: deps setup engine-assert engine-latest demo test test-fast test-engine test-faults lint bench repro lock
.DEFAULT_GOAL := demo

deps:
	@echo "==> system packages (scripts/system-deps.sh)"
	@bash scripts/system-deps.sh

# the locked dependencies (hashes checked), then the lab itself without resolving anything again
$(VENV)/.installed: pyproject.toml requirements-dev.lock
	@echo "==> Python environment: $(VENV) from requirements-dev.lock"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --require-hashes -r requirements-dev.lock
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $@

# refresh the lock files (newest versions pyproject.toml allows, for every supported Python)
lock: $(VENV)/.installed
	for spec in "requirements.lock:" "requirements-dev.lock:--extra dev"; do \
	  $(VENV)/bin/uv pip compile pyproject.toml $${spec#*:} --universal --python-version 3.11 --generate-hashes \
	    --no-header --no-annotate --upgrade -q -o $${spec%%:*} || exit 1; \
	done

setup: deps $(VENV)/.installed
	@echo "==> DVC remote"
	@$(LAB) dvc-setup
	@echo "==> engine release (the patched llama.cpp; cached after the first build)"
	@$(LAB) engine build
	@echo "==> tiny model"
	@$(LAB) model tiny

demo: setup
	@echo "==> experiments: lab sweep"
	@$(LAB) sweep
	@echo "==> experiments: lab sweep on the newest llama.cpp release (the answer shows it beside the pin's)"
	@$(LAB) engine build --engine latest
	@$(LAB) sweep --engine latest
	@echo "==> experiments: lab arms"
	@$(LAB) arms
	@echo "==> experiments: lab profile"
	@$(LAB) profile
	@echo "==> experiments: an agent conversation in three arms (today's server, the optimum, no cache)"
	@$(LAB) trace synth --conversation --reasoning 30 -o build/demo/conversation.jsonl
	@$(LAB) trace replay build/demo/conversation.jsonl
	@echo "==> experiments: the rebuild labs"
	@$(LAB) rebuild exact
	@$(LAB) rebuild span
	@$(LAB) rebuild cost
	@echo "==> catalog and reports (lab catalog track, dvc repro)"
	@$(LAB) catalog track
	@$(MAKE) --no-print-directory repro
	@echo "==> the answer"
	@$(LAB) catalog headline

# dvc.yaml's stage commands call `lab`: run DVC with the venv on PATH
repro: $(VENV)/.installed
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc repro

# the engines only the tests use (the demo builds the releases of the pin and the newest): the pin with
# assertions on, and the newest supported llama.cpp with assertions on (the contract tests run on both engines)
engine-assert: setup
	@echo "==> engine assert (the pin, assertions on, for the tests)"
	@$(LAB) engine build --flavor assert

engine-latest: setup
	@echo "==> engine latest, assert (the newest supported llama.cpp, for the tests)"
	@$(LAB) engine build --engine latest --flavor assert

test: engine-assert engine-latest
	$(VENV)/bin/pytest -q

# tiers for development (`make test` runs all of them): fast = no server, engine = the real server, slow = the rest
test-fast: $(VENV)/.installed
	$(VENV)/bin/pytest -q -m fast

test-engine: engine-assert engine-latest
	$(VENV)/bin/pytest -q -m "fast or engine"

# the fault suite alone (also part of `make test`): hostile upstreams and agents, hosts and archives
test-faults: engine-assert engine-latest
	$(VENV)/bin/pytest -q -m faults

# the C++ tools (lab/**/*.cpp, lab/**/*.h) against .clang-format, with clang-format from the dev extras
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/clang-format --dry-run --Werror $$(find lab -name '*.cpp' -o -name '*.h' | sort)

bench: setup
	$(PY) benchmarks/engine_fake_vs_genuine.py
	$(PY) benchmarks/sweep_agreement.py
	$(PY) benchmarks/sweep_cost.py
	$(PY) benchmarks/noise_floor.py
	$(PY) benchmarks/inproc_arms.py
	$(PY) benchmarks/two_references.py
	$(PY) benchmarks/profile_overhead.py
	$(PY) benchmarks/catalog_ingest.py
	$(PY) benchmarks/aa_test.py
