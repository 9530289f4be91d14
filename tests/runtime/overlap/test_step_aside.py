"""No overlap steps aside silently: each reason it does not apply, one log line and a ``split/*`` metric.

One test per fallback of the three overlaps (the updates, the preparation, the critic's update deferred into
the next step), on a fake trainer with verl v1's step order (test_deferral.py's, with an old_log_prob call
added) under verl-split's own wrappers. Fakes of verl's objects, on purpose: these are our coordination
rules; the real verl runs are in tests/e2e/. No Ray, no verl trainer, no subprocess.
"""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest
from test_deferral import FakeAdapter, FakeBatch, FakeCriticGroup, FakeTracking, FakeTrainer

from verl_split.core import log
from verl_split.plugin import wrapping
from verl_split.runtime.metrics import tracking
from verl_split.runtime.overlap import deferral, deferral_hooks, prep_hooks, update_hooks

pytestmark = pytest.mark.unit


class StepTrainer(FakeTrainer):
    """test_deferral's trainer with old_log_prob before values, a run without a critic, and a critic that may
    dispatch blocking. Its step is its own ``fit``: the class whose stock step the overlaps recognise."""

    blocking_critic = False
    bypass = False  # verl's bypass mode without a reference policy: no actor-side call before values
    _update_actor = FakeTrainer._update_actor  # here, so that it is wrapped on this class
    _save_checkpoint = FakeTrainer._save_checkpoint

    def _compute_old_log_prob(self, batch, metrics):
        return batch

    def _compute_ref_log_prob(self, batch, metrics):
        return batch

    def _compute_values(self, batch, metrics):
        return batch

    def _update_critic(self, batch, metrics):
        out = self.critic_wg.train_mini_batch(batch)
        metrics.update(out.value if self.blocking_critic else out.get())
        return batch

    def fit(self):
        for step in range(1, self.total_training_steps + 1):
            self.global_steps = step
            metrics: dict = {}
            batch = FakeBatch(step)
            if not self.bypass:
                self._compute_old_log_prob(batch, metrics=metrics)
            if self.use_critic:
                self._compute_values(batch, metrics=metrics)
                self._update_critic(batch, metrics=metrics)
            if self.config.trainer.critic_warmup <= step:
                self._update_actor(batch, metrics=metrics)
            self.logger.log(data=metrics, step=step)


class BlockingCriticGroup(FakeCriticGroup):
    """A worker-group method registered blocking: the call returns the result itself, no future."""

    def train_mini_batch(self, batch):
        return SimpleNamespace(value=super().train_mini_batch(batch).get())


class OverridesFit(StepTrainer):
    def fit(self):
        return super().fit()


class OverridesValues(StepTrainer):
    def _compute_values(self, batch, metrics):
        return super()._compute_values(batch, metrics)


class Adapter(FakeAdapter):
    def __init__(self, shared_pool=False):
        super().__init__()
        self.trainer_class = StepTrainer
        self.shared_pool = shared_pool

    def pools(self, trainer):
        return ("global_pool", "global_pool") if self.shared_pool else ("actor_pool", "critic_pool")

    def snapshot(self, batch):
        return batch  # the fake's batch is never written to

    def values_result(self, step, result, args, kwargs):
        return result


@pytest.fixture
def run(monkeypatch, caplog):
    """Run a trainer's fit under verl-split's wrappers; return (log text, records by step)."""
    monkeypatch.delenv("VERL_SPLIT_TRACE", raising=False)
    wrapped: list[tuple[type, str]] = []

    def fit(trainer, overlap="on", shared_pool=False):
        monkeypatch.setenv("VERL_SPLIT", "1")
        monkeypatch.setenv("VERL_SPLIT_OVERLAP", overlap)
        from verl_split.core import settings

        settings.thaw()
        log.forget_once()
        deferral.reset()
        adapter = Adapter(shared_pool)
        wrappers = {
            (StepTrainer, "_update_critic"): update_hooks.make_update_critic_wrapper(adapter),
            (StepTrainer, "_update_actor"): update_hooks.make_update_actor_wrapper(adapter),
            (StepTrainer, "_compute_old_log_prob"): prep_hooks.make_actor_compute_wrapper(adapter),
            (StepTrainer, "_compute_values"): prep_hooks.make_values_wrapper(adapter),
            (StepTrainer, "fit"): deferral_hooks.wrap_fit,
            (StepTrainer, "_save_checkpoint"): deferral_hooks.wrap_save_checkpoint,
            (FakeTracking, "log"): tracking.wrap_tracking_log,
        }
        for (owner, attr), wrapper in wrappers.items():
            wrapping.wrap(owner, attr, wrapper)
            wrapped.append((owner, attr))
        with caplog.at_level(logging.INFO, logger="verl_split"):
            trainer.fit()
        return caplog.text, {step: data for step, data, _ in trainer.logger.records}

    yield fit
    for owner, attr in wrapped:
        wrapping.unwrap(owner, attr)
    deferral.reset()


def steps(trainer_class=StepTrainer, n=2, **attrs):
    trainer = trainer_class(steps=n, **{k: attrs.pop(k) for k in ("critic_warmup",) if k in attrs})
    trainer.critic_s = trainer.actor_s = 0.02  # the lines and metrics are what counts here, not the times
    for key, value in attrs.items():
        setattr(trainer, key, value)
    if trainer.blocking_critic:
        trainer.critic_wg = BlockingCriticGroup(trainer)
    return trainer


def assert_in_every_step(records, key, value, steps_=None):
    for step in steps_ or sorted(records):
        assert records[step].get(key) == value, (step, key, records[step])


# -- the updates --------------------------------------------------------------------------------
def test_updates_off_by_the_switch(run):
    text, records = run(steps(), overlap="off")
    assert "Actor and critic updates run one after the other: VERL_SPLIT_OVERLAP is off." in text
    assert_in_every_step(records, "split/overlapped", 0.0)


def test_updates_on_one_pool(run):
    text, records = run(steps(), shared_pool=True)
    assert "run one after the other: actor and critic share resource pool 'global_pool'." in text
    assert_in_every_step(records, "split/overlapped", 0.0)
    assert "The critic's update is joined in its own step: actor and critic share resource pool" in text
    assert_in_every_step(records, "split/critic_update_deferred", 0.0)


def test_updates_under_a_trainer_that_overrides_its_step(run):
    text, records = run(steps(OverridesFit))
    assert "OverridesFit overrides fit(), so the order of its updates is unknown." in text
    assert_in_every_step(records, "split/overlapped", 0.0)


def test_updates_in_a_critic_warmup_step(run):
    text, records = run(steps(critic_warmup=2))
    assert "The critic's update runs alone: critic warm-up (trainer.critic_warmup)" in text
    assert records[1]["split/overlapped"] == 0.0 and "split/actor_update_s" not in records[1]
    assert records[1]["split/critic_update_deferred"] == 0.0


def test_updates_with_a_blocking_critic_dispatch(run):
    text, records = run(steps(blocking_critic=True), overlap="updates,prep")
    assert "Actor and critic updates run one after the other: StepTrainer._update_critic dispatched" in text
    assert "WARNING" in text
    assert_in_every_step(records, "split/overlapped", 0.0)


def test_updates_without_a_critic(run):
    text, records = run(steps(use_critic=False))
    assert "The actor's update runs alone: this run has no critic (e.g. GRPO)" in text
    assert "Preparation (old_log_prob, ref, values) runs one phase after the other: this run has no critic" in text
    assert_in_every_step(records, "split/overlapped", 0.0)


# -- the deferred critic update ------------------------------------------------------------------
def test_deferral_with_a_blocking_critic_dispatch(run):
    """verl 0.7's Megatron critic before its seam: the deferral said nothing and ran sequentially."""
    text, records = run(steps(blocking_critic=True))
    assert "The critic's update is joined in its own step: StepTrainer._update_critic dispatched" in text
    assert_in_every_step(records, "split/critic_update_deferred", 0.0)
    assert_in_every_step(records, "split/overlapped", 0.0)


def test_deferral_on_the_last_step(run):
    text, records = run(steps(n=2))
    assert "joined in its own step: this is the run's last step" in text
    assert records[1]["split/critic_update_deferred"] == 1.0 and records[2]["split/critic_update_deferred"] == 0.0


def test_deferral_under_the_profiler(run):
    trainer = steps()
    trainer.config.global_profiler = {"steps": [1]}
    text, records = run(trainer)
    assert "joined in its own step: verl's profiler (global_profiler.steps)" in text
    assert_in_every_step(records, "split/critic_update_deferred", 0.0)


@pytest.mark.parametrize(
    ("attr", "value", "line"),
    [
        ("trainer_mode", "separate_async", "verl's v1 trainer runs in 'separate_async' mode"),
        ("parameter_sync_step", 2, "trainer.v1 parameter_sync_step > 1 runs several updates per step"),
    ],
)
def test_deferral_under_another_v1_mode(run, attr, value, line):
    text, records = run(steps(**{attr: value}))
    assert f"The critic's update is joined in its own step: {line}" in text
    assert_in_every_step(records, "split/critic_update_deferred", 0.0)
    assert_in_every_step(records, "split/overlapped", 1.0)  # the update overlap itself still applies


# -- the preparation -----------------------------------------------------------------------------
def test_prep_off_by_the_switch(run):
    text, records = run(steps(), overlap="updates")
    assert "runs one phase after the other: VERL_SPLIT_OVERLAP does not include prep." in text
    assert_in_every_step(records, "split/prep_overlapped", 0.0)


def test_prep_on_one_pool(run):
    text, records = run(steps(), shared_pool=True)
    assert "runs one phase after the other: actor and critic share resource pool 'global_pool'." in text
    assert_in_every_step(records, "split/prep_overlapped", 0.0)


def test_prep_under_a_trainer_that_overrides_values(run):
    text, records = run(steps(OverridesValues))
    assert "runs one phase after the other: OverridesValues overrides _compute_values()." in text
    assert_in_every_step(records, "split/prep_overlapped", 0.0)


def test_prep_with_the_reference_inside_a_lora_actor(run):
    text, records = run(steps(ref_in_actor=True, use_reference_policy=True))
    assert "the reference policy runs inside the LoRA actor (ref_in_actor)" in text
    assert_in_every_step(records, "split/prep_overlapped", 0.0)


def test_prep_without_an_actor_call_before_values(run):
    text, records = run(steps(bypass=True))
    assert "no old_log_prob or ref call came before values in this step" in text
    assert_in_every_step(records, "split/prep_overlapped", 0.0)


# -- where a deferred step's record is logged -----------------------------------------------------
def test_a_deferred_step_s_record_is_logged_on_the_trainer_s_thread_before_the_next_one(run):
    """Step k's critic update is joined by step k+1's values lane; verl's trackers still get step k's record
    from the trainer's thread, before step k+1's (megatron_scale.md §2: it came from the values lane)."""
    trainer = steps(n=3)
    trainer.critic_s = 0.2  # outlasts the actor's update: joined in the next step's values
    text, records = run(trainer)
    assert records[1]["split/critic_update_deferred"] == 1.0 and "critic/vf_loss" in records[1]
    assert [step for step, *_ in trainer.logger.records] == [1, 2, 3]
    assert set(trainer.logger.threads) == {threading.main_thread()}
