"""The CPU-mode seams (VERL_SPLIT_CPU=1), each check in a fresh interpreter."""

from __future__ import annotations

from families import needs_cpu_dry_run
from pyrun import run_json

pytestmark = needs_cpu_dry_run

CPU_SEAMS = [
    "cpu_platform",
    "cpu_distributed",
    "cpu_fsdp",
    "cpu_valuehead",
    "cpu_rollout_worker",
    "cpu_rollout_replica",
]

# Imports every target of the cpu seams and reports what verl now sees.
STATE = """
import json, os
import verl.utils.distributed as dist
import verl.utils.model as model
import verl.workers.engine.fsdp.transformer_impl as impl
import verl.workers.rollout.base as base
import verl.workers.rollout.replica as replica
from verl.plugin.platform import PlatformRegistry
from verl_split import _wrapping, activation

def state():
    wrapped = {
        "initialize_global_process_group_ray": _wrapping.is_wrapped(dist, "initialize_global_process_group_ray"),
        "load_valuehead_model": _wrapping.is_wrapped(model, "load_valuehead_model"),
        "CPUOffloadPolicy": _wrapping.is_wrapped(impl, "CPUOffloadPolicy"),
    }
    return {
        "wrapped": wrapped,
        "platform": "cpu" in PlatformRegistry.registered_names(),
        "worker_rollout": base._ROLLOUT_REGISTRY.get(("cpu_hf", "async")),
        "replica": "cpu_hf" in replica.RolloutReplicaRegistry._registry,
        "applied": activation.applied_patches(),
        "env": {k: os.environ.get(k) for k in ("VERL_PLATFORM", "VERL_ENGINE_DEVICE")},
    }
"""


def test_cpu_mode_registers_platform_rollout_and_wrappers():
    out = run_json(
        STATE
        + """
from verl.plugin.platform import get_platform
from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device
import verl.workers.rollout.replica as replica
s = state()
s["device"] = [get_device_name(), get_nccl_backend(), get_torch_device().__name__, get_platform().current_device()]
s["replica_cls"] = replica.RolloutReplicaRegistry.get("cpu_hf").__name__
print(json.dumps(s))
""",
        env={"VERL_SPLIT_CPU": "1"},
    )
    assert out["platform"] and out["replica"]
    assert all(out["wrapped"].values()), out["wrapped"]
    assert out["worker_rollout"] == "verl_split.cpu.rollout.CPURolloutAdapter"
    assert out["replica_cls"] == "CPURolloutReplica"
    assert set(CPU_SEAMS) <= set(out["applied"])
    # VERL_SPLIT_CPU=1 alone selects the platform: the seam defaults what the run needs.
    assert out["env"] == {"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda"}
    assert out["device"] == ["cpu", "gloo", "verl_split.cpu.device", "cpu"]


def test_cpu_mode_off_changes_nothing():
    out = run_json(STATE + "print(json.dumps(state()))", env={})
    assert not any(out["wrapped"].values())
    assert not out["platform"] and not out["replica"] and out["worker_rollout"] is None
    assert out["applied"] == []


def test_cpu_seams_idempotent_and_reversible():
    out = run_json(
        STATE
        + """
from verl_split import activation
first = state()
activation.activate(split=False, cpu=True)  # a second activation wraps nothing twice
def layers(obj):
    n = 0
    while getattr(obj, "_self_verl_split", False):
        n, obj = n + 1, obj.__wrapped__
    return n
depth = [layers(dist.initialize_global_process_group_ray), layers(model.load_valuehead_model),
         layers(impl.CPUOffloadPolicy)]
activation.deactivate()
after = state()
print(json.dumps({"first": first, "depth": depth, "after": after}))
""",
        env={"VERL_SPLIT_CPU": "1"},
    )
    assert all(out["first"]["wrapped"].values())
    assert out["depth"] == [1, 1, 1]
    after = out["after"]
    assert not any(after["wrapped"].values())
    assert not after["platform"] and not after["replica"] and after["worker_rollout"] is None


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
