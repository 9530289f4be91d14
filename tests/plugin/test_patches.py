"""The source patches of ``patches/``: applied to each release's sdist from PyPI, then exercised on the tree.

Every check runs a fresh interpreter whose ``verl`` is the unpacked, patched sdist, put first on
``PYTHONPATH`` over the installed verl; the sdist's ``verl.egg-info`` sits beside it, so
``importlib.metadata`` (and with it verl-split's version gate) sees that release too. Everything runs in
this test run's environment: verl 0.7.1 and 0.8.0 import with the dependencies of the verl 0.9.1
environment, so CI needs no environment per release. The sdists are downloaded once per run.

Per release: the patches apply on their own and in order (``git apply --check``, then for real);
``import verl`` with ``VERL_SPLIT=1`` activates verl-split through verl's own loader with the start-up
file not run (``python -S``); ``verl-split doctor`` sees the patches; a per-node request no node of a
two-node Ray cluster (4 and 2 logical GPUs) can hold fails at once, naming the pool and the nodes; the
batch check accepts a 6 + 2 split that stock verl rejects and still rejects wrong ones; and verl's own
CPU tests of the touched modules pass (see VERL_TESTS). The unpatched 0.7.1 tree is the control for each
claim. About 2 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
from support import pypi_sdists
from support.paths import ROOT, TESTS
from support.pypi_sdists import unpack
from support.pyrun import COUNT_ACTIVATIONS, clean_env

import verl_split
from verl_split.plugin import source_patches

pytestmark = [pytest.mark.network, pytest.mark.ray]  # each release's sdist from the package index; Ray

SUPPORT = TESTS / "support"
PATCHES = ROOT / "patches"
RELEASES = ("0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1")
#: The patches each release needs: 0.9 loads entry points already.
EXPECTED = {
    "0.7.0": [source_patches.PLUGIN_LOADER, source_patches.PER_NODE_FIT, source_patches.BATCH_PER_POOL],
    "0.7.1": [source_patches.PLUGIN_LOADER, source_patches.PER_NODE_FIT, source_patches.BATCH_PER_POOL],
    "0.8.0": [source_patches.PLUGIN_LOADER, source_patches.PER_NODE_FIT, source_patches.BATCH_PER_POOL],
    "0.9.0": [source_patches.PER_NODE_FIT, source_patches.BATCH_PER_POOL],
    "0.9.1": [source_patches.PER_NODE_FIT, source_patches.BATCH_PER_POOL],
}
#: verl's own CPU tests of the modules the patches touch, as the sdists ship them: (release, what) -> tests.
#: None exercises ResourcePoolManager's checks, validate_config, main_ppo's TaskRunner or the plugin loader;
#: these cover the rest of single_controller/ray/base.py (RayResourcePool, with a Ray of its own) and
#: verl/utils/config.py (0.7.1 only). The Ray one runs on 0.9.1 by default and on 0.7.1 and 0.8.0 with
#: --extended: the base.py hunk is the same in all three, and the probes below run it on every tree.
RAY_POOL_TEST = "tests/single_controller/test_ray_local_envs_on_cpu.py::test_basics"
VERL_TESTS = {
    ("0.7.1", "config"): ["tests/trainer/config/test_algo_config_on_cpu.py"],
    ("0.9.1", "ray"): [RAY_POOL_TEST],
    ("0.7.1", "ray"): [RAY_POOL_TEST],
    ("0.8.0", "ray"): [RAY_POOL_TEST],
}
EXTENDED_VERL_TESTS = {("0.7.1", "ray"), ("0.8.0", "ray")}
CONTROL = "0.7.1"  # the release whose unpatched tree shows today's behaviour
SITE_PACKAGES = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
VERL_SPLIT_ROOT = str(Path(verl_split.__file__).resolve().parents[1])
TIMEOUT = 240


def family(release: str) -> str:
    return release.rsplit(".", 1)[0]


def importable_here(release: str):
    """``release``, skipped where its verl does not import with this environment's transformers: verl 0.7.0
    imports AutoModelForVision2Seq at module level (verl/utils/model.py:29), which transformers 5 removed.
    The 0.7 family's environment has transformers<5 (constraints/verl-0.7.txt): `make test-release VERL=0.7.0`."""
    from importlib.metadata import version

    transformers = version("transformers")
    if release == "0.7.0" and int(transformers.split(".")[0]) >= 5:
        reason = f"verl 0.7.0 needs transformers<5 (verl/utils/model.py:29); this environment has {transformers}"
        return pytest.param(release, marks=pytest.mark.skip(reason=reason))
    return release


#: The releases whose patched trees the probes import in this environment.
IMPORTABLE = [importable_here(release) for release in RELEASES]
#: Releases whose patches are another's line for line (only their context differs): their probes and their
#: loader run with --extended only, CI runs those of the release named.
SAME_HUNKS_AS = {"0.9.0": "0.9.1", "0.8.0": "0.7.1"}


def unless_same_hunks(release):
    """``release`` as a parameter, marked --extended where its hunks are another tested release's."""
    if isinstance(release, str) and release in SAME_HUNKS_AS:  # (one skipped already is a pytest.param)
        why = f"its patches' hunks are {SAME_HUNKS_AS[release]}'s line for line, which CI runs"
        return pytest.param(release, marks=pytest.mark.extended(reason=why))
    return release


#: The Ray probes.
PROBED = [unless_same_hunks(release) for release in IMPORTABLE]


def patch_files(release: str) -> list[Path]:
    return sorted((PATCHES / release).glob("*.patch"))


# ---------------------------------------------------------------------------------------------- the trees


@pytest.fixture(scope="session")
def sdists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each release's sdist from PyPI (URL and sha256 from the index's JSON), once per test run."""
    folder = tmp_path_factory.mktemp("verl_sdists")
    return pypi_sdists.download("verl", RELEASES, folder, why="these tests patch verl's sdists from it")


def git_apply(tree: Path, patch: Path, *flags: str) -> subprocess.CompletedProcess:
    # The ceiling keeps git from taking a repository above the tree (a basetemp inside a checkout).
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    return subprocess.run(["git", "apply", *flags, str(patch)], cwd=tree, env=env, capture_output=True, text=True)


@pytest.fixture(scope="session")
def trees(sdists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each release's sdist with its patches applied, and ``"control"``: the unpatched CONTROL tree."""
    base = tmp_path_factory.mktemp("verl_trees")
    result = {"control": unpack(sdists[CONTROL], base / "control")}
    for release in RELEASES:
        tree = unpack(sdists[release], base / release)
        for patch in patch_files(release):
            applied = git_apply(tree, patch)
            assert applied.returncode == 0, f"{patch.name} does not apply to verl {release}: {applied.stderr}"
        result[release] = tree
    return result


@pytest.mark.parametrize("release", RELEASES)
def test_patches_apply_alone_and_in_order(release, sdists, tmp_path):
    files = patch_files(release)
    assert [p.stem.split("-", 1)[1] for p in files] == EXPECTED[release]
    assert [p.name[:4] for p in files] == [f"{n:04d}" for n in range(1, len(files) + 1)]
    tree = unpack(sdists[release], tmp_path / "tree")
    for patch in files:
        header, _, body = patch.read_text().partition("diff --git ")
        assert body.startswith("a/verl/"), f"{patch.name}: paths must be a/verl/... b/verl/..."
        for part in ("What it changes", "Why", "verl issue", f"verl {release}"):
            assert part in header, f"{patch.name}: the header has no {part!r}"
        check = git_apply(tree, patch, "--check")
        assert check.returncode == 0, f"{patch.name} alone: {check.stderr}"
    for patch in files:
        assert git_apply(tree, patch).returncode == 0
    for patch in files:  # it took: each one reverses cleanly out of the patched tree
        assert git_apply(tree, patch, "--check", "--reverse").returncode == 0, patch.name
    if shutil.which("patch"):  # patches/README.md offers `patch -p1` as well
        pristine = unpack(sdists[release], tmp_path / "pristine")
        for patch in files:
            dry = subprocess.run(
                ["patch", "-p1", "--dry-run", "-i", str(patch)], cwd=pristine, capture_output=True, text=True
            )
            assert dry.returncode == 0, f"patch -p1 {patch.name}: {dry.stdout}{dry.stderr}"


# ----------------------------------------------------------------------------------------- the loader


def run_json_in(tree: Path, code: str, env: dict[str, str] | None = None, *, site: bool = True) -> dict:
    """Run ``code`` with ``tree`` first on the path; ``site=False``: ``python -S``, no start-up file runs.

    Without ``site`` no ``.pth`` file runs, verl-split's and the editable install's alike: the path gets
    this checkout of verl-split and the environment's site-packages (where the entry point's metadata is).
    """
    path = [str(tree)] if site else [str(tree), VERL_SPLIT_ROOT, *SITE_PACKAGES]
    args = [sys.executable, *([] if site else ["-S"]), "-c", textwrap.dedent(code)]
    proc = subprocess.run(
        args,
        env=clean_env({"PYTHONPATH": os.pathsep.join(path), **(env or {})}),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Counts activations (the bootstrap switches verl-split on once per process, whoever imports it).
ACTIVATION = (
    """
import json, sys
from importlib import metadata
"""
    + COUNT_ACTIVATIONS
    + """
import verl
from verl_split.plugin import source_patches
print(json.dumps({
    "verl": verl.__file__,
    "metadata_version": metadata.version("verl"),
    "active": activation.is_active(),
    "activations": len(calls),
    "startup_hook": "verl_split._startup" in sys.modules,
    "loaded_by": source_patches.loaded_by(),
    "patches": source_patches.report(),
}))
"""
)


@pytest.mark.parametrize("release", PROBED)
def test_import_verl_activates_verl_split_without_the_startup_file(release, trees):
    seen = run_json_in(trees[release], ACTIVATION, {"VERL_SPLIT": "1"}, site=False)
    assert seen["verl"] == str(trees[release] / "verl" / "__init__.py")
    assert seen["metadata_version"] == release  # the sdist's egg-info: verl-split gates on this release
    assert not seen["startup_hook"]
    assert seen["active"] and seen["activations"] == 1
    assert seen["loaded_by"] == source_patches.BY_VERL
    loader = "built in" if family(release) == "0.9" else "patched"
    assert seen["patches"] == {
        source_patches.PLUGIN_LOADER: loader,
        source_patches.PER_NODE_FIT: "yes",
        source_patches.BATCH_PER_POOL: "yes",
    }


def test_unpatched_0_7_does_not_activate_without_the_startup_file(trees):
    seen = run_json_in(trees["control"], ACTIVATION, {"VERL_SPLIT": "1"}, site=False)
    assert seen["metadata_version"] == CONTROL
    assert not seen["active"] and seen["loaded_by"] is None
    nothing = {
        source_patches.PLUGIN_LOADER: "no",
        source_patches.PER_NODE_FIT: "no",
        source_patches.BATCH_PER_POOL: "no",
    }
    assert seen["patches"] == nothing


def startup_file_installed() -> bool:
    return any((Path(p) / "verl_split_activate.pth").is_file() for p in SITE_PACKAGES)


needs_startup_file = pytest.mark.skipif(
    not startup_file_installed(), reason="verl_split_activate.pth is not installed in this environment"
)


# The activation probe, then `verl-split doctor`'s report of the same process, as text.
ACTIVATION_AND_DOCTOR = ACTIVATION.replace(
    "print(json.dumps(",
    "from verl_split.tools import doctor\n"
    "doctor.print_text(doctor.collect_report(), 'this process')\n"
    "print(json.dumps(",
)


@needs_startup_file
def test_startup_hook_stays_out_of_the_way_and_doctor_sees_the_patched_loader(trees):
    # 0.7.1 stands for 0.8.0 too: their loader patches add the same block to the same verl/__init__.py.
    release = "0.7.1"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ACTIVATION_AND_DOCTOR)],
        env=clean_env({"PYTHONPATH": str(trees[release]), "VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["startup_hook"]  # the start-up file ran and put its finder before verl ...
    assert seen["active"] and seen["activations"] == 1
    assert seen["loaded_by"] == source_patches.BY_VERL  # ... and verl's loader, not the hook, loaded verl-split
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert f"verl              {release}  (supported: 0.7.x, 0.8.x, 0.9.x; tested)" in lines
    assert f"loaded by         {source_patches.BY_VERL}" in lines
    # 0.7's megatron_workers needs megatron-core, which this environment lacks: said, not a problem.
    assert "verl.workers.megatron_workers: not importable here (megatron missing); patched if a run imports it" in lines
    assert not any(line.startswith("problem") for line in lines), lines
    assert any(line.startswith(f"verl patches      {source_patches.PLUGIN_LOADER}: patched (") for line in lines)
    assert f"{source_patches.PER_NODE_FIT}: yes" in lines and f"{source_patches.BATCH_PER_POOL}: yes" in lines


@needs_startup_file
def test_patched_loader_policy_is_honoured_as_on_verl_0_9(trees):
    # Before the loader patch the start-up hook loaded verl-split whatever VERL_USE_EXTERNAL_PLUGINS said.
    seen = run_json_in(trees["0.7.1"], ACTIVATION, {"VERL_SPLIT": "1", "VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert seen["startup_hook"] and not seen["active"] and seen["activations"] == 0


# ----------------------------------------------------------------- per-node fit and the batch check


@pytest.fixture(scope="module")
def two_nodes():
    """A Ray cluster of two raylets on this machine, with 4 and 2 logical GPUs (verl issue 2596's nodes)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 4, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, num_gpus=2)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def probe(trees, two_nodes, tiny_assets):
    """``probe(name)``: tests/support/patches_probe.py's findings on a tree (a release, or ``"control"``), once each."""
    found: dict[str, dict] = {}

    def run(name: str) -> dict:
        if name not in found:
            release = CONTROL if name == "control" else name
            args = {"tree": str(trees[name]), "family": family(release), "ray_address": two_nodes}
            args["assets"] = tiny_assets.to_json()
            proc = subprocess.run(
                [sys.executable, str(SUPPORT / "patches_probe.py"), json.dumps(args)],
                env=clean_env({"PYTHONPATH": str(trees[name])}),
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
            assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-5000:]}"
            found[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        return found[name]

    return run


@pytest.mark.ray
@pytest.mark.parametrize("release", PROBED)
def test_a_per_node_request_no_node_can_hold_fails_at_once(release, probe):
    # "At once": create_resource_pool raises before any placement group exists (verl makes them later, in
    # get_placement_groups, and waits there); the control test shows the unpatched call passing instead.
    seen = probe(release)["per_node_fit"]
    nodes = seen["nodes"]
    assert sorted(gpus for _, _, gpus in nodes) == [2, 4]
    for name, pool in (("3+3 (verl issue 2596)", "'global_pool': [3, 3]"), ("5 on one node", "[5]")):
        outcome = seen["specs"][name]
        error = outcome["error"]
        assert error and error.startswith("ValueError: Resource pools {") and pool in error, error
        assert "each on a single node" in error and "pending forever" in error
        for node_id, address, gpus in nodes:  # every node, with what it has free
            assert f"{address} ({node_id[:8]}): {gpus:g}" in error, error
    assert seen["specs"]["4 + 2 in two pools"]["error"] is None  # what fits passes
    assert seen["specs"]["4+2"]["error"] is None


BATCH_6_ON_8 = "real_train_batch_size (6) must be divisible by minimal possible batch size (8)"
BATCH_8_ON_6 = "real_train_batch_size (8) must be divisible by minimal possible batch size (6)"


@pytest.mark.ray
@pytest.mark.parametrize("release", PROBED)
def test_the_batch_check_follows_the_pool_of_each_role(release, probe):
    seen = probe(release)
    check, runner = seen["batch_check"], seen["task_runner"]
    # Without pool sizes, today's check: all 8 GPUs.
    assert BATCH_6_ON_8 in check["batch 6, all 8 GPUs"]["error"]
    assert check["batch 8, all 8 GPUs"]["error"] is None
    # The actor on 6 GPUs, the critic on 2: a batch of 6 is valid, one of 8 is not (the actor's 6 GPUs).
    assert check["batch 6, actor 6 + critic 2"]["error"] is None
    assert BATCH_8_ON_6 in check["batch 8, actor 6 + critic 2"]["error"]
    assert "the critic's data parallel size (3, on 3 GPUs)" in check["batch 8, actor 4 + critic 3"]["error"]
    # The TaskRunner passes the sizes of the pools it builds: stock pools as before, a split as split.
    assert BATCH_6_ON_8 in runner["batch 6, stock TaskRunner"]["error"]
    assert runner["batch 6, TaskRunner split 6 + 2"]["error"] is None
    assert BATCH_8_ON_6 in runner["batch 8, TaskRunner split 6 + 2"]["error"]


def test_verl_splits_own_pools_reach_the_batch_check_of_the_0_9_legacy_trainer(trees, tiny_assets):
    # verl-split wraps main_ppo_v0's init_resource_pool_mgr, which the patched TaskRunner now calls before
    # validating. (On 0.7/0.8 verl-split lays out its pools later, in RayPPOTrainer's constructor, and verl
    # 0.9's v1 trainer is validated by main() before any pool exists: patches/README.md.)
    args = {"tree": str(trees["0.9.1"]), "family": "0.9", "assets": tiny_assets.to_json(), "mode": "verl-split"}
    proc = subprocess.run(
        [sys.executable, str(SUPPORT / "patches_probe.py"), json.dumps(args)],
        env=clean_env({"PYTHONPATH": str(trees["0.9.1"]), "VERL_SPLIT": "1", "VERL_SPLIT_PLACEMENT": "6:2"}),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-5000:]}"
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["pools"] == {"actor_n_gpus": 6, "critic_n_gpus": 2}
    assert seen["batch 6"]["error"] is None
    # A batch of 8 on the actor's 6 GPUs: verl-split's planner (placement/batch.py) refuses it first, in
    # init_resource_pool_mgr; were it to let it pass, the patched validate_config would.
    error = seen["batch 8"]["error"]
    assert BATCH_8_ON_6 in error or "actor (actor_rollout_ref_pool, 6 GPUs" in error, error


@pytest.mark.ray
def test_unpatched_verl_waits_for_what_no_node_holds_and_rejects_the_valid_split(probe):
    seen = probe("control")
    # verl's total check passes: the next step, a STRICT_PACK placement group, would wait forever.
    assert seen["per_node_fit"]["specs"]["3+3 (verl issue 2596)"]["error"] is None
    assert seen["per_node_fit"]["specs"]["5 on one node"]["error"] is None
    assert "unexpected keyword argument 'actor_n_gpus'" in seen["batch_check"]["batch 6, actor 6 + critic 2"]["error"]
    assert BATCH_6_ON_8 in seen["task_runner"]["batch 6, TaskRunner split 6 + 2"]["error"]
    assert seen["task_runner"]["batch 8, TaskRunner split 6 + 2"]["error"] is None  # and lets the wrong one pass


# ----------------------------------------------------------------------------- verl's own tests


OWN_TESTS = "test_verls_own_cpu_tests_pass_on_the_patched_tree"


@pytest.fixture(scope="module", autouse=True)
def verl_own_tests(request, trees):
    """verl's CPU tests on each patched tree, started in the background before this module's first test.

    They mostly wait on Ray starting workers, so they run beside the other tests; the tests named
    OWN_TESTS collect them. Nothing starts when none of those is selected.
    """
    started = {}
    wanted = [
        item.callspec.params["key"]
        for item in request.session.items
        if getattr(item, "originalname", None) == OWN_TESTS and item.get_closest_marker("skip") is None
    ]
    for key in wanted:
        release, what = key
        log = trees[release].parent / f"verl-tests-{what}.log"
        started[key] = (
            subprocess.Popen(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *VERL_TESTS[key]],
                cwd=trees[release],
                # RAY_ADDRESS=local: each test's ray.init() starts its own Ray, never joins another one.
                env=clean_env({"PYTHONPATH": str(trees[release]), "RAY_ADDRESS": "local"}),
                stdout=log.open("w"),
                stderr=subprocess.STDOUT,
            ),
            log,
        )
    yield started
    for process, _ in started.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def own_test_marks(key: tuple[str, str]) -> list[pytest.MarkDecorator]:
    return ([pytest.mark.ray] if key[1] == "ray" else []) + (
        [pytest.mark.extended] if key in EXTENDED_VERL_TESTS else []
    )


@pytest.mark.parametrize("key", [pytest.param(key, id="-".join(key), marks=own_test_marks(key)) for key in VERL_TESTS])
def test_verls_own_cpu_tests_pass_on_the_patched_tree(key, verl_own_tests):
    process, log = verl_own_tests[key]
    returncode = process.wait(timeout=TIMEOUT)
    output = log.read_text(errors="replace")
    assert returncode == 0, output[-6000:]
    assert " passed" in output.strip().splitlines()[-1]
