"""Fast tests of the preparation overlap's coordination (verl_split/runtime/overlap/prep.py and prep_hooks.py).

Fakes of verl's objects, on purpose: a trainer whose ``fit`` calls the three stock compute
methods in verl's order, a batch with ``DataProto``'s ``select``/``union`` semantics, and
workers that are sleeps. They check our own logic -- launch, join, snapshots, fallback
reasons, failure naming, the flags -- in seconds; the real verl runs are in
``tests/e2e/test_overlap_e2e.py``. No Ray, no verl trainer, no subprocess.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from omegaconf import OmegaConf

from verl_split.core import log, settings
from verl_split.core.errors import PrepFailedError, SettingsError
from verl_split.plugin import wrapping
from verl_split.runtime.overlap import lanes, prep, prep_hooks, trainers

pytestmark = pytest.mark.unit

WORK_S = 0.15


class FakeBatch:
    """``DataProto``'s shape: tensors in ``batch``, ``non_tensor_batch``, ``meta_info``;
    ``union`` adds keys in place and returns ``self``."""

    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch = dict(batch or {})
        self.non_tensor_batch = dict(non_tensor_batch or {})
        self.meta_info = dict(meta_info or {})

    def select(self, batch_keys, non_tensor_batch_keys, meta_info_keys):
        return FakeBatch(
            {k: self.batch[k] for k in batch_keys},
            {k: self.non_tensor_batch[k] for k in non_tensor_batch_keys},
            {k: self.meta_info[k] for k in meta_info_keys},
        )

    def union(self, other):
        self.batch.update(other.batch)
        return self


class FakeTrainer:
    """verl's ``RayPPOTrainer.fit`` order of the preparation, with sleeps for workers."""

    fail: str = ""  # "values", "old_log_prob", "ref" or "reward"

    def __init__(self, use_critic=True, use_reference_policy=True, use_rm=False):
        self.use_critic = use_critic
        self.use_reference_policy = use_reference_policy
        self.use_rm = use_rm
        self.config = OmegaConf.create({"algorithm": {}})
        self.global_steps = 1
        self.values_saw: list[str] = []
        self.old_log_prob_saw: list[str] = []
        self.calls: dict[str, tuple[float, float]] = {}

    def _work(self, name):
        start = time.monotonic()
        if self.fail == name:  # fails early, while the other lane is still at work
            time.sleep(WORK_S / 6)
            raise RuntimeError(f"injected {name} failure")
        time.sleep(WORK_S)
        self.calls[name] = (start, time.monotonic())

    def _compute_reward_colocate(self, batch):
        self._work("reward" if "global_token_num" in batch.meta_info else "baseline_reward")
        return FakeBatch({"rm_scores": 4})

    def _compute_old_log_prob(self, batch):
        self.old_log_prob_saw = sorted(batch.batch)
        self._work("old_log_prob")
        return FakeBatch({"old_log_probs": 1})

    def _compute_ref_log_prob(self, batch):
        self._work("ref")
        return FakeBatch({"ref_log_prob": 2})

    def _compute_values(self, batch):
        self.values_saw = sorted(batch.batch)
        self._work("values")
        return FakeBatch({"values": 3})

    def fit(self):
        if self.use_rm:  # REMAX's baseline: a reward call on another batch, before the step's
            self._compute_reward_colocate(FakeBatch({"responses": 0}))
        batch = FakeBatch({"responses": 0}, {"uid": 0}, {"global_token_num": 8})
        if self.use_rm:
            batch = batch.union(self._compute_reward_colocate(batch))
        batch = batch.union(self._compute_old_log_prob(batch))
        if self.use_reference_policy:
            batch = batch.union(self._compute_ref_log_prob(batch))
        if self.use_critic:
            batch = batch.union(self._compute_values(batch))
        return batch


class FakePrep(trainers.V0Prep):
    """The real ``RayPPOTrainer`` adapter, with the pools given instead of read from verl: (actor, critic) and,
    for a reference in a worker group of its own, its pool third."""

    def __init__(self, trainer_class, pools=("actor_pool", "critic_pool")):
        super().__init__(trainer_class)
        self._pools = pools[:2]
        self._ref_pool = pools[2] if len(pools) > 2 else None

    def pools(self, trainer):
        return self._pools

    def ref_pool(self, trainer):
        return self._ref_pool

    def reward_pool(self, trainer):
        return self._pools[1]


@pytest.fixture
def patched(monkeypatch):
    """FakeTrainer with verl-split's wrappers, as runtime/overlap/seams.py wraps RayPPOTrainer."""
    monkeypatch.delenv("VERL_SPLIT_OVERLAP", raising=False)
    monkeypatch.setenv("VERL_SPLIT", "1")  # verl-split reads its other settings only when switched on
    log.forget_once()

    def install(pools=("actor_pool", "critic_pool")):
        adapter = FakePrep(FakeTrainer, pools)
        actor_compute = prep_hooks.make_actor_compute_wrapper(adapter)
        wrapping.wrap(FakeTrainer, "_compute_old_log_prob", actor_compute)
        wrapping.wrap(FakeTrainer, "_compute_ref_log_prob", actor_compute)
        wrapping.wrap(FakeTrainer, "_compute_values", prep_hooks.make_values_wrapper(adapter))
        wrapping.wrap(FakeTrainer, "_compute_reward_colocate", prep_hooks.make_reward_wrapper(adapter))
        return adapter

    yield install
    for method in (*prep.PREP_METHODS, "_compute_reward_colocate"):
        wrapping.unwrap(FakeTrainer, method)


def shared(a, b):
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def test_values_run_beside_old_log_prob_and_ref(patched):
    patched()
    trainer = FakeTrainer()
    batch = trainer.fit()
    assert sorted(batch.batch) == ["old_log_probs", "ref_log_prob", "responses", "values"]
    # The intervals show the calls ran at once; no bound on the wall time, which a loaded machine stretches.
    assert shared(trainer.calls["values"], trainer.calls["old_log_prob"]) > 0.8 * WORK_S
    metrics = lanes.take_metrics(trainer)
    assert metrics["split/prep_overlapped"] == 1.0
    assert metrics["split/prep_actor_s"] >= 2 * WORK_S
    assert metrics["split/prep_critic_s"] >= WORK_S
    assert metrics["split/prep_overlap_s"] > 0.8 * WORK_S
    assert metrics["split/prep_wall_s"] < metrics["split/prep_actor_s"] + metrics["split/prep_critic_s"]
    assert lanes.take_metrics(trainer) == {}  # taken once


def test_values_see_a_snapshot_of_the_batch_at_launch(patched):
    """fit's unions add keys to the step's batch while values run: values must not see them."""
    patched()
    trainer = FakeTrainer()
    trainer.fit()
    assert trainer.values_saw == ["responses"]


@pytest.mark.parametrize(
    ("overlap_setting", "pools", "reason"),
    [
        ("updates", ("actor_pool", "critic_pool"), "VERL_SPLIT_OVERLAP does not include prep"),
        ("off", ("actor_pool", "critic_pool"), "VERL_SPLIT_OVERLAP does not include prep"),
        ("on", ("global_pool", "global_pool"), "actor and critic share resource pool 'global_pool'"),
        # actor,rollout:0-5;critic,ref:6-7: ref and values would reach the critic's processes from two threads.
        (
            "on",
            ("actor_pool", "critic_pool", "critic_pool"),
            "the reference runs beside the critic on resource pool 'critic_pool'",
        ),
    ],
)
def test_runs_one_phase_after_the_other_and_says_why(patched, monkeypatch, caplog, overlap_setting, pools, reason):
    patched(pools)
    monkeypatch.setenv("VERL_SPLIT_OVERLAP", overlap_setting)
    trainer = FakeTrainer()
    with caplog.at_level(logging.INFO, logger="verl_split.prep"):
        trainer.fit()
    assert shared(trainer.calls["values"], trainer.calls["old_log_prob"]) == 0.0
    assert trainer.values_saw == ["old_log_probs", "ref_log_prob", "responses"]  # stock: after the unions
    assert lanes.take_metrics(trainer)["split/prep_overlapped"] == 0.0
    assert [r.getMessage() for r in caplog.records if reason in r.getMessage()], caplog.text


def test_a_trainer_overriding_a_compute_method_runs_stock(patched, caplog):
    patched()

    class Recipe(FakeTrainer):
        def _compute_values(self, batch):
            return super()._compute_values(batch)

    trainer = Recipe()
    with caplog.at_level(logging.INFO, logger="verl_split.prep"):
        trainer.fit()
    assert shared(trainer.calls["values"], trainer.calls["old_log_prob"]) == 0.0
    assert "Recipe overrides _compute_values()" in caplog.text


def test_no_critic_runs_stock(patched, caplog):
    patched()
    trainer = FakeTrainer(use_critic=False)
    with caplog.at_level(logging.INFO, logger="verl_split.prep"):
        batch = trainer.fit()
    assert "values" not in batch.batch
    assert "this run has no critic" in caplog.text
    assert lanes.take_metrics(trainer) == {}


def test_v1_with_the_reference_inside_a_lora_actor_runs_stock():
    trainer = FakeTrainer()
    trainer.ref_in_actor = True
    assert "no_lora_adapter" in trainers.V1Prep(FakeTrainer).why_not(trainer)
    trainer.use_reference_policy = False
    assert trainers.V1Prep(FakeTrainer).why_not(trainer) == ""


def test_a_values_failure_names_the_critic_pool_and_surfaces_before_ref(patched):
    patched()
    trainer = FakeTrainer()
    trainer.fail = "values"
    with pytest.raises(PrepFailedError, match=r"the critic's values failed on resource pool 'critic_pool' \(step 1\)"):
        trainer.fit()
    # Raised at ref's entry, the first seam after values failed: ref never ran.
    assert "ref" not in trainer.calls
    assert not hasattr(trainer, prep.STEP_ATTR)


def test_an_actor_failure_names_the_actor_pool_and_drops_the_step(patched):
    patched()
    trainer = FakeTrainer()
    trainer.fail = "old_log_prob"
    with pytest.raises(PrepFailedError, match=r"the actor's old_log_prob failed on resource pool 'actor_pool'"):
        trainer.fit()
    assert not hasattr(trainer, prep.STEP_ATTR)  # never joined later
    trainer.fail = ""
    trainer.fit()  # the next step starts afresh
    assert lanes.take_metrics(trainer)["split/prep_overlapped"] == 1.0


def test_sequential_failures_stay_stock(patched, monkeypatch):
    monkeypatch.setenv("VERL_SPLIT_OVERLAP", "off")
    patched()
    trainer = FakeTrainer()
    trainer.fail = "old_log_prob"
    with pytest.raises(RuntimeError, match="injected old_log_prob failure"):
        trainer.fit()


def test_values_on_another_batch_is_an_error(patched):
    patched()
    trainer = FakeTrainer()
    batch = FakeBatch({"responses": 0})
    trainer._compute_old_log_prob(batch)
    with pytest.raises(RuntimeError, match="another batch"):
        trainer._compute_values(FakeBatch({"responses": 0}))


def test_thread_is_a_daemon_named_for_its_work(patched):
    patched()
    trainer = FakeTrainer()
    seen = []
    original = FakeTrainer._work

    def spy(self, name):
        if name == "values":
            seen.append((threading.current_thread().name, threading.current_thread().daemon))
        return original(self, name)

    FakeTrainer._work = spy
    try:
        trainer.fit()
    finally:
        FakeTrainer._work = original
    assert seen == [("verl-split-values", True)]


@pytest.mark.parametrize(
    ("raw", "phases"),
    [
        (None, {"updates", "prep", "defer_critic"}),
        ("on", {"updates", "prep", "defer_critic"}),
        ("1", {"updates", "prep", "defer_critic"}),
        ("off", set()),
        ("0", set()),
        ("updates", {"updates"}),
        ("prep", {"prep"}),
        (" Updates , prep ", {"updates", "prep"}),
        ("updates,defer_critic", {"updates", "defer_critic"}),
    ],
)
def test_overlap_switch_takes_on_off_or_a_list_of_phases(raw, phases):
    assert settings.parse_overlap(raw) == phases


@pytest.mark.parametrize("raw", ["maybe", "updates,values", ","])
def test_overlap_switch_rejects_anything_else_naming_the_phases(raw):
    with pytest.raises(SettingsError, match=r"comma list of the phases updates, prep, defer_critic"):
        settings.parse_overlap(raw)


def test_defer_critic_needs_the_update_overlap():
    with pytest.raises(SettingsError, match=r"defer_critic .* needs the updates phase too"):
        settings.parse_overlap("prep,defer_critic")


def test_old_log_prob_and_ref_run_beside_a_colocated_reward_model(patched, caplog):
    """RayPPOTrainer with a reward model on the critic's pool: the actor's lane starts with it,
    and values start once it is done (the critic's pool is free again)."""
    patched()
    trainer = FakeTrainer(use_rm=True)
    with caplog.at_level(logging.INFO, logger="verl_split.prep"):
        batch = trainer.fit()
    assert sorted(batch.batch) == ["old_log_probs", "ref_log_prob", "responses", "rm_scores", "values"]
    assert shared(trainer.calls["reward"], trainer.calls["old_log_prob"]) > 0.8 * WORK_S
    assert shared(trainer.calls["values"], trainer.calls["ref"]) > 0.5 * WORK_S
    assert trainer.calls["values"][0] >= trainer.calls["reward"][1]  # never two phases on the critic's pool
    assert trainer.old_log_prob_saw == ["responses"]  # its snapshot, taken before the reward was merged
    assert "beside the reward model on critic_pool" in caplog.text
    metrics = lanes.take_metrics(trainer)
    assert metrics["split/prep_overlapped"] == 1.0
    assert metrics["split/prep_critic_s"] >= 2 * WORK_S  # reward model + values
    assert metrics["split/prep_actor_s"] >= 2 * WORK_S


def test_a_reward_model_failure_names_the_critic_pool_and_stops_the_actor_lane(patched):
    patched()
    trainer = FakeTrainer(use_rm=True)
    trainer.fail = "reward"
    with pytest.raises(PrepFailedError, match=r"the critic's reward model failed on resource pool 'critic_pool'"):
        trainer.fit()
    time.sleep(2 * WORK_S)
    assert "old_log_prob" in trainer.calls and "ref" not in trainer.calls  # no worker called after the failure


def test_an_actor_failure_beside_the_reward_model_names_the_actor_pool(patched):
    patched()
    trainer = FakeTrainer(use_rm=True)
    trainer.fail = "old_log_prob"
    with pytest.raises(PrepFailedError, match=r"the actor's old_log_prob failed on resource pool 'actor_pool'"):
        trainer.fit()
    assert "values" not in trainer.calls


def test_reward_model_keeps_its_place_in_bypass_mode(patched, caplog):
    patched()
    trainer = FakeTrainer(use_rm=True)
    trainer.config.algorithm["rollout_correction"] = {"bypass_mode": True}
    with caplog.at_level(logging.INFO, logger="verl_split.prep"):
        trainer.fit()
    assert shared(trainer.calls["reward"], trainer.calls["old_log_prob"]) == 0.0
    assert "The reward model runs before old_log_prob and ref: verl's bypass mode" in caplog.text
    assert shared(trainer.calls["values"], trainer.calls["old_log_prob"]) > 0.8 * WORK_S  # values still overlap
