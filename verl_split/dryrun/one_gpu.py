"""The demo on one CUDA GPU (``verl-split demo --device cuda``): the dry run's job, two logical GPUs on one device.

For anyone with one GPU and no vLLM or flash-attn build for their CUDA: the CPU dry run's job (the recipe's
overrides, the Hugging Face rollout) with the tiny model's ``gpu`` shape, in bf16 mixed precision with sdpa
attention, on CUDA. Split placement needs two pools, so Ray is told of two logical GPUs and every process of the
job is shown the same physical one: the job's runtime_env sets ``CUDA_VISIBLE_DEVICES`` to it, and Ray (2.60+)
maps the second pool's GPU slot, past that one-entry list, onto the list itself
(``Worker.get_accelerator_ids_for_accelerator_resource`` in ``ray/_private/worker.py``; 2.59 and older index
past its end and the worker dies). Each pool has one rank, so NCCL never sees two ranks of one communicator on one
device, which it refuses; stock verl's one pool of two ranks would be, so stock runs on one logical GPU.
The two pools time-share the device: the run shows that verl-split's runtime works on CUDA, not what two GPUs
gain. ``check`` refuses, before anything is started, what cannot run.

A rehearsal (``verl-split demo --device cuda --rehearse``) runs the same job on the CPU, its device aside: the
model's shape, bf16, the two logical GPUs Ray maps onto one ``CUDA_VISIBLE_DEVICES``, stock on one of them; for
a machine without a GPU, before the GPU run (``scripts/gpu_run.sh`` rehearses so).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.version import Version

from verl_split.core import compat
from verl_split.core.errors import VerlSplitError
from verl_split.placement.memory import CONTEXT_GB_PER_PROCESS
from verl_split.placement.train_state import GIB

#: Logical GPUs Ray is told of: one per pool (the stock run uses one of them).
LOGICAL_GPUS = 2
#: The first Ray whose worker maps a GPU slot past a runtime_env's shorter CUDA_VISIBLE_DEVICES onto that list
#: (checked against each release's ``ray/_private/worker.py``, 2.50.0 to 2.60.0: 2.59.0 and older index past it).
MIN_RAY = Version("2.60.0")
#: The processes on the device at once in the split runs: the actor's worker, the critic's, the rollout server.
PROCESSES_ON_DEVICE = 3
#: The tiny models' training state and activations, with room to spare (1.2M parameters each: ~20 MB of state).
STATES_GB = 0.25
#: What the job needs free on the device, in GiB: each process's CUDA context and NCCL (the memory check's
#: allowance, measured on an H200: ``placement/memory.py``) and the states.
NEED_GB = PROCESSES_ON_DEVICE * CONTEXT_GB_PER_PROCESS + STATES_GB
#: FSDP's mixed precision on GPUs, verl's default (``FSDPEngine._build_fsdp_module``): bf16 compute under autocast,
#: fp32 reductions and buffers. The CPU dry run keeps fp32 end to end.
MIXED_PRECISION = {"param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
#: The CPU dry run's overrides that the one-GPU job replaces (the recipe's key -> this job's value).
REPLACED = {
    "trainer.device": "cuda",
    "actor_rollout_ref.rollout.dtype": "bfloat16",  # the rollout generates as the actor computes: bf16
    "+ray_kwargs.ray_init.num_gpus": str(LOGICAL_GPUS),
}
#: The CPU dry run's overrides the one-GPU job drops: the ``cpu`` resource verl < 0.9 asks Ray for per worker.
DROPPED = ("+ray_kwargs.ray_init.resources=",)


@dataclass(frozen=True)
class Device:
    """The GPU the demo runs on, as the checks found it."""

    visible_id: str  # what CUDA_VISIBLE_DEVICES names it by: the user's first visible GPU, else "0"
    name: str
    free_gb: float
    total_gb: float
    cuda: bool = True  # False: a rehearsal, on the CPU

    def describe(self) -> str:
        if not self.cuda:
            return f"a rehearsal on the CPU (the job shown GPU {self.visible_id}, trained on the host)"
        return f"GPU {self.visible_id} ({self.name}, {self.free_gb:.1f} of {self.total_gb:.1f} GiB free)"

    def layout(self) -> str:
        """The console's line on where the runs are: the pools time-share one device."""
        pools = "stock verl on one logical GPU, split placement's two pools as two logical GPUs, one each"
        if not self.cuda:
            return (
                f"{self.describe()}: {pools}; Ray maps both onto CUDA_VISIBLE_DEVICES={self.visible_id}. It checks "
                "the one-GPU job's set-up (model, bf16, the two logical GPUs on one device), nothing of CUDA"
            )
        return (
            f"{self.describe()}: {pools}, all on this GPU: the pools time-share one device, so this shows that "
            "verl-split's runtime works on CUDA, not what two GPUs gain"
        )


def rehearsal(environ: Mapping[str, str] | None = None) -> Device:
    """The device of a rehearsal: the one-GPU job on the CPU; only Ray's version is checked (``check_ray``)."""
    check_ray()
    return Device(visible_id(os.environ if environ is None else environ), "cpu", 0.0, 0.0, cuda=False)


def visible_id(environ: Mapping[str, str]) -> str:
    """The physical GPU the job runs on: the first the user's ``CUDA_VISIBLE_DEVICES`` names, else 0."""
    first = environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return first or "0"


def overrides(cpu_overrides: list[str], gpus: int, device: Device) -> list[str]:
    """The dry run's overrides (``recipe.dry_run_overrides``, written for ``LOGICAL_GPUS``) for ``gpus`` logical
    GPUs of one physical ``device``: CUDA, bf16 mixed precision, every process shown that one device."""
    out = []
    for override in cpu_overrides:
        key, _, value = override.partition("=")
        if override.startswith(DROPPED):
            continue
        if key == "trainer.device" and not device.cuda:
            pass  # a rehearsal trains on the CPU
        elif key in REPLACED:
            value = REPLACED[key]
        elif key == "trainer.n_gpus_per_node":
            value = str(gpus)
        elif ".mixed_precision." in key:
            value = MIXED_PRECISION[key.rpartition(".")[2]]
        out.append(f"{key}={value}")
    return [*out, f"+ray_kwargs.ray_init.runtime_env.env_vars.CUDA_VISIBLE_DEVICES='{device.visible_id}'"]


def environment(env: Mapping[str, str], device: Device) -> dict[str, str]:
    """A run's environment (``recipe.run_environment``'s) for the one-GPU job.

    verl's CUDA platform (``VERL_PLATFORM=nvidia``; CPU mode, which the rollout needs, would default it to
    ``cpu``). No ``CUDA_VISIBLE_DEVICES`` for the launching process and its raylet: with one GPU visible there,
    Ray would refuse the two it is told of; the workers get theirs from the job's runtime_env (``overrides``).
    A rehearsal keeps CPU mode's platform.
    """
    out = {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}
    if device.cuda:
        out["VERL_PLATFORM"] = "nvidia"
    return out


def check(environ: Mapping[str, str] | None = None, family: str | None = None) -> Device:
    """The GPU to run on, or a VerlSplitError saying why the one-GPU demo cannot run here and what to do."""
    environ = os.environ if environ is None else environ
    import torch

    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        shown = environ.get("CUDA_VISIBLE_DEVICES")
        where = f", CUDA_VISIBLE_DEVICES={shown!r}" if shown is not None else ""
        raise VerlSplitError(
            f"--device cuda: torch {torch.__version__} ({build}{where}) sees no CUDA GPU here; "
            "leave --device out for the CPU demo"
        )
    family = family or compat.check_supported()
    if not compat.family_in(family, compat.PLATFORM_REGISTRY):
        raise VerlSplitError(
            f"--device cuda: the one-GPU demo runs verl's CUDA platform beside the CPU dry run's rollout, through "
            f"verl 0.9's platform registry (VERL_PLATFORM), and is checked on verl 0.9 only; verl {family} has "
            "none: install verl 0.9.x, or leave --device out for the CPU demo"
        )
    check_ray()
    device = probe(visible_id(environ))
    if device.free_gb < NEED_GB:
        raise VerlSplitError(
            f"--device cuda: {device.describe()} is too small for the one-GPU demo: it needs about {NEED_GB:.2f} GiB "
            f"free ({PROCESSES_ON_DEVICE} processes x {CONTEXT_GB_PER_PROCESS} GiB for CUDA and NCCL, "
            f"{STATES_GB} GiB for the tiny models); free that much, or pick another GPU with CUDA_VISIBLE_DEVICES"
        )
    return device


def check_ray(version: str | None = None) -> None:
    """Refuse a Ray that cannot put two logical GPUs on one device (``MIN_RAY``)."""
    if version is None:
        from importlib.metadata import version as installed

        version = installed("ray")
    if Version(version) < MIN_RAY:
        raise VerlSplitError(
            f"--device cuda: Ray {version} cannot put two logical GPUs on one device (its worker indexes a GPU slot "
            f"past the one CUDA_VISIBLE_DEVICES the job shows it, and dies); the one-GPU demo needs Ray >= {MIN_RAY}: "
            f"pip install 'ray>={MIN_RAY}'"
        )


#: Run in a child process: a CUDA context made here would hold ~0.5 GiB of the device while the runs train.
_PROBE = (
    "import torch; free, total = torch.cuda.mem_get_info(0); "
    "print(free, total, torch.cuda.get_device_name(0), sep='\\t')"
)


def probe(device: str, timeout_s: float = 60) -> Device:
    """Free and total memory and the name of GPU ``device``, read by a child process that sees only it."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": device}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=timeout_s, check=True
        )
        free, total, name = done.stdout.strip().split("\t")
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise VerlSplitError(
            f"--device cuda: could not read GPU {device}'s memory ({detail.strip().splitlines()[-1:] or exc}); "
            "check that CUDA_VISIBLE_DEVICES names a GPU torch can use"
        ) from None
    return Device(device, name, int(free) / GIB, int(total) / GIB)
