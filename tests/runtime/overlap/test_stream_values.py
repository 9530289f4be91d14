"""Values streamed into generation's tail: the coordination rules, with verl's objects faked.

The exactness gate, the micro-batch plan, the lane that values finished samples (TransferQueue's listing and the
critic's worker group faked), the critic proxy that dispatches only the rest, and each reason streaming steps
aside. Fakes on purpose: these are verl-split's own rules; the real verl runs are in
tests/e2e/test_stream_values_e2e.py. No Ray, no verl trainer, no subprocess.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import types
from types import SimpleNamespace

import pytest

from verl_split.core import log, settings
from verl_split.core import metric_names as names
from verl_split.core.errors import PrepFailedError
from verl_split.runtime.overlap import deferral, lanes, stream_values_v1
from verl_split.runtime.overlap.stream_values import StreamStep, plan_chunk, stepped_aside, why_not_exact
from verl_split.runtime.overlap.stream_values_v1 import StreamedCriticGroup, ValuesLane, why_not_stream

pytestmark = pytest.mark.unit


# -- the exactness gate and the plan -------------------------------------------------------------------------
def engine(dynamic: bool, micro: int | None) -> SimpleNamespace:
    return SimpleNamespace(use_dynamic_bsz=dynamic, infer_micro_batch_size_per_gpu=micro)


def test_exact_only_where_each_sample_is_forwarded_alone():
    assert why_not_exact(engine(False, 1)) == ""
    assert "use_dynamic_bsz" in why_not_exact(engine(True, 1))
    assert "forwards 4 samples at once" in why_not_exact(engine(False, 4))
    # verl 0.9.1's EngineConfig default: dynamic batch sizes, no micro-batch size.
    assert "infer_micro_batch_size_per_gpu=1" in why_not_exact(SimpleNamespace())


def test_a_chunk_gives_every_data_parallel_rank_whole_rows():
    assert plan_chunk(["a", "b", "c"], 1) == ["a", "b", "c"]
    assert plan_chunk(["a", "b", "c"], 2) == ["a", "b"]
    assert plan_chunk(["a"], 2) == []
    with pytest.raises(ValueError, match="data_parallel"):
        plan_chunk(["a"], 0)


def test_coverage_counts_what_was_valued_before_generation_ended():
    stream = StreamStep(3, "critic_pool", "actor_pool")
    stream.add(["a", "b"], 1.0, 2.0)
    stream.generation_ended()
    stream.add(["c"], 3.0, 3.5)  # after generation: valued, not covered
    stream.batch_size = 4
    assert stream.rest(["d", "c", "b", "a"]) == [0]
    metrics = stream.metrics()
    assert metrics[names.STREAM_COVERAGE] == 0.5
    assert metrics[names.STREAM_VALUES_S] == 1.5
    assert metrics[names.STREAM_VALUES_OFF] == 0.0


def test_a_failed_stream_names_the_critic_pool_and_the_way_out():
    stream = StreamStep(2, "critic_pool", "actor_rollout_ref_pool")
    stream.failed(RuntimeError("boom"))
    error = stream.failure_error()
    assert isinstance(error, PrepFailedError)
    assert "streamed values failed on resource pool 'critic_pool' (step 2)" in str(error)
    assert "VERL_SPLIT_STREAM_VALUES=off" in str(error)


def test_stepping_aside_says_why_once_and_sets_the_metric(caplog):
    log.forget_once()
    with caplog.at_level("INFO", logger="verl_split.stream_values"):
        metrics = stepped_aside("a reason", 1.5)
        stepped_aside("a reason")
    assert [r.getMessage() for r in caplog.records].count(
        "Values are not streamed into generation's tail: a reason."
    ) == 1
    assert metrics[names.STREAM_VALUES_OFF] == 1.0 and metrics[names.VALUES_AFTER_GEN_S] == 1.5


# -- the lane and the proxy, on faked TransferQueue and critic -----------------------------------------------
class FakeMeta:
    """transfer_queue.KVBatchMeta's fields."""

    def __init__(self, keys, tags, partition_id=None, fields=None, extra_info=None):
        self.keys, self.tags, self.partition_id, self.fields = list(keys), list(tags), partition_id, fields
        self.extra_info = dict(extra_info or {})

    def __len__(self):
        return len(self.keys)


class FakeTransferQueue:
    """The step's trajectories as the agent loop lists them; ``finish`` adds some."""

    def __init__(self):
        self.listed: dict[str, dict] = {}

    def finish(self, *keys, step=1):
        for key in keys:
            self.listed[key] = {"status": "success", "global_steps": step}

    def kv_list(self, partition_id=None):
        return {"train": dict(self.listed)}


class FakeCritic:
    """The critic's worker group: records each infer_batch's keys and flags; can fail."""

    def __init__(self, data_parallel=1, fail=False):
        self._dispatch_info = {"train": list(range(data_parallel))}
        self.calls: list[tuple[list[str], dict]] = []
        self.fail = fail
        self.called = threading.Event()

    def infer_batch(self, meta):
        self.calls.append((list(meta.keys), dict(meta.extra_info)))
        self.called.set()
        if self.fail:
            raise RuntimeError("injected failure in the critic's infer_batch")
        return SimpleNamespace(futures=[])


@pytest.fixture
def fake_tq(monkeypatch):
    queue = FakeTransferQueue()
    module = types.ModuleType("transfer_queue")
    module.kv_list = queue.kv_list
    module.KVBatchMeta = FakeMeta
    monkeypatch.setitem(sys.modules, "transfer_queue", module)
    monkeypatch.setattr(stream_values_v1, "wait_for", lambda output: output)
    monkeypatch.setattr(stream_values_v1, "POLL_S", 0.01)
    job = SimpleNamespace(rollout=SimpleNamespace(temperature=1.0, n=1), batch=SimpleNamespace(values=()))
    monkeypatch.setattr(stream_values_v1, "trainer_job", lambda trainer: job)
    deferral.reset()
    return queue


def fake_trainer(critic) -> SimpleNamespace:
    return SimpleNamespace(critic_wg=critic, global_steps=1)


def start_lane(critic, expected=4, on_release=None):
    trainer = fake_trainer(critic)
    lane = ValuesLane(trainer, StreamStep(1, "critic_pool", "actor_pool"), critic, expected)
    if on_release is not None:
        release = lane.release
        lane.release = lambda: (on_release(), release())
    trainer.critic_wg = StreamedCriticGroup(critic, trainer, lane)
    lane.start()
    return trainer, lane


def stock_values_call(trainer, keys, extra_info=None):
    """What stock _compute_values sends: the whole balanced batch, its flags."""
    batch = FakeMeta(keys, [{}] * len(keys), "train", None, extra_info or {"temperature": 1.0, "compute_loss": False})
    group = trainer.critic_wg
    group.infer_batch(batch)
    return group


def wait_until(condition):
    """Poll a condition the lane's thread makes true (no wall-clock bound: the test's own timeout guards it)."""
    event = threading.Event()
    while not condition():
        event.wait(0.01)


def test_the_lane_values_finished_samples_and_the_stock_call_only_the_rest(fake_tq):
    critic = FakeCritic()
    trainer, lane = start_lane(critic)
    fake_tq.finish("p1_0_0", "p2_0_0")
    fake_tq.finish("old_0_0", step=0)  # the step before's: never this step's
    wait_until(lambda: len(lane.stream.streamed) == 2)
    lane.stream.generation_ended()
    fake_tq.finish("p3_0_0", "p4_0_0")
    stock_values_call(trainer, ["p4_0_0", "p1_0_0", "p3_0_0", "p2_0_0", "pad_0_0"])
    assert trainer.critic_wg is critic  # the proxy stepped back after the step's values call
    streamed = [keys for keys, _ in critic.calls[:-1]]
    assert sorted(k for keys in streamed for k in keys) == ["p1_0_0", "p2_0_0"]
    rest, flags = critic.calls[-1]
    assert rest == ["p4_0_0", "p3_0_0", "pad_0_0"]  # the stock batch's order, the streamed ones left out
    assert flags == {"temperature": 1.0, "compute_loss": False}
    handed = lanes.take_metrics(trainer)
    assert handed[names.STREAM_COVERAGE] == pytest.approx(2 / 5)
    assert handed[names.STREAM_VALUES_OFF] == 0.0


def test_other_request_flags_discard_the_streamed_values(fake_tq, caplog):
    critic = FakeCritic()
    trainer, lane = start_lane(critic)
    fake_tq.finish("p1_0_0")
    wait_until(lambda: lane.stream.streamed)
    log.forget_once()
    with caplog.at_level("WARNING", logger="verl_split.stream_values"):
        stock_values_call(trainer, ["p1_0_0", "p2_0_0"], {"temperature": 1.0, "compute_loss": False, "x": 1})
    assert critic.calls[-1][0] == ["p1_0_0", "p2_0_0"]  # the whole batch, as stock
    assert "Streamed values discarded" in caplog.text and "(x)" in caplog.text


def test_old_log_probs_entropy_flag_does_not_discard_them(fake_tq):
    critic = FakeCritic()
    trainer, lane = start_lane(critic)
    fake_tq.finish("p1_0_0")
    wait_until(lambda: lane.stream.streamed)
    stock_values_call(
        trainer, ["p1_0_0", "p2_0_0"], {"temperature": 1.0, "compute_loss": False, "calculate_entropy": True}
    )
    assert critic.calls[-1][0] == ["p2_0_0"]


def test_a_chunk_waits_for_a_row_per_data_parallel_rank(fake_tq):
    critic = FakeCritic(data_parallel=2)
    trainer, lane = start_lane(critic)
    fake_tq.finish("p1_0_0")
    fake_tq.finish("p2_0_0", "p3_0_0")
    wait_until(lambda: len(lane.stream.streamed) == 2)
    stock_values_call(trainer, ["p1_0_0", "p2_0_0", "p3_0_0", "p4_0_0"])
    assert all(len(keys) % 2 == 0 for keys, _ in critic.calls)
    assert critic.calls[-1][0] == ["p3_0_0", "p4_0_0"]


def test_a_failed_micro_batch_ends_the_run_at_generations_end_naming_the_critic(fake_tq):
    critic = FakeCritic(fail=True)
    released = threading.Event()
    trainer, lane = start_lane(critic, on_release=released.set)
    stream_values_v1._current = lane
    fake_tq.finish("p1_0_0")
    lane.thread.join()
    assert released.is_set()  # the forced tail is released, so that generation can end
    replay_buffer = SimpleNamespace()
    with pytest.raises(PrepFailedError, match="streamed values failed on resource pool 'critic_pool' \\(step 1\\)"):
        stream_values_v1.wrap_sample(lambda *a, **k: "batch", replay_buffer, (1, "train", 4), {})
    stream_values_v1._current = None


def test_the_forced_tail_is_released_once_what_the_servers_answered_is_valued(fake_tq, monkeypatch):
    frozen = dataclasses.replace(settings.current(), cpu_hold_after=1)
    monkeypatch.setattr(settings, "current", lambda: frozen)
    monkeypatch.setattr(stream_values_v1.hold, "server_count", lambda: 2)
    releases = []
    monkeypatch.setattr(stream_values_v1.hold, "release_all", lambda: releases.append(True))
    critic = FakeCritic()
    trainer, lane = start_lane(critic)
    fake_tq.finish("p1_0_0")
    wait_until(lambda: lane.stream.streamed)
    assert not releases  # one server's answer valued, the other's still to come
    fake_tq.finish("p2_0_0")
    wait_until(lambda: releases)
    assert lane.stream.streamed == ["p1_0_0", "p2_0_0"]
    stock_values_call(trainer, ["p1_0_0", "p2_0_0", "p3_0_0", "p4_0_0"])
    assert releases == [True]


# -- each reason it steps aside ------------------------------------------------------------------------------
class StockTrainer:
    """Stands for verl's v1 PPOTrainer: the class whose stock step the lane relies on."""

    def step(self): ...
    def _step_once(self): ...
    def prepare_step(self): ...
    def _compute_values(self): ...


class ReplayBuffer:
    filter_groups_metric = None

    def sample(self): ...


class OwnLoop(StockTrainer):
    def _step_once(self): ...


class CustomSampler(ReplayBuffer):
    def sample(self): ...


class FakeAdapter:
    trainer_class = StockTrainer

    def __init__(self, pools=("actor_pool", "critic_pool")):
        self._pools = pools

    def pools(self, trainer):
        return self._pools


@pytest.fixture
def streamable(monkeypatch):
    monkeypatch.setattr(stream_values_v1, "_shared_rollout", lambda trainer: False)
    monkeypatch.setattr(stream_values_v1, "_critic_engine", lambda trainer: trainer.engine)

    def make(cls=StockTrainer, **attrs):
        trainer = cls()
        defaults = dict(use_critic=True, trainer_mode="sync", parameter_sync_step=1, replay_buffer=ReplayBuffer())
        for key, value in {**defaults, "engine": engine(False, 1), **attrs}.items():
            setattr(trainer, key, value)
        return trainer

    return make


def test_an_exact_split_sync_run_streams(streamable):
    assert why_not_stream(streamable(), FakeAdapter()) == ""


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"use_critic": False}, "no critic"),
        ({"trainer_mode": "colocate_async"}, "'colocate_async' mode (asynchronous)"),
        ({"parameter_sync_step": 2}, "parameter_sync_step > 1"),
        ({"cls": OwnLoop}, "OwnLoop overrides _step_once() (a trainer with its own loop)"),
        ({"replay_buffer": CustomSampler()}, "CustomSampler's (trainer.v1.sampler.custom_sampler)"),
        ({"replay_buffer": SimpleNamespace(sample=None)}, "not verl's sync one"),
        ({"engine": engine(True, None)}, "use_dynamic_bsz"),
        ({"ref_in_actor": True, "use_reference_policy": True}, "no_lora_adapter"),
    ],
)
def test_each_reason_to_step_aside_is_named(streamable, change, reason):
    cls = change.pop("cls", StockTrainer)
    assert reason in why_not_stream(streamable(cls, **change), FakeAdapter())


def test_dapo_steps_aside(streamable):
    buffer = ReplayBuffer()
    buffer.filter_groups_metric = "acc"
    assert "DAPO" in why_not_stream(streamable(replay_buffer=buffer), FakeAdapter())


def test_one_pool_and_off_step_aside(streamable, monkeypatch):
    assert "share resource pool 'pool'" in why_not_stream(streamable(), FakeAdapter(("pool", "pool")))
    monkeypatch.setattr(stream_values_v1, "_shared_rollout", lambda trainer: True)
    assert "shared rollout" in why_not_stream(streamable(), FakeAdapter())
    frozen = dataclasses.replace(settings.current(), stream_values=False)
    monkeypatch.setattr(settings, "current", lambda: frozen)
    assert why_not_stream(streamable(), FakeAdapter()) == "VERL_SPLIT_STREAM_VALUES is off"


def test_a_stepped_aside_step_is_timed_and_reported_off(fake_tq):
    critic = FakeCritic()
    trainer = fake_trainer(critic)
    trainer.critic_wg = StreamedCriticGroup(critic, trainer, None, "a reason")
    stock_values_call(trainer, ["p1_0_0"])
    assert trainer.critic_wg is critic
    assert critic.calls[0][0] == ["p1_0_0"]
    assert lanes.take_metrics(trainer)[names.STREAM_VALUES_OFF] == 1.0
