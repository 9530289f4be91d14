# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast lint

$(BIN)/verl-split: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	# The CPU build of torch first, pinned: an unpinned torch would pull gigabytes of CUDA.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# Split placement and overlapped updates on CPU, then the same job without overlap, for the plot.
demo: $(BIN)/verl-split
	VERL_SPLIT=1 $(BIN)/verl-split demo --compare --out demo_output

test: $(BIN)/verl-split
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

test-fast: $(BIN)/verl-split
	$(BIN)/python -m pytest -m "not e2e"

lint: $(BIN)/verl-split
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
