"""Fast tests of shared rollout's coordination (verl_split/runtime/shared_rollout/coordinator.py).

Fakes of verl's two checkpoint managers, on purpose: they record the calls the trainer's
``checkpoint_manager`` passes on, in order, so these tests check our logic -- which manager gets
which call and when, the metrics, how a failure is named -- in milliseconds. The load balancer is
verl's own class, used as a plain object (verl wraps it in ``ray.remote`` itself). The real runs
are in ``tests/e2e/test_shared_rollout_e2e.py``. No Ray, no verl trainer, no subprocess.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verl_split.core import compat

if not compat.verl_in(compat.SHARED_ROLLOUT):
    pytest.skip("shared rollout is built on verl 0.9's load balancer and managers", allow_module_level=True)

from verl_split.runtime.shared_rollout import both_pools, liveness  # noqa: E402
from verl_split.runtime.shared_rollout.both_pools import BothPoolsCheckpointManager, SharedRolloutError  # noqa: E402

pytestmark = pytest.mark.unit


class FakeManager:
    """verl's CheckpointEngineManager as the trainer sees it: records every call in a shared journal."""

    def __init__(self, name: str, journal: list, replicas: list, fail: str | None = None) -> None:
        self.name, self.journal, self.replicas, self.fail = name, journal, replicas, fail
        self.backend = "naive" if name == "hybrid" else "verl_split_cpu"

    def _call(self, method: str, *args):
        self.journal.append((self.name, method, *args))
        if method == self.fail:
            raise RuntimeError(f"{self.name} {method} broke")

    def update_weights(self, global_steps=None):
        self._call("update_weights", global_steps)
        return "hybrid-result" if self.name == "hybrid" else {}

    def sleep_replicas(self):
        self._call("sleep_replicas")

    def wake_up_replicas(self):
        self._call("wake_up_replicas")

    def abort_replicas(self, reject_request=False):
        self._call("abort_replicas", reject_request)

    def resume_generation_replicas(self):
        self._call("resume_generation_replicas")

    def release_kv_cache_replicas(self):
        self._call("release_kv_cache_replicas")

    def resume_kv_cache_replicas(self):
        self._call("resume_kv_cache_replicas")


class FakeBalancer:
    """The balancer actor as a Ray handle offers it (``method.remote()``): ``take_step`` hands out ``routed``
    and ``step``; the gating calls go to the shared journal."""

    def __init__(self, routed: dict[str, int], journal: list) -> None:
        self.routed, self.journal, self.step = routed, journal, {}
        #: What ``progress`` answers (the late join's rate model reads it); by default no request has ended yet.
        self.so_far = {"routed": 0, "released": 0, "queued": 0, "since_first_s": None}
        self.take_step = SimpleNamespace(remote=self._take)
        self.progress = SimpleNamespace(remote=lambda: dict(self.so_far))
        self.take_routed = SimpleNamespace(remote=lambda: self._take()["routed"])
        for method in ("gate", "open", "ungate", "lift_caps"):
            setattr(self, method, SimpleNamespace(remote=self._record(method)))

    def _record(self, method):
        return lambda *args, **kwargs: self.journal.append(("balancer", method, *args, *kwargs.values()))

    def _take(self):
        routed, self.routed = self.routed, {}
        step, self.step = self.step, {}
        return {"routed": routed, **step}


def replica(rank: int, address: str):
    return SimpleNamespace(replica_rank=rank, server_address=address, servers=[])


@pytest.fixture
def both(monkeypatch):
    monkeypatch.setattr(both_pools.ray, "get", lambda value, **_: value)  # the fakes answer directly
    monkeypatch.setattr(both_pools, "dead_replicas", lambda replicas: [r.replica_rank for r in replicas])
    journal: list = []
    trainer = SimpleNamespace()
    hybrid = FakeManager("hybrid", journal, [replica(0, "cpu-rollout-0")])
    shared = FakeManager("shared", journal, [replica(1, "cpu-rollout-1")])
    balancer = FakeBalancer({"cpu-rollout-0": 6, "cpu-rollout-1": 2}, journal)
    return SimpleNamespace(
        trainer=trainer,
        journal=journal,
        shared=shared,
        manager=BothPoolsCheckpointManager(trainer, hybrid, shared, balancer),
        balancer=balancer,
    )


def test_the_push_wakes_then_fills_the_critic_pool_replicas_before_the_stock_sync(both):
    assert both.manager.update_weights(3) == "hybrid-result"
    assert both.journal == [
        ("shared", "wake_up_replicas"),
        ("shared", "update_weights", 3),
        ("balancer", "ungate"),  # every server open, no cap: verl's own routing
        ("hybrid", "update_weights", 3),
    ]
    both.manager.sleep_replicas()  # the generation with those weights ends: the push is logged with its step
    assert both.trainer._pending_sync_metrics[both_pools.SYNC_METRIC] >= 0.0  # recorded; its size is not tested


def test_each_push_is_logged_with_the_step_that_generates_with_it(both):
    """The sync at a step's end pushes the next step's weights: logged in the next step's record, as a late join's
    push is (it happens during that step's generation). Logged with the step that made it, a push after a step
    whose own push had been late overwrote that one, and the next step had none (seen after a checkpoint, which
    joins the deferred critic update so that the next sync is not late)."""
    both.manager.update_weights(0)  # at start-up
    assert both_pools.SYNC_METRIC not in (getattr(both.trainer, "_pending_sync_metrics", None) or {})
    both.manager.sleep_replicas()  # step 1's generation ends
    step_1 = both.trainer._pending_sync_metrics
    both.trainer._pending_sync_metrics = {}  # verl consumes them at step 1's end, after its sync:
    both.manager.update_weights(1)
    assert both.trainer._pending_sync_metrics == {}  # not step 1's
    both.balancer.routed = {"cpu-rollout-0": 4, "cpu-rollout-1": 4}
    both.manager.sleep_replicas()  # step 2's generation ends
    assert both_pools.SYNC_METRIC in step_1 and both_pools.SYNC_METRIC in both.trainer._pending_sync_metrics


def test_after_generation_both_sleep_and_the_share_is_the_critic_pool_s_requests(both):
    both.manager.update_weights(1)
    both.journal.clear()
    both.manager.sleep_replicas()
    assert both.journal == [("hybrid", "sleep_replicas"), ("shared", "sleep_replicas")]
    pending = both.trainer._pending_sync_metrics
    assert pending[both_pools.SHARE_METRIC] == 2 / 8 and pending["split/critic_pool_joined"] == 1.0
    both.manager.sleep_replicas()  # asleep already, nothing routed since: nothing slept twice, nothing new
    assert both.journal == [("hybrid", "sleep_replicas"), ("shared", "sleep_replicas"), ("hybrid", "sleep_replicas")]
    assert both.trainer._pending_sync_metrics[both_pools.SHARE_METRIC] == 2 / 8


def test_the_metrics_join_what_verl_already_has_pending(both):
    both.trainer._pending_sync_metrics = {"delta/changed_ratio": 0.5}
    both.manager.update_weights(1)
    both.manager.sleep_replicas()
    assert {"delta/changed_ratio", both_pools.SHARE_METRIC, both_pools.SYNC_METRIC} <= set(
        both.trainer._pending_sync_metrics
    )


def test_every_other_call_reaches_both_managers(both):
    m = both.manager
    m.wake_up_replicas()
    m.abort_replicas(reject_request=True)
    m.resume_generation_replicas()
    m.release_kv_cache_replicas()
    m.resume_kv_cache_replicas()
    assert [(who, what) for who, what, *_ in both.journal] == [
        (who, what)
        for what in (
            "wake_up_replicas",
            "abort_replicas",
            "resume_generation_replicas",
            "release_kv_cache_replicas",
            "resume_kv_cache_replicas",
        )
        for who in ("hybrid", "shared")
    ]
    assert ("shared", "abort_replicas", True) in both.journal
    assert [r.replica_rank for r in m.replicas] == [0, 1]
    assert m.backend == "naive"  # anything else reads from verl's own manager


@pytest.mark.parametrize("failing", ["update_weights", "sleep_replicas", "wake_up_replicas"])
def test_a_failing_critic_pool_replica_stops_the_run_naming_it(both, failing):
    both.shared.fail = failing
    with pytest.raises(SharedRolloutError, match=r"critic pool's rollout replicas: replica\(s\) \[1\] died") as err:
        if failing == "sleep_replicas":
            both.manager.wake_up_replicas()
            both.manager.sleep_replicas()
        else:
            both.manager.update_weights(2)
    assert "resume from the last checkpoint" in str(err.value)
    assert ("hybrid", "update_weights", 2) not in both.journal  # no half-synced step goes on


def test_a_validation_s_requests_do_not_count_in_the_next_step(both):
    both.balancer.routed = {"cpu-rollout-1": 5}
    assert both.manager.take_routed() == {"cpu-rollout-1": 5}  # what the _validate seam drops
    both.balancer.routed = {"cpu-rollout-0": 1, "cpu-rollout-1": 1}
    both.manager.update_weights(1)
    both.manager.sleep_replicas()
    assert both.trainer._pending_sync_metrics[both_pools.SHARE_METRIC] == 0.5


def test_under_a_custom_router_the_share_is_not_measured(both):
    manager = BothPoolsCheckpointManager(both.trainer, both.manager.hybrid, both.shared, None)
    manager.sleep_replicas()
    assert manager.take_routed() == {}
    assert both_pools.SHARE_METRIC not in (getattr(both.trainer, "_pending_sync_metrics", None) or {})


# --------------------------------------------------------------------------- dead replicas, from Ray's actor table


class FakeServer:
    """A rollout server's actor handle: ``__ray_ready__.remote()`` gives a ref named after the server."""

    def __init__(self, name: str, sent: list[str]) -> None:
        self.name = name
        self.__ray_ready__ = SimpleNamespace(remote=lambda: (sent.append(name), name)[1])


def fake_replicas(*servers_per_replica: tuple[str, ...]) -> tuple[list, list[str]]:
    sent: list[str] = []
    replicas = [
        SimpleNamespace(replica_rank=rank, servers=[FakeServer(name, sent) for name in names])
        for rank, names in enumerate(servers_per_replica)
    ]
    return replicas, sent


def test_dead_is_what_rays_table_records_and_an_unreadable_one_is_probed_once_for_all():
    """Fakes of the table and of ray.wait / ray.get (our decision rule); the real table and a real saturated actor:
    test_watchdog_ray.py. Of the servers whose state cannot be read, only one whose actor Ray says died is dead: one
    that does not answer in time, or is unreachable for now, or fails otherwise, is alive as far as anyone knows."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError

    replicas, sent = fake_replicas(*[(f"r{i}a", f"r{i}b") for i in range(40)])
    table = {"r3a": "DEAD", "r5b": "RESTARTING", "r6a": "PENDING_CREATION"}
    unreadable = {"r7b", "r9a", "r11a", "r31a"}
    errors = {
        "r31a": ActorDiedError(),
        "r9a": ActorUnavailableError("node unreachable", None),
        "r11a": RuntimeError("a failure of the call, not of the actor"),
    }
    waits = []

    def state_of(server):
        return None if server.name in unreadable else table.get(server.name, "ALIVE")

    def wait(refs, num_returns, timeout):
        waits.append((sorted(refs), num_returns, timeout))
        return [r for r in refs if r != "r7b"], ["r7b"]  # r7b: busy, no answer within the deadline

    def get(ref, timeout):
        assert timeout == 0  # only refs already answered are read
        if ref in errors:
            raise errors[ref]

    assert liveness.dead_replicas(replicas, 10.0, state_of=state_of, wait=wait, get=get) == [3, 31]
    assert sorted(sent) == sorted(unreadable)  # the table answered for the rest: no call queued behind requests
    assert waits == [(sorted(unreadable), 4, 10.0)]  # every probe sent first, then one wait for all of them


def test_a_handle_that_cannot_send_is_dead_only_if_ray_says_so_and_a_readable_table_means_no_wait():
    from ray.exceptions import ActorDiedError

    replicas, _ = fake_replicas(("a",), ("b",), ("c",))

    def refuse(error):
        def remote():
            raise error

        return SimpleNamespace(name="x", __ray_ready__=SimpleNamespace(remote=remote))

    replicas[0].servers = [refuse(ActorDiedError())]
    replicas[1].servers = [refuse(ZeroDivisionError())]
    assert liveness.dead_replicas(
        replicas,
        1.0,
        state_of=lambda server: None if server.name == "x" else "ALIVE",
        wait=lambda refs, **_: pytest.fail("nothing was sent"),
    ) == [0]
    no_wait = {"wait": lambda *a, **k: pytest.fail("the table answered: no probe, no wait")}
    assert liveness.dead_replicas(replicas[2:], state_of=lambda server: "ALIVE", **no_wait) == []
    assert liveness.dead_replicas([], **no_wait) == []


def test_the_actor_state_of_a_handle_ray_cannot_look_up_is_unknown():
    assert liveness.actor_state(SimpleNamespace()) is None  # no actor id: the caller probes instead


# --------------------------------------------------------------------------- what the coordinator reads of the job


@pytest.mark.parametrize(
    ("keys", "requests", "concurrency"),
    [
        ({"data": {"train_batch_size": 8}, "actor_rollout_ref": {"rollout": {"n": 4}}}, 32, None),
        ({"data": {"train_batch_size": 8, "gen_batch_size": 12}}, 12, None),  # rollout.n unset: 1
        ({"data": {"train_batch_size": 8}, "actor_rollout_ref": {"rollout": {"max_num_seqs": 64}}}, 8, 64),
        ({"data": {"train_batch_size": 8}, "actor_rollout_ref": {"rollout": {"full_determinism": True}}}, 0, None),
        ({"data": {"train_batch_size": 8}, "actor_rollout_ref": {"rollout": {"name": "cpu_hf"}}}, 8, 1),
    ],
    ids=["prompts-x-n", "gen-batch", "max-num-seqs", "full-determinism", "cpu-rollout"],
)
def test_the_coordinator_reads_requests_and_servers_from_the_trainers_job(keys, requests, concurrency):
    from verl_split.placement.job_config import trainer_job
    from verl_split.runtime.cpu.rollout import ROLLOUT_NAME
    from verl_split.runtime.shared_rollout import coordinator

    assert ROLLOUT_NAME == "cpu_hf"  # verl-split's CPU rollout: one generate at a time
    trainer = SimpleNamespace(config=keys)
    job = trainer_job(trainer)
    assert trainer_job(trainer) is job  # read once per trainer
    assert coordinator.late_join_requests(job) == requests
    assert coordinator.server_concurrency(job) == concurrency


def test_a_quoted_request_count_never_reaches_the_coordinator():
    from verl_split.core.errors import PlacementError
    from verl_split.placement.job_config import trainer_job

    with pytest.raises(PlacementError, match=r"actor_rollout_ref\.rollout\.n is '4' \(text\)"):
        trainer_job(SimpleNamespace(config={"actor_rollout_ref": {"rollout": {"n": "4"}}}))


# ----------------------------------------------------------------------------- the weight transfer's engine


def _engine_config(backend):
    from verl_split.tools.hydra_config import compose_config

    return compose_config("ppo_trainer", None, [f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend}"])


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_engine_is_decided_from_the_jobs_backend_and_written_for_verls_workers(device, monkeypatch):
    import verl.utils.device

    from verl_split.placement import job_from_config
    from verl_split.runtime.cpu import weight_transfer
    from verl_split.runtime.shared_rollout import coordinator

    monkeypatch.setattr(verl.utils.device, "get_device_name", lambda: device)  # the machine decides; set here
    expected = weight_transfer.BACKEND if device == "cpu" else coordinator.GPU_BACKEND
    config = _engine_config("naive")
    job = job_from_config(config)
    assert coordinator.configure_weight_transfer(config, job) == expected
    assert config.actor_rollout_ref.rollout.checkpoint_engine.backend == expected
    # The job was read before the rewrite: a second call (a second trainer on the same job) decides alike.
    assert coordinator.configure_weight_transfer(config, job) == expected


def test_a_backend_the_config_chose_is_kept():
    from verl_split.placement import job_from_config
    from verl_split.runtime.shared_rollout import coordinator

    config = _engine_config("nixl")
    assert coordinator.configure_weight_transfer(config, job_from_config(config)) == "nixl"
    assert config.actor_rollout_ref.rollout.checkpoint_engine.backend == "nixl"
