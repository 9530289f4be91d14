"""Shared rollout in ``verl-split advise``: rollout replicas on the critic pool's GPUs too (issue 15).

With ``split_placement.shared_rollout`` (``VERL_SPLIT_SHARED_ROLLOUT=1``) the actor pool's hybrid rollout
replicas are joined by replicas on the critic pool, so every GPU generates. advise predicts it from what it
already knows, as the ``+shared`` variant of each split placement:

* generation on all A + C GPUs by the generation lane's own model, ``serial + parallel / (A + C)``
  (:mod:`verl_split.tools.advise.model`): the serial part, the long tail that bounds the phase however many
  replicas there are, does not shrink, so the saving against the same split is at most
  ``gen(A) x C / (A + C)``, reached only under linear scaling;
* plus the weight push to the critic pool's replicas after every actor update: measured
  (``split/shared_rollout_sync_s``) when a run has it, else ``--push-s``, else estimated from
  ``--model-params`` at an assumed bandwidth, else not known, and then the variant is not ranked;
* plus offloading the critic's training state for generation and reloading it after: ``--critic-offload-s``,
  else assumed 0 s (no metric measures it; verl's own ``critic.fsdp`` offload, when the runs had it on, is
  already in the critic's measured lanes).

The push runs in verl's ``update_weights`` after the update (``runtime/shared_rollout/both_pools.py``), before the next
generation; the reload before values: both are on the step's critical path, so both are added to the step.
None of this has been measured on GPUs by us.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.tools.advise.runs import PUSH_S, Run

#: The weights as the rollout receives them: bf16.
PUSH_BYTES_PER_PARAM = 2
#: Assumed effective bandwidth of the push from the actor pool to the critic pool's replicas (NCCL, often
#: across nodes); a guess to be replaced by a measurement or --push-s.
PUSH_GB_PER_S = 10.0
#: The tag of a shared-rollout variant after its placement's name.
TAG = "+shared"

MEASURED = "measured"
GIVEN = "given"
ASSUMED = "assumed"


@dataclass(frozen=True)
class SharedRolloutCosts:
    """What shared rollout adds to a step, and where each number comes from."""

    push_s: float | None  # None: not known, the variants are not ranked
    push_basis: str | None  # MEASURED, GIVEN, ASSUMED; None when not known
    push_source: str
    offload_s: float
    offload_basis: str  # GIVEN or ASSUMED
    offload_source: str

    @property
    def priced(self) -> bool:
        return self.push_s is not None

    @property
    def added_s(self) -> float:
        """Seconds added to the step: the push (0 when not known: a lower bound) and the offload."""
        return (self.push_s or 0.0) + self.offload_s

    def to_json(self) -> dict[str, Any]:
        return {
            "push_s": self.push_s,
            "push_basis": self.push_basis,
            "push_source": self.push_source,
            "critic_offload_s": self.offload_s,
            "critic_offload_basis": self.offload_basis,
            "critic_offload_source": self.offload_source,
            "measured_on_gpus": False,
        }


def shared_rollout_costs(
    runs: Sequence[Run],
    push_s: float | None = None,
    model_params: float | None = None,
    critic_offload_s: float | None = None,
) -> SharedRolloutCosts:
    """The push and offload costs: a number given on the command line, else measured, else assumed."""
    spreads = [run.push for run in runs if run.push is not None]
    steps = sum(spread.n for spread in spreads)
    measured = sum(spread.mean * spread.n for spread in spreads) / steps if steps else None  # over every step
    basis: str | None
    if push_s is not None:
        basis = GIVEN
        source = "given by --push-s" + (f" (the runs measured {measured:.2f} s)" if measured is not None else "")
    elif measured is not None:
        push_s, basis = measured, MEASURED
        files = ", ".join(run.path for run in runs if run.push is not None)
        source = f"measured: {PUSH_S}, mean over {steps} steps of {files}"
    elif model_params is not None:
        push_s, basis = model_params * PUSH_BYTES_PER_PARAM / (PUSH_GB_PER_S * 1e9), ASSUMED
        source = (
            f"assumed from --model-params: {model_params / 1e9:g}B parameters x {PUSH_BYTES_PER_PARAM} bytes at "
            f"{PUSH_GB_PER_S:g} GB/s; a run's {PUSH_S}, or --push-s, replaces it"
        )
    else:
        basis = None
        source = f"not known: no run logged {PUSH_S}; pass --push-s, or --model-params to estimate it"
    if critic_offload_s is not None:
        offload, offload_basis, offload_source = critic_offload_s, GIVEN, "given by --critic-offload-s"
    else:
        offload, offload_basis = 0.0, ASSUMED
        offload_source = "assumed 0 s: no metric measures it; pass --critic-offload-s"
    return SharedRolloutCosts(push_s, basis, source, offload, offload_basis, offload_source)
