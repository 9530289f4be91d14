"""The CPU-mode seams (VERL_SPLIT_CPU=1) of the installed verl family, each check in a fresh interpreter.

verl 0.9 gets a platform in its registry; 0.7 and 0.8 have none, so their seams hand
verl the CPU device module and engine entries directly, and 0.7's legacy FSDP workers
start their process group with gloo. Both end in the same place, checked here: verl
sees a ``cpu`` device, a device module with the memory and RNG calls, gloo, and the
``cpu_hf`` rollout in both of its registries.
"""

from __future__ import annotations

import pytest
from support.families import FAMILY, extended_on
from support.pyrun import run_json

from verl_split import seam_catalogue
from verl_split.plugin import activation

pytestmark = pytest.mark.subprocess

seam_catalogue.install()  # the registry's catalogue in this process, as the bootstrap installs it in a run

#: The installed release's CPU seams (a family's releases can differ: cpu_file_logger is 0.7.0's only).
CPU_SEAMS = [s.name for s in activation.seams_for(frozenset({"cpu"}))]

#: (module, attribute) verl-split wraps in CPU mode on this family.
WRAPPED = [
    ("verl.utils.distributed", "initialize_global_process_group_ray"),
    ("verl.utils.model", "load_valuehead_model"),
    ("verl.workers.engine.fsdp.transformer_impl", "CPUOffloadPolicy"),
]
if FAMILY not in ("0.7", "0.8"):
    # v1's replay buffer polls every 0.05 s in CPU mode (runtime/cpu/trainer_hooks.py).
    WRAPPED += [("verl.trainer.ppo.v1.replay_buffer.ReplayBuffer", "__init__")]
if FAMILY in ("0.7", "0.8"):
    WRAPPED += [
        ("verl.utils.device", "get_torch_device"),
        ("verl.protocol", "get_torch_device"),  # bound by name while `import verl` ran, before verl-split loaded
        ("verl.utils.attention_utils", "_get_attention_functions"),
    ]
if FAMILY == "0.7":
    WRAPPED += [
        ("verl.workers.fsdp_workers.ActorRolloutRefWorker", "__init__"),
        ("verl.workers.fsdp_workers.CriticWorker", "__init__"),
        ("verl.workers.fsdp_workers", "CPUOffloadPolicy"),
    ]

# Imports every wrapped target and reports what verl now sees.
STATE = f"""
import importlib, json, os
import verl.workers.rollout.base as base
import verl.workers.rollout.replica as replica
import verl.workers.engine.base as engine_base
import verl.trainer.constants_ppo  # target of cpu_runtime_env
from verl_split import seam_catalogue
from verl_split.plugin import activation, wrapping

WRAPPED = {WRAPPED!r}

def owner(path):
    try:
        return importlib.import_module(path)
    except ImportError:  # a class: module path, then the class name
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)

def platform_registered():
    try:
        from verl.plugin.platform import PlatformRegistry
    except ImportError:  # verl 0.7/0.8: no platform registry
        return None
    return "cpu" in PlatformRegistry.registered_names()

def state():
    import verl.utils.tracking  # noqa: F401  (the trainer imports it; cpu_file_logger applies then)
    import verl.workers.engine.fsdp.transformer_impl  # registers the FSDP engines
    engines = engine_base.EngineRegistry._engines
    return {{
        "wrapped": {{f"{{path}}.{{attr}}": wrapping.is_wrapped(owner(path), attr) for path, attr in WRAPPED}},
        "platform": platform_registered(),
        "cpu_engines": sorted(f"{{t}}/{{b}}" for t in engines for b in engines[t] if "cpu" in engines[t][b]),
        "worker_rollout": base._ROLLOUT_REGISTRY.get(("cpu_hf", "async")),
        "replica": "cpu_hf" in replica.RolloutReplicaRegistry._registry,
        "applied": activation.applied_patches(),
    }}
"""


def test_cpu_mode_gives_verl_a_cpu_device_gloo_and_the_cpu_rollout():
    out = run_json(
        STATE
        + """
import torch
from verl.utils.device import get_device_name, get_torch_device
from verl.protocol import get_torch_device as protocol_get_torch_device
s = state()
device = get_torch_device()
free, total = device.mem_get_info()
device.manual_seed(3)
state_before = device.get_rng_state()
s["device"] = {
    "name": get_device_name(),
    "module": device.__name__,
    "bound_early": protocol_get_torch_device().__name__,
    "memory": [0 < free <= total, device.memory_allocated()],
    "rng_restored": bool(torch.equal(state_before, torch.get_rng_state())),
}
s["replica_cls"] = replica.RolloutReplicaRegistry.get("cpu_hf").__name__
print(json.dumps(s))
""",
        env={"VERL_SPLIT_CPU": "1"},
    )
    assert all(out["wrapped"].values()), out["wrapped"]
    assert out["worker_rollout"] == "verl_split.runtime.cpu.rollout.CPURolloutAdapter"
    assert out["replica"] and out["replica_cls"] == "CPURolloutReplica"
    assert set(CPU_SEAMS) <= set(out["applied"]), out["applied"]
    assert out["device"] == {
        "name": "cpu",
        "module": "verl_split.runtime.cpu.device",
        "bound_early": "verl_split.runtime.cpu.device",
        "memory": [True, 0],
        "rng_restored": True,
    }
    if FAMILY == "0.9":
        assert out["platform"] is True
    else:
        # FSDP engines are found for the cpu device (0.9 does this with VERL_ENGINE_DEVICE).
        assert {"language_model/fsdp2", "value_model/fsdp2"} <= set(out["cpu_engines"]), out["cpu_engines"]


def test_cpu_mode_off_changes_nothing():
    out = run_json(STATE + "print(json.dumps(state()))", env={})
    assert not any(out["wrapped"].values())
    assert not out["platform"] and not out["replica"] and out["worker_rollout"] is None
    assert out["cpu_engines"] == []
    assert out["applied"] == []


@extended_on(("0.7",), "the wrapping's idempotence and unpatching are verl-split's own code: in CI on 0.9")
def test_cpu_seams_idempotent_and_reversible():
    out = run_json(
        STATE
        + """
first = state()
seam_catalogue.activate(split=False, cpu=True)  # a second activation wraps nothing twice
from verl_split.plugin.wrapping import layers
depth = [layers(vars(owner(path))[attr]) for path, attr in WRAPPED]
activation.deactivate()
print(json.dumps({"first": first, "depth": depth, "after": state()}))
""",
        env={"VERL_SPLIT_CPU": "1"},
    )
    assert all(out["first"]["wrapped"].values())
    assert out["depth"] == [1] * len(WRAPPED)
    after = out["after"]
    assert not any(after["wrapped"].values()), after["wrapped"]
    assert not after["platform"] and not after["replica"] and after["worker_rollout"] is None
    assert after["cpu_engines"] == []


def test_gloo_backend_and_unpinned_offload_on_cpu():
    out = run_json(
        """
import json, os
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
import torch.distributed as torch_dist
from verl.utils.distributed import initialize_global_process_group_ray
from verl.workers.engine.fsdp import transformer_impl
initialize_global_process_group_ray(timeout_second=None)
backend = torch_dist.get_backend()
torch_dist.destroy_process_group()
print(json.dumps({"backend": backend, "pin": transformer_impl.CPUOffloadPolicy(pin_memory=True).pin_memory}))
""",
        env={"VERL_SPLIT_CPU": "1"},
    )
    assert out == {"backend": "gloo", "pin": False}
