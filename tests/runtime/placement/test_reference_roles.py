"""verl's role mapping when the plan puts the reference on the critic's pool: RayPPOTrainer's fused
``Role.ActorRolloutRef`` becomes ``Role.ActorRollout`` plus a ``Role.RefPolicy`` worker group on the critic's pool.

verl's own ``Role`` and ``ResourcePoolManager``, mapped the way ``main_ppo``'s TaskRunner maps them (no pool is
created, no Ray started). The run itself: tests/e2e/test_reference_placement_e2e.py.
"""

from __future__ import annotations

import pytest

from verl_split.placement import Cluster, Requirements, plan_placement

pytestmark = pytest.mark.unit

APART = "actor,rollout:0-5;critic,ref:6-7"


def task_runner_roles(fused: bool = True):
    """What verl's TaskRunner hands the trainer: role -> worker class, role -> pool (all on global_pool)."""
    from verl.trainer.ppo.utils import Role

    worker, critic = object(), object()  # stand-ins for the ray.remote worker classes, compared by identity
    roles = {Role.ActorRolloutRef: worker} if fused else {Role.ActorRollout: worker, Role.RefPolicy: worker}
    roles[Role.Critic] = critic
    return roles, {role: "global_pool" for role in roles}, worker, critic


def split(text: str, fused: bool = True):
    from verl.single_controller.ray.base import ResourcePoolManager

    from verl_split.runtime.placement import pools

    plan = plan_placement(text, Cluster(1, 8), Requirements())
    roles, mapping, worker, critic = task_runner_roles(fused)
    moved = pools.separate_reference(plan, roles, mapping)
    manager = pools.split_pool_manager(
        plan, ResourcePoolManager(resource_pool_spec={"global_pool": [8]}, mapping=mapping)
    )
    return moved, roles, manager, worker, critic


def test_the_fused_role_is_split_and_the_reference_mapped_to_the_critics_pool(capsys, caplog):
    from verl.trainer.ppo.utils import Role

    moved, roles, manager, worker, critic = split(APART)
    assert moved
    assert roles == {Role.ActorRollout: worker, Role.RefPolicy: worker, Role.Critic: critic}
    assert manager.mapping == {
        Role.ActorRollout: "actor_rollout_ref_pool",
        Role.RefPolicy: "critic_pool",
        Role.Critic: "critic_pool",
    }
    assert manager.resource_pool_spec == {"actor_rollout_ref_pool": [6], "critic_pool": [2]}
    said = capsys.readouterr().out + caplog.text  # nodes.announce: a log line, or a print without a handler
    assert "The reference runs in a worker group of its own (Role.RefPolicy) on resource pool critic_pool" in said


def test_verls_legacy_reference_worker_group_is_only_re_pointed():
    from verl.trainer.ppo.utils import Role

    moved, roles, manager, worker, _ = split(APART, fused=False)  # verl 0.7's legacy workers: RefPolicy already
    assert moved and roles[Role.RefPolicy] is worker
    assert manager.mapping[Role.RefPolicy] == "critic_pool"
    assert manager.mapping[Role.ActorRollout] == "actor_rollout_ref_pool"


@pytest.mark.parametrize("text", ["actor,rollout:0-5;critic:6-7", "6:2", "halves"])
def test_a_reference_beside_the_actor_keeps_verls_roles(text):
    from verl.trainer.ppo.utils import Role

    moved, roles, manager, worker, _ = split(text)
    assert not moved
    assert roles[Role.ActorRolloutRef] is worker and Role.RefPolicy not in roles
    assert manager.mapping[Role.ActorRolloutRef] == "actor_rollout_ref_pool"
