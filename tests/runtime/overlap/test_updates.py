"""Fast tests of the update overlap's coordination (verl_split/runtime/overlap/updates.py).

Fakes of verl's objects, on purpose: a trainer whose step calls ``_update_critic(batch, metrics)``
then ``_update_actor(batch, metrics)`` as verl's v1 ``_step_once`` does, and a critic worker group
whose non-blocking ``train_mini_batch`` returns a future with verl's ``get()``; the work is sleeps.
They check our logic -- launch, join, failure naming, warm-up, GRPO, fallbacks, the metric merge
and arithmetic -- in seconds; the real verl runs are in ``tests/e2e/test_overlap_e2e.py``.
No Ray, no verl trainer, no subprocess.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from verl_split.core import log
from verl_split.core.errors import UpdateFailedError
from verl_split.plugin import wrapping
from verl_split.runtime.overlap import lanes, trainers, update_hooks, updates

pytestmark = pytest.mark.unit

WORK_S = 0.15


class FakeRef:
    """verl's non-blocking dispatch result: ``get()`` waits for the workers."""

    def __init__(self, future: concurrent.futures.Future) -> None:
        self._future = future

    def get(self):
        return self._future.result()


class FakeCriticGroup:
    def __init__(self, trainer, blocking=False):
        self.trainer, self.blocking = trainer, blocking

    def train_mini_batch(self, batch):
        future: concurrent.futures.Future = concurrent.futures.Future()

        def work():
            start = time.monotonic()
            time.sleep(self.trainer.critic_s)
            if self.trainer.fail == "critic":
                future.set_exception(RuntimeError("injected critic failure"))
                return
            self.trainer.calls["critic"] = (start, time.monotonic())
            future.set_result({"critic/vf_loss": 0.5})

        threading.Thread(target=work, daemon=True).start()
        return SimpleNamespace(value=future.result()) if self.blocking else FakeRef(future)


class FakeTrainer:
    """verl v1's step order of the updates; the actor's update is a sleep on the trainer's side."""

    def __init__(self, critic_warmup=0, blocking=False, metrics_by_keyword=False):
        self.config = OmegaConf.create({"trainer": {"critic_warmup": critic_warmup}})
        self.global_steps = 1
        self.total_training_steps = 1  # every step is the last: the critic's update is joined in it
        self.critic_wg = FakeCriticGroup(self, blocking)
        self.resource_pool_manager = SimpleNamespace(resource_pool_spec={"actor_pool": [2], "critic_pool": [1]})
        self.metrics_by_keyword = metrics_by_keyword
        self.fail = ""
        self.critic_s = self.actor_s = WORK_S
        self.calls: dict[str, tuple[float, float]] = {}
        self.actor_batches: list = []

    def _update_critic(self, batch, metrics):
        dispatched = self.critic_wg.train_mini_batch(batch)
        metrics.update(dispatched.get() if isinstance(dispatched, FakeRef) else dispatched.value)
        return batch

    def _update_actor(self, batch, metrics):
        start = time.monotonic()
        self.actor_batches.append(batch)
        time.sleep(self.actor_s if self.fail != "actor" else 0.01)
        if self.fail == "actor":
            raise RuntimeError("injected actor failure")
        self.calls["actor"] = (start, time.monotonic())
        metrics["actor/pg_loss"] = 0.25
        return batch

    def _step_once(self, batch=None, actor_batch=None):
        batch = batch if batch is not None else object()
        metrics: dict = {}
        if self.metrics_by_keyword:
            self._update_critic(batch, metrics=metrics)
        else:
            self._update_critic(batch, metrics)
        if self.config.trainer.critic_warmup <= self.global_steps:
            self._update_actor(actor_batch if actor_batch is not None else batch, metrics)
        return metrics


class OverridingTrainer(FakeTrainer):
    def _step_once(self, batch=None, actor_batch=None):
        return super()._step_once(batch, actor_batch)


class FakeAdapter(trainers.V1Adapter):
    """The real v1 adapter, with the pools given instead of read from verl's Role mapping."""

    def __init__(self, pools=("actor_pool", "critic_pool")):
        super().__init__(FakeTrainer)
        self._pools = pools

    def pools(self, trainer):
        return self._pools


@pytest.fixture
def patched(monkeypatch):
    """FakeTrainer with verl-split's update wrappers, as the seam overlap_v1 wraps verl's trainer."""
    monkeypatch.setenv("VERL_SPLIT", "1")  # verl-split reads its other settings only when switched on
    monkeypatch.delenv("VERL_SPLIT_OVERLAP", raising=False)
    monkeypatch.delenv("VERL_SPLIT_TRACE", raising=False)
    log.forget_once()

    def install(pools=("actor_pool", "critic_pool")):
        adapter = FakeAdapter(pools)
        wrapping.wrap(FakeTrainer, "_update_critic", update_hooks.make_update_critic_wrapper(adapter))
        wrapping.wrap(FakeTrainer, "_update_actor", update_hooks.make_update_actor_wrapper(adapter))
        return adapter

    yield install
    for method in ("_update_critic", "_update_actor"):
        wrapping.unwrap(FakeTrainer, method)


def shared(a, b):
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


@pytest.mark.parametrize("metrics_by_keyword", [False, True], ids=["positional", "keyword"])
def test_updates_run_at_once_and_the_step_gets_both_metrics(patched, metrics_by_keyword):
    patched()
    trainer = FakeTrainer(metrics_by_keyword=metrics_by_keyword)
    metrics = trainer._step_once()
    assert shared(trainer.calls["actor"], trainer.calls["critic"]) > 0.5 * WORK_S
    assert metrics["actor/pg_loss"] == 0.25 and metrics["critic/vf_loss"] == 0.5  # actor's merged back
    assert metrics["split/overlapped"] == 1.0
    assert metrics["split/overlap_s"] > 0.5 * WORK_S
    assert metrics["split/actor_update_s"] >= WORK_S and metrics["split/critic_update_s"] >= WORK_S
    assert metrics["split/speedup"] > 1.0  # what the overlap above implies; no bound that load could break
    assert metrics["split/actor_pool_gpus"] == 2.0 and metrics["split/critic_pool_gpus"] == 1.0
    assert len(trainer.actor_batches) == 1  # the actor updated once, on the step's batch


def test_an_actor_failure_stops_the_critic_wait_and_names_the_actor(patched):
    patched()
    trainer = FakeTrainer()
    trainer.fail, trainer.critic_s = "actor", 3.0
    with pytest.raises(UpdateFailedError, match=r"the actor update failed on resource pool 'actor_pool'"):
        trainer._step_once()
    assert "critic" not in trainer.calls  # raised while the critic's 3 s still ran: it did not wait them out


def test_a_critic_failure_names_the_critic_and_its_pool(patched):
    patched()
    trainer = FakeTrainer()
    trainer.fail = "critic"
    with pytest.raises(UpdateFailedError, match=r"the critic update failed on resource pool 'critic_pool'"):
        trainer._step_once()


@pytest.mark.parametrize(
    ("setting", "pools", "trainer_class", "reason"),
    [
        ("off", ("actor_pool", "critic_pool"), FakeTrainer, "VERL_SPLIT_OVERLAP is off"),
        ("on", ("global_pool", "global_pool"), FakeTrainer, "actor and critic share resource pool 'global_pool'"),
        ("on", ("actor_pool", "critic_pool"), OverridingTrainer, "OverridingTrainer overrides _step_once()"),
    ],
)
def test_sequential_updates_say_why_and_still_report(
    patched, monkeypatch, caplog, setting, pools, trainer_class, reason
):
    monkeypatch.setenv("VERL_SPLIT_OVERLAP", setting)
    patched(pools)
    trainer = trainer_class()
    with caplog.at_level(logging.INFO, logger="verl_split.overlap"):
        metrics = trainer._step_once()
    assert reason in caplog.text
    assert shared(trainer.calls["actor"], trainer.calls["critic"]) == 0.0
    assert metrics["split/overlapped"] == 0.0 and metrics["split/overlap_s"] == 0.0
    assert metrics["actor/pg_loss"] == 0.25 and metrics["split/actor_update_s"] >= WORK_S


def test_critic_warmup_step_updates_only_the_critic(patched):
    patched()
    trainer = FakeTrainer(critic_warmup=2)
    metrics = trainer._step_once()
    assert trainer.actor_batches == [] and "actor" not in trainer.calls
    assert metrics["split/overlapped"] == 0.0 and "split/actor_update_s" not in metrics
    assert metrics["split/critic_update_s"] >= WORK_S


def test_without_a_critic_call_the_actor_update_is_stock_and_says_so(patched, caplog):
    """GRPO: verl calls only _update_actor; it runs stock, and the step says it overlapped nothing."""
    patched()
    trainer = FakeTrainer()
    metrics: dict = {}
    with caplog.at_level(logging.INFO, logger="verl_split.overlap"):
        trainer._update_actor(object(), metrics)
    assert metrics == {"actor/pg_loss": 0.25, "split/overlapped": 0.0}
    assert "The actor's update runs alone: this run has no critic" in caplog.text


def test_a_blocking_critic_dispatch_runs_the_actor_after_it(patched, caplog):
    patched()
    trainer = FakeTrainer(blocking=True)
    with caplog.at_level(logging.WARNING, logger="verl_split.overlap"):
        metrics = trainer._step_once()
    assert "dispatched the critic's update with a blocking call" in caplog.text
    assert metrics["split/overlapped"] == 0.0
    assert trainer.calls["actor"][0] >= trainer.calls["critic"][1]
    assert len(trainer.actor_batches) == 1


def test_an_actor_call_on_another_batch_is_refused(patched):
    patched()
    trainer = FakeTrainer()
    with pytest.raises(RuntimeError, match="another batch"):
        trainer._step_once(batch=object(), actor_batch=object())


def test_metric_arithmetic():
    step = updates.UpdateStep(None, FakeAdapter(), "a", "c", (), {}, overlapped=True)
    step.critic, step.actor = lanes.Interval(10.0, 12.0), lanes.Interval(11.0, 14.0)
    step.actor_future = concurrent.futures.Future()
    step.both_in_flight_at = 10.5
    m = step.metrics()
    assert m["split/overlapped"] == 1.0
    assert m["split/critic_update_s"] == 2.0 and m["split/actor_update_s"] == 3.0
    assert m["split/update_wall_s"] == 4.0 and m["split/overlap_s"] == 1.0
    assert m["split/speedup"] == pytest.approx(5 / 4) and m["split/ideal_speedup"] == pytest.approx(5 / 3)
    assert m["split/actor_pool_idle_share"] == pytest.approx(1 / 4)
    assert m["split/critic_pool_idle_share"] == pytest.approx(2 / 4)
    assert m["split/dispatch_s"] == pytest.approx(0.5)


def test_a_step_planned_to_overlap_whose_critic_bypassed_the_proxy_reads_not_overlapped():
    step = updates.UpdateStep(None, FakeAdapter(), "a", "c", (), {}, overlapped=True)
    step.critic = lanes.Interval(0.0, 1.0)
    assert step.metrics()["split/overlapped"] == 0.0


def test_a_blocking_critic_dispatch_starts_no_actor_thread():
    """A dispatch that returns the result itself: the critic is done, so the actor's update runs
    where stock runs it and the step reads split/overlapped 0 (it used to read 1)."""
    step = updates.UpdateStep(None, None, "a", "c", (), {}, overlapped=True)
    result = object()
    assert step.on_critic_dispatched(result) is result
    assert step.actor_future is None and not step.really_overlapped
    assert step.metrics()["split/overlapped"] == 0.0
