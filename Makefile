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

# The unit tier on both cores (pytest-xdist, -n 2; --dist loadgroup keeps a file's tests on one worker, and each
# worker's Ray gets a folder of its own: tests/support/xdist_groups.py), then every other tier in one process, in
# order. The other tiers stay serial: the machine is already busy there (a subprocess test's `import verl`, an
# end-to-end run's start-up); two at once took 14.1 min for what one at a time does in 16.8, and the end-to-end
# runs 31.0 min against 25.3, one shared-rollout run's late join then not paying.
XDIST := -n 2 --dist loadgroup
# Bytecode caches on: with PYTHONDONTWRITEBYTECODE set (as on this project's machines) every test process, Ray
# worker and fresh interpreter compiles verl-split again, and pytest rewrites every test module's asserts again.
unexport PYTHONDONTWRITEBYTECODE
test: $(BIN)/verl-split
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m unit $(XDIST)
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
	$(BIN)/python -m pytest -m unit -q $(XDIST)

lint: $(BIN)/verl-split
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The oldest supported verl family in its own environment (.venvs/verl-$(OLDEST_FAMILY), made by
# scripts/family-env.sh): what differs by family. The placement and CPU seams on its trainer and workers, the
# preflight against its sources, the legacy Megatron critic's non-blocking dispatch (megatron-core imports on CPU
# there), then stock main_ppo on CPU end to end on verl's legacy FSDP workers (split placement, every overlap on
# model-parallel meshes bit for bit, exact resume on RayPPOTrainer).
# Not here (CI time): activation and VERL_SPLIT's values (tests/plugin/test_activation*.py, test_off_policy.py,
# test_preflight_runs.py) are verl-split's own code, the same on every family: the newest family's suite runs
# them, test_patches.py activates each release's sources (0.7.1's among them) and the 0.7.0 release check below
# runs doctor and a split dry run on 0.7; Ctrl-C (tests/e2e/test_interrupt_e2e.py) is Ray's and verl-split's.
# The whole suite on 0.7: make test-release VERL=0.7.1.
OLDEST_FAMILY ?= 0.7
OLDEST_SEAMS := tests/plugin/test_preflight.py tests/runtime/placement/test_placement_seams.py \
	tests/runtime/cpu/test_cpu_seams.py tests/runtime/overlap/test_megatron_legacy.py tests/core/test_citations.py
OLDEST_E2E := tests/e2e/test_split_placement_e2e.py tests/e2e/test_overlap_e2e.py tests/e2e/test_checkpoint_e2e.py
test-oldest:
	scripts/family-env.sh $(OLDEST_FAMILY)
	.venvs/verl-$(OLDEST_FAMILY)/bin/python -m pytest $(OLDEST_SEAMS) $(OLDEST_E2E)

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
