"""The switches' variants of a split in ``verl-split advise``: the ``+shared``, ``+defer`` and ``+shared+defer`` rows.

Each is a split placement with one of verl-split's switches on, or both: shared rollout, the deferred critic update,
both together. :mod:`verl_split.tools.advise.model` composes each variant's step from the lanes and the terms here,
what the variant adds to the step, hides or waits for. The choice among the three, which reads ranked candidates,
sits above ``candidates`` (:func:`verl_split.tools.advise.reasons.choose`), so the imports run one way. None of
this has been measured on GPUs by us.

**Shared rollout, ``+shared``** (``split_placement.shared_rollout``, ``VERL_SPLIT_SHARED_ROLLOUT=1``, issue 15):
the actor pool's hybrid rollout replicas are joined by replicas on the critic pool, so every GPU generates. advise
predicts it from what it already knows:

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

The push runs in verl's ``update_weights`` after the update (``runtime/shared_rollout/both_pools.py``), before the
next generation; the reload before values: both are on the step's critical path, so both are added to the step.

**The deferred critic update, ``+defer``** (``defer_critic`` in ``VERL_SPLIT_OVERLAP``, issue 22). Under split
placement nothing of step k+1 before its ``values`` needs the critic: generation needs only the actor and its
weight sync. With the deferral the critic's update of step k is dispatched beside the actor's update and left
running while the actor pool updates, syncs the weights and generates step k+1; it is joined at step k+1's first
critic call, ``values`` (with the preparation overlap, values starts at old_log_prob's entry). So, for a split of
A actor GPUs and C critic GPUs::

    updates = T_ua(A)                                           (was max(T_ua(A), T_uc(C)))
    excess  = max(0, T_uc(C) - (T_ua(A) + T_sync + T_gen(A)))   the part of the critic's update that does not hide
    prep    = max(T_old+ref(A), excess + T_val(C))              with the preparation overlap
            = max(T_old+ref(A), excess) + T_val(C)              without it (values waits after old_log_prob + ref)

``T_sync`` is verl's weight sync (``timing_s/update_weights``, 0.8 and later; earlier releases sync inside
generation, which then covers it). Other work between the update and values (reward, balancing) is not counted
as cover: the model errs towards less hiding.

**Both, ``+shared+defer``.** Deferral and shared rollout both want the critic pool during generation. With
``VERL_SPLIT_SHARED_ROLLOUT=1`` and ``defer_critic`` in ``VERL_SPLIT_OVERLAP`` (the default) the critic pool joins
generation late (``runtime/shared_rollout/late_join.py``): after the actor's update of step k the actor pool's
replicas take the weights at once and step k+1's generation starts on them, while the critic pool runs the rest of
its update; then its replicas wake, take the weights pushed to them and the requests still queued. For a split of
A actor GPUs and C critic GPUs, times from generation's start::

    updates = T_ua(A)
    e       = max(0, T_uc(C) - T_ua(A))           the critic's excess: it runs on after the actor's update
    j       = max(0, e - T_sync) + T_push          the critic pool opens (the hybrid sync T_sync covers e first)
    gen     = T_gen(A)                             if T_gen(A) <= j: the critic pool never joins, and
    wait    = max(0, e - T_sync - T_gen(A))          what is left of its update is waited for before values
    gen     = j + (1 - j / T_gen(A)) x T_gen(A+C)  else: the rest of the work at both pools' rate
    step    = gen + prep(wait) + updates + fixed [+ the critic's offload and reload, when it joined]

The rates are the shared-rollout model's (above): N requests take T_gen(A) on the actor pool and T_gen(A+C) on
both, so the critic pool's own rate is N/T_gen(A+C) - N/T_gen(A) and by ``j`` the actor pool alone has done
``j / T_gen(A)`` of the work. The push is off the step's path (the critic pool does it while the actor pool
generates); the offload and reload are counted as ``+shared`` counts them, on the path, when the critic pool joins.
Where the critic's update is no longer than the actor's (``e = 0``) nothing runs on at the sync: verl-split pushes
and opens the critic pool before generation, as ``+shared`` alone, so no such row is made. Not modelled: the
actor-pool servers' caps while the critic pool is awaited (the balancer leaves it a share queued), and the push's
load on the actor pool's GPUs while they generate. Run on CPU only, never on GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from verl_split.tools.advise.runs import PUSH_S, SYNC_S, Run

#: The tag of each variant after its placement's name.
SHARED_TAG = "+shared"
DEFER_TAG = "+defer"
BOTH_TAG = "+shared+defer"
#: The phase that switches the deferral on, and the ``VERL_SPLIT_OVERLAP`` value that runs it.
DEFER_PHASE = "defer_critic"
DEFER_OVERLAP = "updates,prep,defer_critic"

# -- shared rollout: +shared -----------------------------------------------------------------------
#: The weights as the rollout receives them: bf16.
PUSH_BYTES_PER_PARAM = 2
#: Assumed effective bandwidth of the push from the actor pool to the critic pool's replicas (NCCL, often
#: across nodes); a guess to be replaced by a measurement or --push-s.
PUSH_GB_PER_S = 10.0

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


# -- the deferred critic update: +defer ------------------------------------------------------------
@dataclass(frozen=True)
class DeferralCosts:
    """What the model needs beyond the lanes: the weight sync the deferred update hides behind, and its source."""

    sync_s: float
    sync_source: str

    def to_json(self) -> dict[str, Any]:
        return {"sync_s": self.sync_s, "sync_source": self.sync_source}


@dataclass(frozen=True)
class DeferredCritic:
    """One layout's deferred critic update: what covers it, what hides, what stays on the step's path."""

    critic_update_s: float
    window_s: float  # T_ua + T_sync + T_gen: the actor pool's work the update runs beside
    excess_s: float  # waited for before values
    hidden_s: float  # the part after the actor's update, behind the sync and the next generation

    def to_json(self) -> dict[str, float]:
        return {
            "critic_update_s": self.critic_update_s,
            "window_s": self.window_s,
            "excess_s": self.excess_s,
            "hidden_s": self.hidden_s,
        }


def deferral_costs(runs: Sequence[Run]) -> DeferralCosts:
    """The weight sync: the runs' ``timing_s/update_weights`` (less any shared-rollout push), mean over steps."""
    spreads = [run.sync for run in runs if run.sync is not None]
    steps = sum(spread.n for spread in spreads)
    if not steps:
        return DeferralCosts(
            0.0, f"no run logged {SYNC_S}; verl before 0.8 syncs the weights inside generation, which covers it"
        )
    mean = sum(spread.mean * spread.n for spread in spreads) / steps
    return DeferralCosts(mean, f"{SYNC_S}, mean over {steps} steps")


def defer(
    actor_update: float,
    critic_update: float,
    gen: float,
    sync: float,
    actor_prep: float,
    critic_prep: float,
    prep: bool,
) -> tuple[float, float, DeferredCritic]:
    """(preparation, updates, the deferred update's parts) of one split step with the critic's update deferred."""
    window = actor_update + sync + gen
    excess = max(0.0, critic_update - window)
    hidden = min(max(critic_update - actor_update, 0.0), sync + gen)
    preparation = max(actor_prep, excess + critic_prep) if prep else max(actor_prep, excess) + critic_prep
    return preparation, actor_update, DeferredCritic(critic_update, window, excess, hidden)


# -- both: +shared+defer, the critic pool joining generation late ----------------------------------
#: Seconds below which a bisection of the break-even push stops.
_TOLERANCE_S = 1e-6


@dataclass(frozen=True)
class LateJoinStep:
    """One split's step with both switches on, the critic pool joining generation late: the inputs, and the
    schedule they give (module docstring)."""

    actor_update_s: float
    critic_update_s: float
    gen_alone_s: float  # T_gen(A): the actor pool alone
    gen_both_s: float  # T_gen(A+C): both pools from the start
    sync_s: float  # verl's weight sync of the actor pool's replicas, before generation starts
    push_s: float  # the push to the critic pool's replicas (0 when not known: the step is then a lower bound)
    offload_s: float  # the critic's offload and reload around generation, when it joins
    actor_prep_s: float
    critic_prep_s: float
    prep_overlap: bool
    fixed_s: float

    @property
    def excess_s(self) -> float:
        """The critic's update beyond the actor's: it runs on after the actor's update."""
        return max(0.0, self.critic_update_s - self.actor_update_s)

    @property
    def join_s(self) -> float:
        """When the critic pool would open, seconds after generation's start."""
        return max(0.0, self.excess_s - self.sync_s) + self.push_s

    @property
    def joined(self) -> bool:
        return self.gen_alone_s > self.join_s

    @property
    def gen_s(self) -> float:
        if not self.joined:
            return self.gen_alone_s
        j = self.join_s
        return j + (1.0 - j / self.gen_alone_s) * self.gen_both_s

    @property
    def wait_s(self) -> float:
        """What is left of the critic's update when generation ends, waited for before values."""
        return 0.0 if self.joined else max(0.0, self.excess_s - self.sync_s - self.gen_alone_s)

    @property
    def hidden_s(self) -> float:
        """The part of the critic's update behind the weight sync and the actor pool's generation."""
        return self.excess_s - self.wait_s

    @property
    def saved_s(self) -> float:
        """Generation's time saved against the actor pool alone."""
        return self.gen_alone_s - self.gen_s

    @property
    def critic_pool_share(self) -> float:
        """The share of the step's requests the critic pool generates (split/critic_pool_rollout_share)."""
        if not self.joined or self.gen_both_s <= 0:
            return 0.0
        return (self.gen_s - self.join_s) * (1.0 / self.gen_both_s - 1.0 / self.gen_alone_s)

    @property
    def prep_s(self) -> float:
        a, c, wait = self.actor_prep_s, self.critic_prep_s, self.wait_s
        return max(a, wait + c) if self.prep_overlap else max(a, wait) + c

    @property
    def added_s(self) -> float:
        """What shared rollout adds to the step's path: the offload and reload, when the critic pool joins."""
        return self.offload_s if self.joined else 0.0

    @property
    def step_s(self) -> float:
        return self.gen_s + self.prep_s + self.actor_update_s + self.fixed_s + self.added_s

    def with_push(self, push_s: float) -> LateJoinStep:
        return replace(self, push_s=push_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "critic_excess_s": self.excess_s,
            "join_s": self.join_s if self.joined else None,
            "critic_pool_joins": self.joined,
            "gen_actor_pool_alone_s": self.gen_alone_s,
            "gen_both_pools_s": self.gen_both_s,
            "gen_s": self.gen_s,
            "generation_saved_s": self.saved_s,
            "critic_pool_rollout_share": self.critic_pool_share,
            "critic_update_hidden_s": self.hidden_s,
            "critic_join_wait_s": self.wait_s,
            "push_s": self.push_s,
            "push_on_the_step_path": False,
        }


def break_even_push(late: LateJoinStep, target_s: float) -> float:
    """The push under which this step beats ``target_s`` (<= 0: not even with a free push).

    The step grows with the push while the critic pool still joins; once it would not (the push past
    ``T_gen(A)``) the step is the ``+defer`` row's, which the target is never slower than.
    """
    free = late.with_push(0.0)
    if free.step_s >= target_s:
        return target_s - free.step_s
    low, high = 0.0, max(late.gen_alone_s, _TOLERANCE_S)
    while high - low > _TOLERANCE_S:
        mid = (low + high) / 2
        if late.with_push(mid).step_s < target_s:
            low = mid
        else:
            high = mid
    return low


def describe(late: LateJoinStep, actor_gpus: int, critic_gpus: int) -> str:
    """Why the combination wins, in the model's terms: the critic's excess hides behind the actor pool's
    generation, and the critic pool generates for the rest of it."""
    hides = (
        f"the critic's update runs {late.excess_s:.2f} s past the actor's and hides behind the weight sync and the "
        f"actor pool's generation ({late.wait_s:.2f} s left to wait before values)"
    )
    if not late.joined:
        return (
            f"{hides}; generation ({late.gen_alone_s:.2f} s on the actor pool's {actor_gpus} GPUs) ends before the "
            f"critic pool could join at {late.join_s:.2f} s, so shared rollout adds nothing here"
        )
    return (
        f"{hides}, then the critic pool's {critic_gpus} GPUs join {late.join_s:.2f} s into generation (with a "
        f"weight push of {late.push_s:.2f} s, off the step's path) and generate about "
        f"{100 * late.critic_pool_share:.0f} % of it: generation takes {late.gen_s:.2f} s instead of "
        f"{late.gen_alone_s:.2f} s on the actor pool alone ({late.gen_both_s:.2f} s if both pools generated from "
        f"the start), for a critic offload and reload of {late.offload_s:.2f} s"
    )
