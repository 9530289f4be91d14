"""Fast tests of the deferred critic update's coordination (verl_split/runtime/overlap/deferral.py).

Fakes of verl's objects, on purpose: a trainer whose ``fit`` runs, per step, a generation (a sleep
on the trainer's thread), values, ``_update_critic(batch, metrics)``, ``_update_actor(batch,
metrics)``, a checkpoint every ``save_freq`` steps and one ``Tracking.log`` -- verl v1's order -- and
a critic worker group whose non-blocking ``train_mini_batch`` returns a future with verl's
``get()``. The wrappers are verl-split's own (update_hooks.py, prep_hooks.py, deferral_hooks.py and the
``Tracking.log`` seam). They check the schedule, the joins, the held log record, failures and the
metric arithmetic in seconds; the real verl runs are in ``tests/e2e/test_overlap_e2e.py``.
No Ray, no verl trainer, no subprocess.
"""

from __future__ import annotations

import concurrent.futures
import logging
import signal
import threading
import time
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from test_updates import FakeRef

from verl_split.core import log
from verl_split.core.errors import UpdateFailedError
from verl_split.plugin import wrapping
from verl_split.runtime.metrics import tracking
from verl_split.runtime.overlap import deferral, deferral_hooks, prep_hooks, trainers, update_hooks

pytestmark = pytest.mark.unit

WORK_S = 0.1


class FakeCriticGroup:
    """The critic's workers: one update at a time, in order, like a Ray actor's calls."""

    def __init__(self, trainer):
        self.trainer = trainer

    def train_mini_batch(self, batch):
        future: concurrent.futures.Future = concurrent.futures.Future()
        step = self.trainer.global_steps

        def work():
            start = time.monotonic()
            time.sleep(self.trainer.critic_s)
            if self.trainer.fail_critic_at == step:
                future.set_exception(RuntimeError("injected critic failure"))
                return
            self.trainer.critic_version = step
            self.trainer.calls.append(("critic update", step, start, time.monotonic()))
            future.set_result({"critic/vf_loss": 0.5 + step, "critic/grad_norm": 2.0})

        threading.Thread(target=work, daemon=True).start()
        return FakeRef(future)


class FakeTracking:
    def __init__(self):
        self.records: list[tuple[int, dict, float]] = []
        self.threads: list[threading.Thread] = []  # which thread emitted each record

    def log(self, data, step):
        self.records.append((step, dict(data), time.monotonic()))
        self.threads.append(threading.current_thread())


class FakeBatch:
    def __init__(self, step):
        self.keys = [f"s{step}_{i}" for i in range(4)]
        self.partition_id = "train"
        self.tags = [{"is_padding": False}] * 3 + [{"is_padding": True}]


class FakeTrainer:
    """verl v1's step order; every call records when it ran and which critic update it saw."""

    def __init__(self, steps=3, critic_warmup=0, save_freq=0):
        self.config = OmegaConf.create({"trainer": {"critic_warmup": critic_warmup}, "global_profiler": None})
        self.global_steps = 0
        self.total_training_steps = steps
        self.save_freq = save_freq
        self.critic_wg = FakeCriticGroup(self)
        self.resource_pool_manager = SimpleNamespace(resource_pool_spec={"actor_pool": [1], "critic_pool": [1]})
        self.use_critic = True
        self.logger = FakeTracking()
        self.critic_s, self.actor_s, self.gen_s = 3 * WORK_S, WORK_S, 2 * WORK_S
        self.later_gen_s: float | None = None  # generation from step 2 on, if not gen_s
        self.fail_critic_at = None
        self.critic_version = 0  # the step whose critic update finished last
        self.calls: list[tuple] = []

    def _compute_values(self, batch, metrics):
        self.calls.append(("values", self.global_steps, self.critic_version, time.monotonic()))
        return batch

    def _update_critic(self, batch, metrics):
        output = self.critic_wg.train_mini_batch(batch).get()
        metrics.update(output)
        return batch

    def _update_actor(self, batch, metrics):
        start = time.monotonic()
        time.sleep(self.actor_s)
        self.calls.append(("actor update", self.global_steps, start, time.monotonic()))
        metrics["actor/pg_loss"] = 0.25
        return batch

    def kv_clear(self, keys, partition_id):
        """TransferQueue's clear of a step's keys (v1's fit calls it at the end of each step)."""
        self.calls.append(("clear", tuple(keys), time.monotonic()))

    def _save_checkpoint(self):
        self.calls.append(("save", self.global_steps, self.critic_version, time.monotonic()))

    def fit(self):
        for step in range(1, self.total_training_steps + 1):
            self.global_steps = step
            started = time.monotonic()
            self.calls.append(("gen", step, started))
            self.kv_clear(keys=[f"prompt{step}"], partition_id="train")  # the replay buffer's: never waits
            # generation: the actor pool's replicas, nothing of the critic; the trainer waits as verl's v1 replay
            # buffer does, polling (verl/trainer/ppo/v1/replay_buffer.py poll_interval), or as ray.get does
            # (it returns to Python for signals): a KeyboardInterrupt lands within a poll
            deadline = time.monotonic() + (
                self.later_gen_s if step > 1 and self.later_gen_s is not None else self.gen_s
            )
            while (left := deadline - time.monotonic()) > 0:
                time.sleep(min(left, 0.05))
            metrics: dict = {}
            batch = FakeBatch(step)
            self._compute_values(batch, metrics=metrics)
            self._update_critic(batch, metrics=metrics)
            if self.config.trainer.critic_warmup <= step:
                self._update_actor(batch, metrics=metrics)
            if self.save_freq and step % self.save_freq == 0:
                self._save_checkpoint()
            metrics["timing_s/step"] = time.monotonic() - started
            self.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
            self.logger.log(data=metrics, step=step)


class FakeAdapter(trainers.V1Prep):
    step_method = "fit"  # the fake's step is its fit

    def __init__(self):
        super().__init__(FakeTrainer)

    def pools(self, trainer):
        return "actor_pool", "critic_pool"

    def ref_pool(self, trainer):
        return None  # the reference inside the actor's worker (a separate one: test_prep.py)

    def critic_metrics(self, result, private, args, kwargs):
        return dict(private or {})  # the fake has no MetricsAggregator weights to apply


@pytest.fixture
def run(monkeypatch):
    """Wrap FakeTrainer as the seams wrap verl's trainer; return a function that runs its fit."""
    monkeypatch.setenv("VERL_SPLIT", "1")
    monkeypatch.setenv("VERL_SPLIT_OVERLAP", "updates,prep,defer_critic")
    monkeypatch.delenv("VERL_SPLIT_TRACE", raising=False)
    log.forget_once()
    deferral.reset()
    adapter = FakeAdapter()
    wrapped = {
        (FakeTrainer, "_update_critic"): update_hooks.make_update_critic_wrapper(adapter),
        (FakeTrainer, "_update_actor"): update_hooks.make_update_actor_wrapper(adapter),
        (FakeTrainer, "_compute_values"): prep_hooks.make_values_wrapper(adapter),
        (FakeTrainer, "fit"): deferral_hooks.wrap_fit,
        (FakeTrainer, "_save_checkpoint"): deferral_hooks.wrap_save_checkpoint,
        (FakeTracking, "log"): tracking.wrap_tracking_log,
        (FakeTrainer, "kv_clear"): deferral_hooks.wrap_kv_clear,
    }
    for (owner, attr), wrapper in wrapped.items():
        wrapping.wrap(owner, attr, wrapper)

    def fit(trainer):
        trainer.fit()
        return trainer

    yield fit
    for owner, attr in wrapped:
        wrapping.unwrap(owner, attr)
    deferral.reset()


def calls_of(trainer, kind):
    return [c for c in trainer.calls if c[0] == kind]


def test_the_critic_update_runs_into_the_next_generation_and_values_waits_for_it(run):
    trainer = run(FakeTrainer(steps=3))
    gens, values = calls_of(trainer, "gen"), calls_of(trainer, "values")
    critic_updates = calls_of(trainer, "critic update")
    # Step 1's critic update (3 units) outlasts the actor's (1 unit): it ends inside step 2's generation.
    assert gens[1][2] < critic_updates[0][3], (gens, critic_updates)
    # values of steps 2 and 3 saw the critic of the step before: the join came first.
    assert [v[2] for v in values] == [0, 1, 2]
    # The last step's update is joined in its own step: fit returns with every update done.
    assert trainer.critic_version == 3


def test_each_step_logs_its_own_critic_metrics_and_what_hid(run):
    trainer = FakeTrainer(steps=3)
    # The next generation (4 units) outlasts the critic's left-over (2 units) by 2: the update is over before
    # values asks for it, whatever the machine's load (with generation 2 units long the two ended together).
    trainer.later_gen_s = 4 * WORK_S
    trainer = run(trainer)
    records = {step: data for step, data, _ in trainer.logger.records}
    actor_ends = {c[1]: c[3] for c in calls_of(trainer, "actor update")}
    critic_ends = {c[1]: c[3] for c in calls_of(trainer, "critic update")}
    assert sorted(records) == [1, 2, 3] and [s for s, *_ in trainer.logger.records] == [1, 2, 3]
    for step in (1, 2, 3):
        assert records[step]["critic/vf_loss"] == 0.5 + step  # the step's own update, not the next one's
        assert records[step]["split/critic_update_s"] >= 3 * WORK_S
        assert "split/critic_pool_busy_share" in records[step]  # whole-step metrics, after the merge
    for step in (1, 2):
        r = records[step]
        assert r["split/critic_update_deferred"] == 1.0
        # 3 units of critic: 1 beside the actor's update, the rest behind the next generation (what ran after the
        # step's actor update, as the calls recorded it), none waited for.
        assert r["split/critic_update_hidden_s"] >= critic_ends[step] - actor_ends[step] - 0.5 * WORK_S, r
        assert r["split/critic_join_wait_s"] < 0.5 * WORK_S, r
        parts = r["split/critic_update_hidden_s"] + r["split/critic_join_wait_s"]
        assert parts <= r["split/critic_update_s"] + 1e-6
        assert r["split/log_delay_s"] >= 1.5 * WORK_S  # held until the next step's values
    assert records[3]["split/critic_update_deferred"] == 0.0  # the last step joins its own update
    assert "split/critic_update_hidden_s" not in records[3]


def test_a_longer_critic_is_waited_for_at_values_and_says_so(run):
    trainer = FakeTrainer(steps=2)
    trainer.critic_s = 6 * WORK_S  # outlasts the actor's update and the next generation
    run(trainer)
    record = trainer.logger.records[0][1]
    # Waited for, and said so; how long depends on the machine's load (the sleeps around it stretch), so no figure.
    assert record["split/critic_join_wait_s"] > 0, record
    assert calls_of(trainer, "values")[1][2] == 1


def test_a_checkpoint_holds_the_updated_critic(run):
    trainer = run(FakeTrainer(steps=3, save_freq=1))
    assert [save[2] for save in calls_of(trainer, "save")] == [1, 2, 3]
    records = {step: data for step, data, _ in trainer.logger.records}
    assert records[1]["split/critic_update_deferred"] == 1.0  # launched as deferred, joined at the save


def test_critic_warmup_and_the_switch_off_keep_the_stock_order_with_one_line(run, monkeypatch, caplog):
    trainer = FakeTrainer(steps=2, critic_warmup=2)
    with caplog.at_level(logging.INFO, logger="verl_split.overlap"):
        run(trainer)
    assert "The critic's update is joined in its own step: critic warm-up" in caplog.text
    assert calls_of(trainer, "values")[1][2] == 1  # step 1's update was done before step 2 started
    records = {step: data for step, data, _ in trainer.logger.records}
    assert records[1]["split/critic_update_deferred"] == 0.0  # asked for, not done: said in the log and here


def test_updates_overlap_without_defer_critic_joins_in_the_step(run, monkeypatch):
    monkeypatch.setenv("VERL_SPLIT_OVERLAP", "updates,prep")
    trainer = run(FakeTrainer(steps=2))
    first = trainer.logger.records[0][1]
    assert first["split/overlapped"] == 1.0 and "split/critic_update_deferred" not in first
    critic_end = calls_of(trainer, "critic update")[0][3]
    assert critic_end <= calls_of(trainer, "gen")[1][2]  # done before step 2 began


def test_a_failed_deferred_update_stops_the_run_naming_role_pool_and_step(run, monkeypatch):
    trainer = FakeTrainer(steps=3)
    trainer.fail_critic_at = 1
    with pytest.raises(UpdateFailedError, match=r"the critic update of step 1 failed on resource pool 'critic_pool'"):
        run(trainer)
    assert calls_of(trainer, "values")[1:] == []  # step 2's values never ran on a stale critic
    step1 = trainer.logger.records[0][1]  # step 1's other metrics were not lost
    assert step1["actor/pg_loss"] == 0.25 and step1["split/critic_metrics_missing"] == 1.0


def test_a_trainer_stuck_in_one_call_is_ended(run, monkeypatch):
    """A GPU generation can last minutes with no seam passed: the process ends instead of waiting it out."""
    monkeypatch.setattr(deferral, "ABORT_AFTER_S", 0.3)
    ended = threading.Event()
    monkeypatch.setattr(deferral.os, "_exit", lambda code: ended.set())
    trainer = FakeTrainer(steps=2)
    trainer.fail_critic_at, trainer.later_gen_s = 1, 10 * WORK_S
    thread = threading.Thread(target=lambda: pytest.raises(UpdateFailedError, run, trainer), daemon=True)
    thread.start()
    assert ended.wait(10), "the process was not ended"  # a hang guard: the 0.3 s limit ended it, not step 2's end
    assert not any(call[1] == 2 for call in calls_of(trainer, "actor update"))
    thread.join(10)


def test_a_trainer_stuck_in_one_call_on_the_main_thread_is_interrupted_and_raises_the_failure(run, monkeypatch):
    """verl's TaskRunner runs fit on its actor's main thread: the run ends by the failure, not os._exit.

    Python's own SIGINT handling, as a process started from a terminal has it: a test runner started in the
    background inherits SIGINT ignored, and then the interrupt cannot land (os._exit's case, the test above)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        monkeypatch.setattr(deferral, "INTERRUPT_AFTER_S", 0.3)
        monkeypatch.setattr(deferral.os, "_exit", lambda code: pytest.fail("the process was ended, not interrupted"))
        trainer = FakeTrainer(steps=2)
        trainer.fail_critic_at, trainer.later_gen_s = 1, 60 * WORK_S  # generation of step 2: 6 s in one call
        with pytest.raises(UpdateFailedError, match=r"the critic update of step 1 failed") as raised:
            run(trainer)
        assert isinstance(raised.value.__cause__, KeyboardInterrupt)  # interrupted, not waited out
        assert trainer.logger.records[0][1]["split/critic_metrics_missing"] == 1.0  # step 1's record was not lost
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def failed_watch(monkeypatch):
    """A failed deferred update on the main thread's trainer, and what its timers would do, recorded (short delays)."""
    monkeypatch.setattr(deferral, "INTERRUPT_AFTER_S", 0.1)
    monkeypatch.setattr(deferral, "ABORT_AFTER_S", 0.2)
    after_fit: list[str] = []  # the timers run on threads of their own: recorded, asserted by the tests
    monkeypatch.setattr(deferral.os, "_exit", lambda code: after_fit.append("ended"))
    monkeypatch.setattr(deferral._thread, "interrupt_main", lambda: after_fit.append("interrupted"))
    failed: concurrent.futures.Future = concurrent.futures.Future()
    failed.set_exception(RuntimeError("critic died"))
    deferred = SimpleNamespace(
        result=failed,
        failure=UpdateFailedError("critic died"),
        raised=False,
        interrupted=False,
        trainer_thread=threading.main_thread(),
    )
    deferral.reset()
    yield deferred, after_fit
    deferral.reset()


def test_once_fit_has_ended_a_failed_update_neither_interrupts_nor_ends_the_process(failed_watch):
    """A failure that reached the trainer on another thread (``raised`` unset) must not end a run that is
    already tearing down: ``wrap_fit`` cancels the timers (code_review_3.md item 7)."""
    deferred, after_fit = failed_watch

    def fit():
        deferral.watch_failure(deferred)  # while fit runs: both timers start
        assert len(deferral._timers) == 2
        raise RuntimeError("the run failed elsewhere")

    with pytest.raises(RuntimeError):
        deferral_hooks.wrap_fit(lambda: fit(), None, (), {})
    time.sleep(0.4)  # past both timers
    assert after_fit == []


def test_a_failure_watched_after_fit_has_ended_starts_no_timer(failed_watch):
    """The trainer sees a failed update once its future holds the exception, before the future's callbacks run:
    fit can raise it and end before ``watch_failure`` runs on the critic's thread. That late watch must start
    nothing (it once interrupted a later test's main thread 5 s on, and would end a run tearing down)."""
    deferred, after_fit = failed_watch
    deferral_hooks.wrap_fit(lambda: None, None, (), {})  # fit has run and ended
    deferral.watch_failure(deferred)  # the critic thread's callback, late
    time.sleep(0.4)  # past both timers
    assert after_fit == [] and deferral._timers == []


def test_v1_critic_metrics_are_reduced_as_verl_reduces_them():
    """The same reduction verl's PPOTrainer.step applies (MetricsAggregator, by non-padding samples)."""
    from verl.trainer.ppo.v1.utils import MetricsAggregator

    from verl_split.runtime.overlap.trainers import V1Adapter

    private = {"critic/vf_loss": 0.1, "critic/vf_clipfrac": 0.3, "perf/mfu/critic": 0.7}
    batch = FakeBatch(1)
    stock = MetricsAggregator()
    stock.add_step_metrics({**private, "actor/pg_loss": 0.2}, sample_count=3)
    expected = {k: v for k, v in stock.get_aggregated_metrics().items() if k in private}
    assert V1Adapter(object).critic_metrics(batch, private, (batch, {}), {}) == expected


def test_v0_placeholder_and_critic_metrics_are_what_fit_reduces():
    from verl import DataProto

    from verl_split.runtime.overlap.trainers import V0Adapter

    adapter = V0Adapter(object)
    placeholder = adapter.placeholder((), {})
    assert placeholder.meta_info == {"metrics": {}}
    output = DataProto.from_single_dict(data={}, meta_info={"metrics": {"critic/vf_loss": [1.0, 3.0]}})
    assert adapter.critic_metrics(output, None, (), {}) == {"critic/vf_loss": 2.0}


def test_clears_of_the_updates_keys_wait_for_its_join(run):
    """v1 clears a step's TransferQueue keys at its end; the critic's workers still read them."""
    trainer = run(FakeTrainer(steps=2))
    clears = {keys: at for kind, keys, at in calls_of(trainer, "clear")}
    critic_end = calls_of(trainer, "critic update")[0][3]
    assert clears[tuple(FakeBatch(1).keys)] >= critic_end  # postponed to the join at step 2's values
    assert clears[("prompt2",)] < critic_end  # another key (a prompt's): cleared at once
    assert tuple(FakeBatch(2).keys) in clears  # the last step joined in the step: cleared in place
