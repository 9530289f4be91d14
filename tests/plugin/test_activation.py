"""Activation by VERL_SPLIT, the version gate and the patch machinery, each in a fresh interpreter."""

from __future__ import annotations

import pytest
from support.families import FAMILY
from support.pyrun import run_json, run_python

from verl_split import seam_catalogue
from verl_split.core import compat
from verl_split.plugin import activation

pytestmark = pytest.mark.subprocess

seam_catalogue.install()  # the registry's catalogue in this process, as the bootstrap installs it in a run

#: verl 0.9+ imports the ``verl.plugins`` entry point (the bootstrap) in every process; 0.7/0.8
#: import nothing of verl-split unless a VERL_SPLIT* variable is set (verl_split_activate.pth).
ENTRY_POINTS = compat.has_entry_points()
BOOTSTRAP_ONLY = [
    "verl_split",
    "verl_split._bootstrap",
    "verl_split.core",
    "verl_split.core.errors",
    "verl_split.core.settings",
]
UNSET_MODULES = BOOTSTRAP_ONLY if ENTRY_POINTS else []

# Prints a fingerprint of every function and method in the modules verl-split patches:
# what kind of object each is, where its code lives, and its verl `register` metadata.
FINGERPRINT = """
import importlib, inspect, json, re, sys
from verl_split.core import compat
from verl_split.seam_catalogue import SEAMS
FINGERPRINT_MODULES = sorted(m for m in sys.modules if m.startswith("verl_split"))  # what this snippet imports

def fingerprint():
    from verl.single_controller.base.decorator import MAGIC_ATTR
    out = {}
    def describe(obj):
        code = getattr(obj, "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code else None
        # Addresses inside the register metadata (dispatch functions) differ from process to process.
        attrs = re.sub(r" at 0x[0-9a-f]+", "", repr(getattr(obj, MAGIC_ATTR, None)))
        return [type(obj).__name__, where, attrs, id(obj)]
    for target in sorted({s.target for s in SEAMS if s.applies_to()}):
        module = importlib.import_module(target)
        for name, value in vars(module).items():
            if callable(value) and getattr(value, "__module__", None) == target:
                out[f"{target}:{name}"] = describe(value)
                if inspect.isclass(value):
                    for attr, member in vars(value).items():
                        if callable(member):
                            out[f"{target}:{name}.{attr}"] = describe(member)
    return out

from verl_split.plugin.wrapping import layers

def without_ids(fp):
    return {k: v[:3] for k, v in fp.items()}
"""


_RAY_TRAINER = "verl.trainer.ppo.ray_trainer:RayPPOTrainer."
_V1_TRAINER = "verl.trainer.ppo.v1.trainer_base:PPOTrainer."
_EVERY_FAMILY = {
    "verl.trainer.constants_ppo:get_ppo_ray_runtime_env",  # the runtime env: VERL_SPLIT* to every worker
    "verl.utils.device:auto_set_device",  # the placement check, in the launching process
    "verl.utils.tracking:Tracking.log",  # split/* metrics in verl's tracker
    "verl.utils.model:load_valuehead_model",  # the critic with the attention its config names
    # each worker group's rendezvous port outside the ephemeral range (verl 0.7.1+: master_port_range)
    "verl.single_controller.ray.base:RayWorkerGroup._get_master_addr_port",
} | {
    _RAY_TRAINER + m  # overlapped preparation and updates on RayPPOTrainer
    for m in ("_compute_old_log_prob", "_compute_ref_log_prob", "_compute_reward_colocate", "_compute_values")
    + ("_update_actor", "_update_critic")
    + ("fit", "_save_checkpoint")  # where a deferred critic update is joined
}
#: Placement before the v1 trainer: the TaskRunner is main_ppo's __main__, so RayPPOTrainer's constructor.
_BEFORE_V1 = {_RAY_TRAINER + "__init__"}
#: verl 0.7's legacy workers: the non-blocking dispatch and the legacy critic's update.
_LEGACY_WORKERS = {
    "verl.single_controller.ray.base:func_generator",
    "verl.workers.fsdp_workers:CriticWorker.update_critic",
    "verl.workers.megatron_workers:CriticWorker.update_critic",  # the 0.7 env has megatron-core (megatron-cpu)
}
#: Shared rollout on RayPPOTrainer (0.8+; off unless asked for: the wrappers then call verl straight).
_SHARED_ROLLOUT_V0 = {_RAY_TRAINER + "init_workers", _RAY_TRAINER + "_validate"} | {
    "verl.workers.rollout.llm_server:LLMServerManager.get_client",
    # the trainer's wait for generation, watched for a rollout server that dies or hangs
    "verl.experimental.agent_loop.agent_loop:AgentLoopManager.generate_sequences",
}
#: Exactly the functions and methods VERL_SPLIT=1 replaces, per verl release family (the review asked
#: for the exact set: a seam that patches too much or silently nothing shows here).
PATCHED: dict[str, set[str]] = {
    "0.7": _EVERY_FAMILY | _BEFORE_V1 | _LEGACY_WORKERS,
    "0.8": _EVERY_FAMILY | _BEFORE_V1 | _SHARED_ROLLOUT_V0,
    "0.9": _EVERY_FAMILY
    | _SHARED_ROLLOUT_V0
    | {"verl.trainer.main_ppo_v0:BaseTaskRunner.init_resource_pool_mgr"}
    | {"verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.sample"}  # v1's wait for generation, watched (shared rollout)
    | {
        _V1_TRAINER + m
        for m in ("_compute_old_log_prob", "_compute_ref_log_prob", "_compute_values", "_init_resource_pool_mgr")
        + ("_update_actor", "_update_critic")
        + ("_setup", "_validate")  # shared rollout (off unless asked for; the wrappers then call verl straight)
        + ("fit", "_save_checkpoint", "_compute_reward_colocate")  # where a deferred critic update is joined
        + ("prepare_step",)  # streamed values' lane (0.9.1+: 0.9.0 has no prepare_step)
    },
}


def stock_fingerprint():
    # verl with plugin loading switched off entirely: the reference for "stock".
    return run_json(
        FINGERPRINT + "import verl\nprint(json.dumps(without_ids(fingerprint())))",
        env={"VERL_USE_EXTERNAL_PLUGINS": "none"},
    )


@pytest.fixture(scope="module")
def stock():
    return stock_fingerprint()


def test_unset_means_stock_and_nothing_heavy_imported(stock):
    result = run_json(
        FINGERPRINT
        + """
import sys, verl
fp = without_ids(fingerprint())
mods = sorted(m for m in sys.modules if m.startswith("verl_split"))
print(json.dumps({"fp": fp, "modules": mods, "fingerprint": FINGERPRINT_MODULES}))
"""
    )
    assert result["fp"] == stock
    # FINGERPRINT itself imports verl_split.seam_catalogue (the registry, every seam table); everything else must
    # be the stdlib bootstrap.
    assert set(result["modules"]) - set(result["fingerprint"]) <= set(BOOTSTRAP_ONLY)
    assert "verl_split._startup" not in result["modules"]


def test_unset_imports_only_the_bootstrap():
    result = run_json(
        """
import json, sys, verl, verl.trainer.main_ppo, verl.workers.engine_workers
mods = sorted(m for m in sys.modules if m.startswith("verl_split"))
print(json.dumps({"modules": mods, "wrapt": "wrapt" in sys.modules}))
"""
    )
    assert result == {"modules": UNSET_MODULES, "wrapt": False}


#: One spelling of each kind in CI, each a fresh interpreter that imports verl (10-17 s); every spelling is read
#: by the one policy in core/settings.py, which tests/core/test_settings.py checks in-process.
SPELLED_ALSO = pytest.mark.extended(reason="every spelling: tests/core/test_settings.py; one per kind runs in CI")


#: An off value through ``import verl`` in CI: test_off_policy.py's VERL_SPLIT=0 with bad values beside it.
OFF_ALSO = pytest.mark.extended(reason="VERL_SPLIT=0 through import verl: tests/plugin/test_off_policy.py")


@pytest.mark.parametrize("value", [pytest.param("0", marks=OFF_ALSO), pytest.param("", marks=SPELLED_ALSO)])
def test_off_values_mean_stock(value, stock):
    fp = run_json(FINGERPRINT + "import verl\nprint(json.dumps(without_ids(fingerprint())))", env={"VERL_SPLIT": value})
    assert fp == stock


@pytest.mark.parametrize("value", ["1", pytest.param("YES", marks=SPELLED_ALSO)])
def test_set_patches_every_seam_when_verl_is_imported(value, stock):
    result = run_json(
        FINGERPRINT
        + """
import verl
from verl_split.plugin import activation
fp = without_ids(fingerprint())
print(json.dumps({"fp": fp, "applied": activation.applied_patches(), "pending": activation.pending_patches()}))
""",
        env={"VERL_SPLIT": value},
    )
    assert result["pending"] == []
    assert sorted(result["applied"]) == sorted(s.name for s in activation.seams_for(frozenset({"split"})))
    changed = {k for k in stock if result["fp"].get(k) != stock[k]}
    expected = PATCHED[FAMILY]
    if compat.installed_version() == "0.7.0":  # scores a reward model inside fit: no _compute_reward_colocate
        expected = expected - {_RAY_TRAINER + "_compute_reward_colocate"}
        expected = expected - {"verl.single_controller.ray.base:RayWorkerGroup._get_master_addr_port"}  # no range
    if not compat.verl_in(compat.STREAM_VALUES_V1):  # 0.9.0: no prepare_step, no streamed values
        expected = expected - {_V1_TRAINER + "prepare_step"}
    assert changed == expected, "VERL_SPLIT=1 changed other functions than the seams declare"
    assert set(result["fp"]) == set(stock), "VERL_SPLIT=1 added or removed names in verl's modules"


def test_patch_after_import_double_activation_and_unpatch(stock):
    result = run_json(
        FINGERPRINT
        + """
import verl
before = fingerprint()
from verl_split import seam_catalogue
from verl_split.plugin import activation
seam_catalogue.activate()
seam_catalogue.activate()                  # a second activation must wrap nothing twice
import importlib, verl_split._bootstrap
importlib.reload(verl_split._bootstrap)    # nor may a second run of the entry point
after = fingerprint()
changed = sorted(k for k in before if after[k] != before[k])
import importlib as il
def resolve(key):
    target, dotted = key.split(":")
    obj = il.import_module(target)
    for part in dotted.split("."):
        obj = vars(obj)[part]
    return obj
depth = {k: layers(resolve(k)) for k in changed}
applied = activation.applied_patches()
activation.deactivate()
now = fingerprint()
restored = without_ids(now)
same_objects = all(now[k][3] == before[k][3] for k in before)
seam_catalogue.activate()                  # and it can be switched on again
again = sorted(k for k, v in fingerprint().items() if v != before[k])
print(json.dumps({"changed": changed, "depth": depth, "applied": applied, "restored": restored,
                  "same_objects": same_objects, "again": again}))
""",
        env={"VERL_SPLIT": "0"},
    )
    assert result["changed"], "activation after import patched nothing"
    assert set(result["depth"].values()) == {1}, result["depth"]
    assert result["restored"] == stock
    assert result["same_objects"], "unpatch must restore the very objects verl had"
    assert result["again"] == result["changed"]


@pytest.mark.parametrize(
    "value", ["maybe", pytest.param("2", marks=SPELLED_ALSO), pytest.param("enable", marks=SPELLED_ALSO)]
)
def test_bad_value_is_a_clear_error(value):
    proc = run_python("import verl", env={"VERL_SPLIT": value})
    assert proc.returncode != 0
    assert f"VERL_SPLIT={value!r} is not an accepted value" in proc.stderr
    assert "1, true, yes, on" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_variable_is_a_clear_error():
    proc = run_python("import verl", env={"VERL_SPLIT": "1", "VERL_SPLIT_OVERLAPP": "0"})
    assert proc.returncode != 0
    assert "unknown variable VERL_SPLIT_OVERLAPP" in proc.stderr


@pytest.fixture
def fake_old_verl(tmp_path):
    """Distribution metadata claiming verl 0.5.0, found before the real one on sys.path.

    Only the *metadata* is faked; the real verl 0.9.1 code still imports, which is exactly
    the case the gate must catch: it reads the installed distribution's version.
    """
    dist = tmp_path / "verl-0.5.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.5.0\n")
    return str(tmp_path)


def test_unsupported_verl_stops_with_versions_named(fake_old_verl):
    proc = run_python("import verl", env={"VERL_SPLIT": "1", "PYTHONPATH": fake_old_verl})
    assert proc.returncode != 0
    assert f"verl 0.5.0 is installed, but verl-split supports verl {compat.supported_range_text()}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unsupported_verl_without_verl_split_runs_stock(fake_old_verl):
    proc = run_python("import verl; print('ok')", env={"PYTHONPATH": fake_old_verl})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok"


def test_the_registry_without_a_catalogue_is_a_clear_error():
    # plugin/activation never imports the seam tables (issue 28): whoever uses it first installs them.
    result = run_json(
        """
import json
from verl_split.plugin import activation
errors = []
for use in (activation.activate, activation.run_preflight, lambda: activation.require("shared_rollout")):
    try:
        use()
    except RuntimeError as exc:
        errors.append(str(exc))
print(json.dumps({"errors": errors, "active": activation.is_active()}))
""",
        env={"VERL_SPLIT": "0"},
    )
    assert len(result["errors"]) == 3 and not result["active"]
    assert all("verl_split.seam_catalogue.activate()" in error for error in result["errors"])


def test_a_catalogue_installs_once_and_needs_unique_names():
    seam_catalogue.install()
    seam_catalogue.install()  # the same seams again: nothing changes
    assert activation.catalogue() is seam_catalogue.SEAMS
    with pytest.raises(ValueError, match="unique"):
        activation.install([seam_catalogue.SEAMS[0], seam_catalogue.SEAMS[0]])
    assert activation.catalogue() is seam_catalogue.SEAMS
