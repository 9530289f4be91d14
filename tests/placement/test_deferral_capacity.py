"""The deferred critic update's resident steps, checked before Ray (verl_split/placement/deferral_capacity.py).

Unit tests with dict configs shaped like verl's (the installed verl's version is set to 0.9.1 per test, so
the v1 trainer's rules apply on every family), and one on the installed verl's own composed config.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from support.nested import set_dotted

from verl_split.core import compat, settings
from verl_split.core.errors import ActivationFailed, PlacementError
from verl_split.placement import Cluster, plan_placement
from verl_split.placement.deferral_capacity import check_deferral_capacity, held_batch_bytes, step_samples

pytestmark = pytest.mark.unit

CAPACITY = "transfer_queue.backend.SimpleStorage.total_storage_size"


@pytest.fixture(autouse=True)
def _verl_09(monkeypatch):
    monkeypatch.setattr(compat, "installed_version", lambda distribution="verl": "0.9.1")
    for name in settings.VARIABLES:
        monkeypatch.delenv(name, raising=False)


def config(batch: int = 1024, n: int = 8, capacity: Any = 100000, nnodes: int = 16, **extra: Any) -> dict:
    """verl's keys as nested dicts; ``extra``: dotted keys (``trainer.use_v1=False``)."""
    result: dict[str, Any] = {
        "trainer": {"nnodes": nnodes, "n_gpus_per_node": 8},
        "data": {"train_batch_size": batch},
        "actor_rollout_ref": {"rollout": {"n": n}},
        "transfer_queue": {
            "backend": {"storage_backend": "SimpleStorage", "SimpleStorage": {"num_data_storage_units": 8}}
        },
    }
    result["transfer_queue"]["backend"]["SimpleStorage"]["total_storage_size"] = capacity
    for dotted, value in extra.items():
        set_dotted(result, dotted, value)
    return result


HALVES = plan_placement("halves", Cluster(16, 8))


def test_an_oversized_v1_step_is_refused_with_the_numbers_and_both_fixes():
    # 16 nodes, 4096 prompts x 16 samples: one step fits the 100000 samples, two do not.
    with pytest.raises(PlacementError) as exc:
        check_deferral_capacity(config(4096, 16), HALVES, defer=True)
    message = str(exc.value)
    assert "65536 samples a step (data.train_batch_size=4096 x actor_rollout_ref.rollout.n=16)" in message
    assert f"131072 at the peak, more than {CAPACITY}=100000" in message and "Storage capacity exceeded" in message
    assert f"raise it: {CAPACITY}=144184 (131072 plus 10 % headroom" in message
    assert "or turn the deferral off with VERL_SPLIT_OVERLAP=updates,prep" in message


def test_a_normal_step_passes():
    assert check_deferral_capacity(config(1024, 8), HALVES, defer=True) is None
    assert check_deferral_capacity(config(4096, 12), HALVES, defer=True) is None  # 2 x 49152 = 98304


@pytest.mark.parametrize(
    ("cfg", "plan", "defer"),
    [
        (config(4096, 16), HALVES, False),  # VERL_SPLIT_OVERLAP=updates,prep
        (config(4096, 16), plan_placement("all", Cluster(16, 8)), True),  # one pool: joined in its step
        (config(4096, 16, **{"trainer.v1.trainer_mode": "colocate_async"}), HALVES, True),
        (config(4096, 16, **{"trainer.v1.sync.parameter_sync_step": 2}), HALVES, True),
        (config(4096, 16, **{"global_profiler.steps": [1]}), HALVES, True),
        (config(4096, 16, capacity=None), HALVES, True),  # null: unlimited
        (config(4096, 16, **{"transfer_queue.backend.storage_backend": "MooncakeStore"}), HALVES, True),
    ],
    ids=["deferral-off", "one-pool", "async-mode", "parameter-sync-step", "profiler", "unlimited", "mooncake"],
)
def test_the_check_does_not_apply_where_nothing_is_deferred_or_nothing_is_counted(cfg, plan, defer):
    assert check_deferral_capacity(cfg, plan, defer) is None


def test_a_run_without_a_critic_defers_nothing():
    plan = plan_placement("halves", Cluster(16, 8))
    no_critic = plan_placement("halves", Cluster(16, 8), requirements=_no_critic())
    assert check_deferral_capacity(config(4096, 16), no_critic, defer=True) is None
    with pytest.raises(PlacementError):
        check_deferral_capacity(config(4096, 16), plan, defer=True)


def _no_critic():
    from verl_split.placement import Requirements

    return Requirements(critic=False, critic_reason="algorithm.adv_estimator=grpo")


def test_padding_counts():
    # 6 actor GPUs: verl pads a step to a multiple of the actor's data-parallel size (and of the mini-batches).
    plan = plan_placement("6:2", Cluster(1, 8))
    assert step_samples(config(33333, 1, nnodes=1), plan) == (33336, 6, 33333)
    assert check_deferral_capacity(config(33333, 1, capacity=66672, nnodes=1), plan, defer=True) is None
    with pytest.raises(PlacementError, match=r"33336 samples a step \(.*, padded to a multiple of 6\); 66672 at"):
        check_deferral_capacity(config(33333, 1, capacity=66671, nnodes=1), plan, defer=True)
    mini = {"actor_rollout_ref.actor.ppo_mini_batch_size": 7, "critic.ppo_mini_batch_size": 7}
    assert step_samples(config(33333, 1, nnodes=1, **mini), plan)[:2] == (33348, 42)


def test_dapo_s_generation_beside_the_held_step_counts_and_stock_overflow_is_named():
    dapo = {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.max_inflight_gen_batches": 2}
    with pytest.raises(PlacementError) as exc:
        check_deferral_capacity(config(2000, 16, **dapo), HALVES, defer=True)  # 32000 held + 96000 generating
    assert "up to 96000 while the next step generates under DAPO's group filter" in str(exc.value)
    assert "128000 at the peak" in str(exc.value) and "turn the deferral off" in str(exc.value)
    with pytest.raises(PlacementError) as exc:
        check_deferral_capacity(config(2000, 16, capacity=90000, **dapo), HALVES, defer=True)
    assert "stock verl overflows it too, with 96000 samples of one step" in str(exc.value)
    assert "turn the deferral off" not in str(exc.value)


def test_v0_is_never_refused_and_warns_of_a_large_driver_batch():
    # RayPPOTrainer holds step k's batch on the driver; which node that is, and its memory, only Ray knows.
    v0 = {"trainer.use_v1": False, "data.max_prompt_length": 1024, "data.max_response_length": 4096}
    assert held_batch_bytes(config(**v0), 1) == 32 * 1024 + 72 * 4096
    warning = check_deferral_capacity(config(4096, 16, **v0), HALVES, defer=True)
    assert warning and "about 20.0 GiB more than stock" in warning and "VERL_SPLIT_OVERLAP=updates,prep" in warning
    assert check_deferral_capacity(config(64, 4, **v0), HALVES, defer=True) is None  # 84 MB: nothing to say
    assert check_deferral_capacity(config(4096, 16, **v0), HALVES, defer=False) is None


# --------------------------------------------------------------------------- in the launching process, before Ray


def test_the_launching_process_stops_an_oversized_step_and_lets_the_deferral_off_run_pass(caplog):
    from verl_split.runtime.placement.hooks import check_config

    settings.freeze(settings.Settings(enabled=True))
    with pytest.raises(ActivationFailed, match="split placement: the deferred critic update .* 131072 at the peak"):
        check_config(config(4096, 16))
    settings.freeze(settings.Settings(enabled=True, overlap_phases=settings.parse_overlap("updates,prep")))
    check_config(config(4096, 16))
    settings.freeze(settings.Settings(enabled=True))
    with caplog.at_level(logging.WARNING, logger="verl_split"):
        check_config(config(4096, 16, **{"trainer.use_v1": False}))
    assert (
        "verl-split: the deferred critic update (VERL_SPLIT_OVERLAP defer_critic) keeps step k's batch" in caplog.text
    )


@pytest.mark.skipif(not compat.has_v1_trainer(), reason="TransferQueue is verl 0.9's v1 trainer's")
def test_the_installed_verls_config_is_read(monkeypatch):
    from verl_split.placement import plan_from_config
    from verl_split.tools.plan import compose_config

    monkeypatch.undo()  # the installed verl's own version and config
    base = ["trainer.nnodes=16", "trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.n=16"]
    big = compose_config("ppo_trainer", None, [*base, "data.train_batch_size=4096"])
    with pytest.raises(PlacementError, match=f"{CAPACITY}=100000"):
        check_deferral_capacity(big, plan_from_config(big, ""), defer=True)
    raised = compose_config("ppo_trainer", None, [*base, "data.train_batch_size=4096", f"{CAPACITY}=144184"])
    assert check_deferral_capacity(raised, plan_from_config(raised, ""), defer=True) is None
