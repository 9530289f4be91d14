"""Where a deferred critic update is joined, as wrappers of verl's methods (``seams.py`` names them).

The logic is ``deferral.py``: these wrappers only call its ``join`` where something needs the critic --
the checkpoint save (so a checkpoint holds the updated critic and a resume continues exactly), a reward
model on the critic's pool, the end of ``fit`` -- and postpone TransferQueue clears of data it still reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl_split.core.errors import UpdateFailedError
from verl_split.plugin.args import get_argument
from verl_split.runtime.overlap import deferral, held_records


def wrap_kv_clear(wrapped, instance, args, kwargs):
    """TransferQueue's ``kv_clear(keys, partition_id)``, which v1's ``fit`` calls at the end of each step on
    the step's keys (``verl/trainer/ppo/v1/trainer_base.py``, "cleanup transfer queue"): a clear of keys a
    deferred update still reads waits for its join; every other call passes."""
    keys = get_argument(args, kwargs, 0, "keys", None)
    partition_id = get_argument(args, kwargs, 1, "partition_id", None)
    if keys is not None and deferral.postpone_clear(keys, partition_id, lambda: wrapped(*args, **kwargs)):
        return None
    return wrapped(*args, **kwargs)


def end_of_fit(error: BaseException | None) -> UpdateFailedError | None:
    """At ``fit``'s exit: join (or, on an error, not wait) and log what is held; return a deferred
    failure that explains ``error``, if there is one."""
    deferred = deferral.current()
    if error is None:
        deferral.join("the end of training")
        return None
    if deferred is not None and deferred.result.done():
        try:
            deferral.join("the end of a failed run")
        except UpdateFailedError as failure:
            return failure
    held_records.flush_without_critic()
    if deferred is not None and deferred.failure is not None:
        return deferred.failure
    return None


def wrap_fit(wrapped, trainer, args, kwargs):
    """``fit``: join at the end of training; on an error, log what is held and name a deferred failure."""
    deferral.watch_from_now()
    try:
        result = _fit_and_join(wrapped, args, kwargs)
    finally:
        deferral.cancel_exit_timers()  # fit is over: a run tearing down is not interrupted or ended from here
    return result


def _fit_and_join(wrapped, args, kwargs):
    try:
        result = wrapped(*args, **kwargs)
    except Exception as exc:
        failure = end_of_fit(exc)
        if failure is not None and failure is not exc:
            raise failure from exc
        raise
    except BaseException as exc:  # Ctrl-C, SystemExit: do not wait for the critic, keep the step's metrics
        failure = deferral.interrupted_for(deferral.current(), exc)  # or ours, sent to end a failed run
        if failure is not None:
            held_records.flush_without_critic()
            raise failure from exc
        held_records.flush_without_critic()
        raise
    end_of_fit(None)
    return result


def wrap_save_checkpoint(wrapped, trainer, args, kwargs):
    """``_save_checkpoint``: the checkpoint holds the updated critic, so a resume continues exactly."""
    deferral.join("the checkpoint save")
    return wrapped(*args, **kwargs)


def make_reward_join_wrapper(adapter: Any) -> Callable[..., Any]:
    """``_compute_reward_colocate`` (v1): a reward model on the critic's pool runs after the critic's update."""

    def _wrap_compute_reward_colocate(wrapped, trainer, args, kwargs):
        if adapter.reward_pool(trainer) == adapter.pools(trainer)[1]:
            deferral.join("the reward model on the critic's pool")
        else:
            deferral.raise_if_failed()
        return wrapped(*args, **kwargs)

    return _wrap_compute_reward_colocate
