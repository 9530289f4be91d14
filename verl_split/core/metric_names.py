"""Every ``split/*`` metric verl-split adds to verl's tracker, named once.

The runtime writes them (``runtime/overlap``, ``runtime/metrics``, ``runtime/shared_rollout``); the
demo's report and ``advise`` read them back from a run's log. docs/how-it-works.md's metric table says
what each means. Standard library only.
"""

from __future__ import annotations

PREFIX = "split/"

# The update phase (runtime/overlap/updates.py).
CRITIC_UPDATE_S = "split/critic_update_s"
ACTOR_UPDATE_S = "split/actor_update_s"
UPDATE_WALL_S = "split/update_wall_s"
OVERLAP_S = "split/overlap_s"
SPEEDUP = "split/speedup"
IDEAL_SPEEDUP = "split/ideal_speedup"
ACTOR_POOL_IDLE_SHARE = "split/actor_pool_idle_share"
CRITIC_POOL_IDLE_SHARE = "split/critic_pool_idle_share"
DISPATCH_S = "split/dispatch_s"
OVERLAPPED = "split/overlapped"

# The critic's update deferred into the next step (runtime/overlap/deferral.py).
CRITIC_UPDATE_DEFERRED = "split/critic_update_deferred"
CRITIC_UPDATE_HIDDEN_S = "split/critic_update_hidden_s"
CRITIC_JOIN_WAIT_S = "split/critic_join_wait_s"
LOG_DELAY_S = "split/log_delay_s"
CRITIC_METRICS_MISSING = "split/critic_metrics_missing"

# The preparation (runtime/overlap/prep.py).
PREP_ACTOR_S = "split/prep_actor_s"
PREP_CRITIC_S = "split/prep_critic_s"
PREP_WALL_S = "split/prep_wall_s"
PREP_OVERLAP_S = "split/prep_overlap_s"
PREP_OVERLAPPED = "split/prep_overlapped"

# The whole step (runtime/metrics/whole_step.py) and the layout the run trained on.
STEP_S = "split/step_s"
ACTOR_POOL_BUSY_SHARE = "split/actor_pool_busy_share"
CRITIC_POOL_BUSY_SHARE = "split/critic_pool_busy_share"
ACTOR_POOL_GPUS = "split/actor_pool_gpus"
CRITIC_POOL_GPUS = "split/critic_pool_gpus"

# Shared rollout (runtime/shared_rollout/both_pools.py).
CRITIC_POOL_ROLLOUT_SHARE = "split/critic_pool_rollout_share"
SHARED_ROLLOUT_SYNC_S = "split/shared_rollout_sync_s"
CRITIC_POOL_JOINED = "split/critic_pool_joined"
CRITIC_POOL_JOIN_S = "split/critic_pool_join_s"
#: How long the end of generation waited for a late join still under way (a join the rate model misjudged).
CRITIC_POOL_JOIN_WAIT_S = "split/critic_pool_join_wait_s"
#: An estimate, not a measurement: what the actor pool alone would have needed for the critic pool's requests
#: too, at the rate it kept in the step (exact for one-request-at-a-time servers; overstated for batching ones).
SHARED_ROLLOUT_SAVED_ESTIMATE_S = "split/shared_rollout_saved_estimate_s"


# Generation's floor (runtime/shared_rollout/floor.py): the longest request's own time and the work over capacity.
GENERATION_FLOOR_S = "split/generation_floor_s"
GENERATION_TAIL_FLOOR_S = "split/generation_tail_floor_s"
GENERATION_WORK_FLOOR_S = "split/generation_work_floor_s"
#: ``generation / floor - 1``: what any routing could still win back (0 at the floor).
GENERATION_OVER_FLOOR = "split/generation_over_floor"
#: The longest-running request's mean running batch on its server (a large one: moving it would shorten it).
GENERATION_TAIL_BATCH = "split/generation_tail_batch"

# Values streamed into generation's tail (runtime/overlap/stream_values.py).
#: Seconds the critic pool spent on values of samples that had finished while the rest still generated.
STREAM_VALUES_S = "split/stream_values_s"
#: The share of the step's samples whose values were computed before generation ended.
STREAM_COVERAGE = "split/stream_coverage"
#: Seconds of ``values`` left on the step's path after generation ended (all of it without streaming).
VALUES_AFTER_GEN_S = "split/values_after_gen_s"
#: 1.0 where streaming stepped aside this step (a log line says why).
STREAM_VALUES_OFF = "split/stream_values_off"


def pool_gpus(role: str) -> str:
    """``split/actor_pool_gpus`` or ``split/critic_pool_gpus``."""
    return f"{PREFIX}{role}_pool_gpus"


#: Every name above.
ALL = tuple(value for key, value in sorted(globals().items()) if key.isupper() and value.startswith(PREFIX))
