"""Overlap the actor and critic updates in verl 0.7's ``RayPPOTrainer``, legacy critic included.

Target: ``verl/trainer/ppo/ray_trainer.py`` ``RayPPOTrainer._update_critic`` / ``_update_actor``,
as ``overlap_v0``. On 0.7 the default critic is the legacy ``fsdp_workers.CriticWorker``, whose
``_update_critic`` branch returns ``critic_wg.update_critic(batch)`` as it comes: with the
``legacy_*`` seams that is a future while the stock method runs under
``legacy.deferred_dispatch()``, so the wrapper below joins it (through overlap.py's
``_CriticResult.get`` when the step overlaps) before anything in ``fit`` reads it. The engine
critic's branch (``use_legacy_worker_impl=disable``) joins its own future; nothing changes there.
"""

from __future__ import annotations

from types import ModuleType

from verl_split import _wrapping, legacy, overlap, trainers


def _make_update_critic_wrapper(adapter: trainers.TrainerAdapter):
    coordinate = overlap.make_update_critic_wrapper(adapter)

    def _wrap_update_critic(wrapped, instance, args, kwargs):
        def stock_update_critic_joined(*a, **kw):
            with legacy.deferred_dispatch():
                result = wrapped(*a, **kw)
            return legacy.materialise(result)

        return coordinate(stock_update_critic_joined, instance, args, kwargs)

    return _wrap_update_critic


def patch(module: ModuleType) -> None:
    adapter = trainers.V0Adapter(module.RayPPOTrainer)
    _wrapping.wrap(module.RayPPOTrainer, "_update_critic", _make_update_critic_wrapper(adapter))
    _wrapping.wrap(module.RayPPOTrainer, "_update_actor", overlap.make_update_actor_wrapper(adapter))


def unpatch(module: ModuleType) -> None:
    _wrapping.unwrap(module.RayPPOTrainer, "_update_critic")
    _wrapping.unwrap(module.RayPPOTrainer, "_update_actor")
