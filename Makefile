# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-extended test-fast test-unit lint test-oldest test-releases test-release test-source test-all-families

$(BIN)/verl-split: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	# The CPU build of torch first, pinned: an unpinned torch would pull gigabytes of CUDA.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]' -c constraints/verl-0.9.txt
	touch $@

# The same PPO job on CPU three ways (stock verl, split placement with overlaps off, then on): a per-phase
# table on the console, verl's output and the plots in demo_output/.
demo: $(BIN)/verl-split
	VERL_SPLIT=1 $(BIN)/verl-split demo --compare --out demo_output

# The unit tier on two processes (pytest-xdist: both cores), then every other tier in one, in order.
test: $(BIN)/verl-split
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m unit -n 2
	$(BIN)/python -m pytest -m "not unit"
	$(MAKE) test-oldest
	$(MAKE) test-releases

# Every tier but the end-to-end runs and the downloads: for the edit-test loop.
test-fast: $(BIN)/verl-split
	$(BIN)/python -m pytest -m "not e2e and not network"

# Everything, the `extended` runs included (longer runs whose coverage the default suite has elsewhere).
test-extended: $(BIN)/verl-split
	$(BIN)/python -m pytest --extended

# Tests that start no process, no Ray and no verl trainer (pytest's `unit` marker), on both cores.
test-unit: $(BIN)/verl-split
	$(BIN)/python -m pytest -m unit -q -n 2

lint: $(BIN)/verl-split
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The oldest supported verl family in its own environment (.venvs/verl-$(OLDEST_FAMILY), made by
# scripts/family-env.sh): activation, placement and CPU seams, then stock main_ppo on CPU end to end
# (the dry run, split placement, overlapped updates), on verl's legacy FSDP workers; the legacy Megatron
# critic's non-blocking dispatch (megatron-core imports on CPU there).
OLDEST_FAMILY ?= 0.7
OLDEST_TESTS := tests/plugin/test_activation.py tests/plugin/test_activation_startup.py tests/plugin/test_activation_ray.py tests/plugin/test_off_policy.py \
	tests/plugin/test_preflight.py tests/plugin/test_preflight_runs.py \
	tests/runtime/placement/test_placement_seams.py tests/runtime/cpu/test_cpu_seams.py tests/runtime/overlap/test_megatron_legacy.py tests/core/test_citations.py \
	tests/e2e/test_cpu_dry_run.py tests/e2e/test_split_placement_e2e.py tests/e2e/test_overlap_e2e.py \
	tests/e2e/test_checkpoint_e2e.py
# Not tests/e2e/test_interrupt_e2e.py: Ctrl-C and the run's process tree are Ray's and verl-split's, the same on
# every family; the newest family's suite runs it (CI time, for the release checks; make test-release VERL=0.7.1).
test-oldest:
	scripts/family-env.sh $(OLDEST_FAMILY)
	.venvs/verl-$(OLDEST_FAMILY)/bin/python -m pytest $(OLDEST_TESTS)

# Every other PyPI release of the tested families (compat.TESTED_RELEASES; tests/project/test_releases.py checks the
# list): installed over its family's environment, the preflight, one 2-step split dry run
# (scripts/check-release.sh). 0.9.0 runs over .venv, 0.7.0 and 0.8.0 over .venvs/verl-0.7: their verl
# requirements are the same as the pinned release's (scripts/release-env.sh checks).
RELEASE_CHECKS ?= 0.9.0 0.7.0 0.8.0
test-releases:
	scripts/check-release.sh $(RELEASE_CHECKS)

# The whole suite on one release: make test-release VERL=0.9.0 (any release of a family with an environment),
# VERL=main (.venvs/verl-main, from verl's source tree: scripts/source-env.sh).
test-release:
	scripts/test-release.sh $(VERL)

# A verl source snapshot's leg (verl's neo or main branch, packed in ../shared/verl-src/; not in CI): its
# environment, the preflight, the split demo with every overlap and shared rollout, and the bit-for-bit e2e
# pair where its default trainer is RayPPOTrainer (scripts/source-leg.sh). make test-source VERL_SRC=neo
VERL_SRC ?= neo
test-source:
	scripts/source-leg.sh $(VERL_SRC)

# The whole suite on every family with a constraints file (not in CI: it takes long).
test-all-families:
	scripts/test-all-families.sh
