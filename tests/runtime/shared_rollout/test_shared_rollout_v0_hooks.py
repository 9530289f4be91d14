"""Fast tests of shared rollout's wrappers of ``RayPPOTrainer`` (verl_split/runtime/shared_rollout/hooks.py).

Fakes of the trainer and of verl's ``LLMServerManager``, on purpose: these check the order of our steps inside
``init_workers`` -- the critic pool's replicas started at the manager's ``get_client``, before the client hands
out the balancer, verl's own manager built with ``naive``, the config restored after -- and the refusals, in
milliseconds. ``coordinator.start`` / ``wire`` are replaced by recorders. The real run is
``tests/e2e/test_shared_rollout_v0_e2e.py``. No Ray, no verl trainer, no subprocess.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from verl_split.core import compat

if not compat.verl_in(compat.SHARED_ROLLOUT_V0):
    pytest.skip("no shared rollout on RayPPOTrainer in this verl", allow_module_level=True)

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402

from verl_split.runtime.metrics import tracking  # noqa: E402
from verl_split.runtime.shared_rollout import coordinator, hooks  # noqa: E402
from verl_split.runtime.shared_rollout.both_pools import SharedRolloutError  # noqa: E402

pytestmark = pytest.mark.unit


class FakeManager:
    def __init__(self, journal: list) -> None:
        self.journal = journal

    def get_client(self):
        return hooks.wrap_get_client(self._get_client, self, (), {})

    def _get_client(self):
        self.journal.append("verl get_client")
        return "client"


def trainer_of(cls: type, journal: list, shared: bool = True, asks_for_a_client: bool = True):
    trainer = cls.__new__(cls)  # verl's class, none of its __init__: init_workers below is a stand-in
    trainer.config = OmegaConf.create(
        {
            "split_placement": {"shared_rollout": shared},
            "actor_rollout_ref": {"rollout": {"checkpoint_engine": {"backend": "naive"}}},
        }
    )

    def init_workers():
        engine = trainer.config.actor_rollout_ref.rollout.checkpoint_engine
        journal.append(f"actor workers take {engine.backend}")
        trainer.llm_server_manager = FakeManager(journal)
        if asks_for_a_client:
            trainer.llm_server_manager.get_client()
        journal.append(f"verl's manager built with {engine.backend}")
        return "done"

    return trainer, init_workers


@pytest.fixture
def recorded(monkeypatch):
    journal: list = []
    monkeypatch.setattr(coordinator, "configure_weight_transfer", lambda config, job: _configure(config, journal))
    # Each start's replicas are told apart: "started 1", "started 2", ...
    monkeypatch.setattr(
        coordinator, "start", lambda trainer: journal.append("start") or f"started {journal.count('start')}"
    )
    monkeypatch.setattr(coordinator, "wire", lambda trainer, backend, started: journal.append(("wire", started)))
    monkeypatch.setattr(tracking, "register_source", lambda source: journal.append("source"))
    return journal


def _configure(config, journal):
    config.actor_rollout_ref.rollout.checkpoint_engine.backend = "verl_split_cpu"
    return "verl_split_cpu"


def test_the_replicas_start_before_the_client_and_verls_manager_syncs_in_process(recorded):
    trainer, init_workers = trainer_of(RayPPOTrainer, recorded)
    assert hooks.wrap_init_workers(init_workers, trainer, (), {}) == "done"
    assert recorded == [
        "actor workers take verl_split_cpu",
        "start",
        "verl get_client",
        "verl's manager built with naive",
        ("wire", "started 1"),
        "source",
    ]
    assert trainer.config.actor_rollout_ref.rollout.checkpoint_engine.backend == "verl_split_cpu"  # restored


def test_off_it_is_verls_init_workers_alone(recorded):
    trainer, init_workers = trainer_of(RayPPOTrainer, recorded, shared=False)
    hooks.wrap_init_workers(init_workers, trainer, (), {})
    assert recorded == ["actor workers take naive", "verl get_client", "verl's manager built with naive"]


def test_a_trainer_with_a_loop_of_its_own_is_refused(recorded):
    class OwnLoop(RayPPOTrainer):
        def fit(self):
            pass

    trainer, init_workers = trainer_of(OwnLoop, recorded)
    with pytest.raises(SharedRolloutError, match="OwnLoop overrides fit()"):
        hooks.wrap_init_workers(init_workers, trainer, (), {})
    assert recorded == []


def test_an_init_workers_that_never_asks_for_a_client_is_an_error(recorded):
    trainer, init_workers = trainer_of(RayPPOTrainer, recorded, asks_for_a_client=False)
    with pytest.raises(SharedRolloutError, match="never asked its LLMServerManager for a client"):
        hooks.wrap_init_workers(init_workers, trainer, (), {})
    assert trainer.config.actor_rollout_ref.rollout.checkpoint_engine.backend == "verl_split_cpu"


def test_another_managers_client_is_verls_alone(recorded):
    assert FakeManager(recorded).get_client() == "client"
    assert recorded == ["verl get_client"]


def test_the_pending_metrics_join_the_next_training_record_only():
    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    sources: list = []
    original = tracking.register_source
    tracking.register_source = sources.append
    try:
        hooks.report_to_tracker(trainer)
    finally:
        tracking.register_source = original
    (source,) = sources
    trainer._pending_sync_metrics = {"split/shared_rollout_sync_s": 0.5}
    assert source({"val-core/x": 1.0}) == {}  # a validation record logged apart
    assert source({"timing_s/step": 2.0}) == {"split/shared_rollout_sync_s": 0.5}
    assert source({"timing_s/step": 2.0}) == {}  # taken once


def test_a_failed_init_workers_leaves_its_replicas_to_no_later_call(recorded):
    # The same trainer again is the sure case of "a later trainer with the same id": a retry after an
    # init_workers that raised once its replicas had started must start its own, not be handed those.
    trainer, init_workers = trainer_of(RayPPOTrainer, recorded)

    def fails_after_the_client():
        init_workers()
        raise RuntimeError("a worker died")

    with pytest.raises(RuntimeError, match="a worker died"):
        hooks.wrap_init_workers(fails_after_the_client, trainer, (), {})
    assert hooks.wrap_init_workers(init_workers, trainer, (), {}) == "done"
    assert recorded.count("start") == 2 and recorded[-2] == ("wire", "started 2")
    _, no_client = trainer_of(RayPPOTrainer, recorded, asks_for_a_client=False)
    trainer.config.actor_rollout_ref.rollout.checkpoint_engine.backend = "naive"
    with pytest.raises(RuntimeError, match="a worker died"):
        hooks.wrap_init_workers(fails_after_the_client, trainer, (), {})
    with pytest.raises(SharedRolloutError, match="never asked its LLMServerManager for a client"):
        hooks.wrap_init_workers(no_client, trainer, (), {})


def test_the_trackers_source_goes_with_its_trainer(monkeypatch):
    sources: list = []
    register = tracking.register_source
    monkeypatch.setattr(
        tracking, "register_source", lambda source: sources.append(weakref.ref(source)) or register(source)
    )
    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    hooks.report_to_tracker(trainer)
    alive = weakref.ref(trainer)
    (source,) = sources
    assert source() is not None
    del trainer
    gc.collect()
    assert alive() is None and source() is None  # neither the trainer nor its source kept by the tracker


def test_the_wrappers_module_imports_nothing_of_the_feature_at_its_top():
    """``hooks`` is loaded inside verl's import of ``llm_server`` (seam ``shared_rollout_v0_client``), which the
    feature's balancer imports: a module-level import of ``both_pools`` there closed a circle (balancer, llm_server,
    hooks, both_pools, balancer) and ended a shared-rollout run in its TaskRunner."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(hooks.__file__).read_text())
    top = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = [alias.name for node in top if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module or "" for node in top if isinstance(node, ast.ImportFrom)]
    assert not [name for name in names if name.startswith(("verl_split.runtime", "verl."))], names
