"""The best whole step a split of a job could reach on this machine, from stock's own scaling measured in the same run.

Used by ``whole_step.py``. The step model is DESIGN.md's (sections 5 and 6): phases on one pool add up, pools
working at once take the maximum, stages add up. With one worker per pool (this machine's split), the inputs
are each phase on **one worker** and generation on **two workers** (the same two rollout replicas generating at
once), each the fastest measurement of that work anywhere in the run (``whole_step_floor.py``):

- ``gen_one`` G1: generation on the actor pool alone; ``gen_two`` G2: on both pools at once;
- ``prep_actor`` Pa: old_log_prob + ref; ``prep_critic`` Pc: values;
- ``update_actor`` Ua, ``update_critic`` Uc;
- ``serial`` S: what no pool runs (reward, advantages, the rest of the step: the driver's own work).

The best split is the best schedule verl-split runs (all overlaps, the critic's update deferred, shared
rollout with the late join: the ``split + all + shared`` configuration) with nothing lost to running them:
each lane at its one-worker time whatever runs beside it, no weight push, the critic pool joining generation
the moment it is free. Its step is the sum of three stages, each the longer of the two pools' lanes:

- **updates**: both updates start together; the step waits for the actor's, Ua. The critic's left-over,
  R = max(0, Uc - Ua), runs on into the next step's generation (DESIGN section 6).
- **generation**: the actor pool generates alone while the critic pool finishes R, then both generate.
  Alone the actor pool does 1/G1 of the batch a second, both pools 1/G2, so the stage takes
  R + G2 (1 - R / G1) = G2 + R (1 - G2 / G1). The critic pool joins only where that pays: R < G1 (it is free
  before the actor pool is done) and G2 < G1 (two replicas beat one); otherwise the actor pool generates it
  all in G1.
- **preparation**: old_log_prob + ref beside values, which start once generation is done and the critic's
  update is: max(Pa, max(0, R - G1) + Pc) (the second term only when the critic pool did not join).

    best = S + generation + preparation + Ua

Where R = 0 this is the ``split + updates + prep + shared`` schedule (nothing to defer). With stock's phases
halving on two workers (each one-worker time twice stock's) and lanes of equal work, the best split ties
stock: the bound is above 1x only where stock's two workers do not halve a phase (DESIGN section 5: with
linear scaling no split beats stock). Two lanes on this machine's two cores can run at once only as well as
its parallel ceiling (``ceiling.py``) allows: the bound does not discount it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Lanes:
    """One step's phases as the bound reads them, in seconds (see the module's docstring for each)."""

    gen_one: float
    gen_two: float
    prep_actor: float
    prep_critic: float
    update_actor: float
    update_critic: float
    serial: float


@dataclass(frozen=True)
class BestSplit:
    """The best split's step and its stages, in seconds."""

    step_s: float
    generation_s: float
    preparation_s: float
    updates_s: float
    serial_s: float
    critic_left_s: float  # R: the critic's update past the actor's, run on into generation
    critic_pool_joins: bool  # whether the critic pool generates at all

    def to_json(self) -> dict:
        return asdict(self)


def best_split(lanes: Lanes) -> BestSplit:
    """The best split's step for these lanes (the module's docstring derives each stage)."""
    left = max(0.0, lanes.update_critic - lanes.update_actor)
    joins = left < lanes.gen_one and lanes.gen_two < lanes.gen_one
    if joins:
        generation = lanes.gen_two + left * (1.0 - lanes.gen_two / lanes.gen_one)
        values_start = 0.0
    else:
        generation = lanes.gen_one
        values_start = max(0.0, left - lanes.gen_one)  # the critic's update still running when generation ends
    preparation = max(lanes.prep_actor, values_start + lanes.prep_critic)
    step = lanes.serial + generation + preparation + lanes.update_actor
    return BestSplit(step, generation, preparation, lanes.update_actor, lanes.serial, left, joins)
