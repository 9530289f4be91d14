"""Values streamed into generation's tail, predicted from a split run's log; and when the reference should move.

With ``VERL_SPLIT_STREAM_VALUES=on`` the critic pool computes the values of samples that have finished generating
while the rest still generate, once it is free (after the deferred critic update, where the run defers it). What
that can take off the step depends on generation's tail: how many samples are done how long before the last one.

**The tail, from verl's own keys.** ``response_length/mean`` (m) and ``response_length/max`` (M) of each step, and
``timing_s/gen`` (G). A sample is taken to finish at ``G x length / M`` (every request starts with the batch and
decodes at about one rate: continuous batching with the batch in the KV cache); then at most ``m / (x M)`` of the
samples are still generating at ``x G`` (Markov's inequality: no assumption on the lengths' shape). So at least
``1 - m / (x M)`` of the values' work is ready at ``x G``, and the critic pool has ``G - max(U, x G)`` seconds to do
it before generation ends, ``U`` the deferred critic update it runs first (the step's ``split/critic_update_s``
standing in for the previous step's, the one that runs into this generation; all of it taken to run from
generation's start). The best ``x`` gives what streaming can at least hide: a floor of the gain, not
a forecast of it (samples that finish before ``x G`` are counted only from there; waves of requests that wait for KV
room, and sampling that stops early for reasons other than length, break the rule).

**The step.** The values left after generation replace the values' lane (``split/prep_critic_s``, else
``timing_s/values``) in the preparation: beside old_log_prob + ref where the run overlapped them
(``split/prep_overlapped``), after them otherwise.

**The reference on the critic pool** (a layout such as ``'actor,rollout:0-5;critic,ref:6-7'``): ``timing_s/ref``
leaves the actor pool's preparation and, scaled by the pools' sizes (data parallel), joins the critic pool's
streamed work. It pays when the preparation's longer side gets shorter; the critic pool must also hold the
reference's weights, which this note does not check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.core import metric_names as names

#: The tail is read at these shares of generation (``x`` above): a grid fine enough for a floor.
SHARES = tuple(i / 100 for i in range(1, 100))
#: verl's keys the tail is read from.
MEAN_KEY, MAX_KEY, GEN_KEY, REF_KEY = "response_length/mean", "response_length/max", "timing_s/gen", "timing_s/ref"


@dataclass(frozen=True)
class Hidden:
    """What streaming hides of ``work`` seconds: at ``share`` of generation, at least ``ready`` of it was ready."""

    work: float
    hidden: float
    share: float
    ready: float

    @property
    def left(self) -> float:
        return self.work - self.hidden


def hidden_work(work: float, gen: float, busy: float, mean: float, longest: float) -> Hidden:
    """The least of ``work`` (seconds of the critic pool's, for the whole batch) that runs inside generation.

    ``gen``: generation's seconds; ``busy``: the critic pool's seconds of other work from generation's start (the
    deferred update); ``mean`` and ``longest``: the step's response lengths."""
    best = Hidden(work, 0.0, 1.0, 1.0)
    if work <= 0 or gen <= 0 or longest <= 0 or mean <= 0:
        return best
    for share in SHARES:
        ready = max(0.0, 1.0 - mean / (share * longest))
        hidden = min(ready * work, max(0.0, gen - max(busy, share * gen)))
        if hidden > best.hidden:
            best = Hidden(work, hidden, share, ready)
    return best


@dataclass(frozen=True)
class StepForecast:
    """One step's preparation now, with streamed values, and with the reference moved too (None: no ref timer)."""

    prep: float
    streamed: float
    moved: float | None
    values: Hidden
    ready_at_half: float


def forecast_step(
    step: Mapping[str, Any], lanes: Mapping[str, float], actor_gpus: int, critic_gpus: int
) -> StepForecast | None:
    """The step's preparation three ways; None where the step lacks what the tail or the lanes are read from."""
    gen, mean, longest = (_number(step.get(key)) for key in (GEN_KEY, MEAN_KEY, MAX_KEY))
    actor, values = lanes.get("actor_prep"), lanes.get("critic_prep")
    if None in (gen, mean, longest, actor, values):
        return None
    deferred = bool(_number(step.get(names.CRITIC_UPDATE_DEFERRED)))
    busy = lanes.get("critic_update", 0.0) if deferred else 0.0
    together = bool(_number(step.get(names.PREP_OVERLAPPED)))

    def prep(actor_side: float, critic_side: float) -> float:
        return max(actor_side, critic_side) if together else actor_side + critic_side

    streamed = hidden_work(values, gen, busy, mean, longest)
    ref = _number(step.get(REF_KEY))
    moved = None
    if ref is not None:
        with_ref = hidden_work(values + ref * actor_gpus / critic_gpus, gen, busy, mean, longest)
        moved = prep(max(actor - ref, 0.0), with_ref.left)
    return StepForecast(
        prep=prep(actor, values),
        streamed=prep(actor, streamed.left),
        moved=moved,
        values=streamed,
        ready_at_half=max(0.0, 1.0 - 2 * mean / longest),
    )


def stream_notes(
    steps: Sequence[Mapping[str, Any]],
    lanes: Sequence[Mapping[str, float]],
    step_s: Sequence[float],
    actor_gpus: int,
    critic_gpus: int,
) -> list[str]:
    """The notes on a split run's steady steps (``lanes``: each step's, ``step_s``: each step's wall): what the
    streamed values would take off, what streaming took off where the run logged it, and the reference's move."""
    notes = []
    logged = [(after, s) for s in steps if (after := _number(s.get(names.VALUES_AFTER_GEN_S))) is not None]
    covered = [c for s in steps if (c := _number(s.get(names.STREAM_COVERAGE))) is not None]
    if logged and covered and _mean(covered) > 0:
        notes.append(
            f"streamed values, measured: {_mean([a for a, _ in logged]):.2f} s of values left after generation a "
            f"step ({names.VALUES_AFTER_GEN_S}), {100 * _mean(covered):.0f} % of the samples valued before it ended "
            f"({names.STREAM_COVERAGE})"
        )
    found = [
        (f, wall)
        for step, step_lanes, wall in zip(steps, lanes, step_s, strict=True)
        if (f := forecast_step(step, step_lanes, actor_gpus, critic_gpus))
    ]
    if not found:
        if steps and any(MEAN_KEY not in s or MAX_KEY not in s for s in steps):
            notes.append(
                f"streamed values: no forecast, the log has no {MEAN_KEY} and {MAX_KEY} to read generation's tail from"
            )
        return notes
    forecasts = [f for f, _ in found]
    step = _mean([wall for _, wall in found])
    values = _mean([f.values.work for f in forecasts])
    hidden = _mean([f.values.hidden for f in forecasts])
    saved = _mean([f.prep - f.streamed for f in forecasts])
    best = max(forecasts, key=lambda f: f.values.hidden).values
    notes.append(
        f"streamed values (VERL_SPLIT_STREAM_VALUES=on), a floor from generation's tail as {MEAN_KEY} / {MAX_KEY} "
        f"and {GEN_KEY} give it (a request's time its length's share of the longest; at least "
        f"{100 * _mean([f.ready_at_half for f in forecasts]):.0f} % of the samples done by half of generation): of "
        f"the values' {values:.2f} s a step at least {hidden:.2f} s run inside generation (e.g. {100 * best.ready:.0f} "
        f"% of the samples ready at {100 * best.share:.0f} % of it), at most {values - hidden:.2f} s left after it; "
        f"the step {step:.2f} s -> at most {step - saved:.2f} s ({_percent(saved, step)} shorter)"
    )
    moved = [(f, wall) for f, wall in found if f.moved is not None]
    if moved:
        gain = _mean([f.streamed - f.moved for f, _ in moved])
        verdict = (
            f"pays: the step {_percent(gain, step)} shorter again ({gain:.2f} s)"
            if gain > 0
            else f"does not pay: the preparation {-gain:.2f} s longer, the critic pool's side then the longer"
            if gain < 0
            else "changes nothing"
        )
        notes.append(
            f"the reference on the critic pool (a layout like 'actor,rollout:...;critic,ref:...'), streamed too: "
            f"{REF_KEY} {_mean([_number(s.get(REF_KEY)) or 0.0 for s in steps]):.2f} s a step off the actor pool's "
            f"preparation, about x{actor_gpus / critic_gpus:.2f} of it on the critic pool's {critic_gpus} GPU(s): "
            f"{verdict}; the critic pool must have room for the reference's weights (not checked here)"
        )
    return notes


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f} %" if whole > 0 else "0 %"
