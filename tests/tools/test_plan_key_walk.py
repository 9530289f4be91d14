"""Every key verl-split reads from verl's config, fed a value of another type: ``verl-split plan`` refuses it with
exit 2, naming the key, before Ray starts.

The keys are not listed by hand: they are what ``config_keys.recording`` saw while ``verl-split plan`` planned a
full job (verl's composed PPO config, FSDP and Megatron, shared rollout on: the most keys a plan reads) and while
the runtime read a trainer's job (``trainer_job``, the same reader). Each key is then set, alone, to a value
of another type than the one it was read as, and the plan is made again. Composing is hydra's, once per job;
setting the key on the composed config is what a ``key=value`` override does to it, and the named keys go
through hydra's own override on the command line too (the last tests; the console command itself, as a process,
in ``test_plan_cli.py``).
"""

from __future__ import annotations

import contextlib
import copy
import io
from typing import Any

import pytest

from verl_split.placement import config_keys
from verl_split.placement.config_keys import recording
from verl_split.placement.job_config import trainer_job
from verl_split.tools import cli
from verl_split.tools import plan as plan_command
from verl_split.tools.hydra_config import compose_config

pytestmark = pytest.mark.unit

#: Two jobs that between them read every key a plan reads: their config's name and overrides.
JOBS = {
    "fsdp": ("ppo_trainer", ["trainer.n_gpus_per_node=8", "+split_placement.shared_rollout=true"]),
    "megatron": ("ppo_megatron_trainer", ["trainer.n_gpus_per_node=8", "+split_placement.shared_rollout=true"]),
}
#: A value of another type than each kind's: what a user's slip would write (a quoted number, a word, a number
#: for a text); each kind's reader refuses it.
WRONG = {
    config_keys.WHOLE: "2",
    config_keys.SWITCH: "maybe",
    config_keys.NUMBER: "half",
    config_keys.TEXT: 7,
    config_keys.CHOICE: True,
    config_keys.STEPS: "false",
}
#: Keys read as the config writes them, and what checks each (none is trusted unchecked).
AS_WRITTEN = {
    # The placement's own block: its parser refuses what it cannot use (tests/placement/test_placement_config.py).
    "split_placement",
    # Kept for megatron_dcp's check, which refuses a value that is not a positive count where verl reads it.
    *(f"{role}.megatron.max_seqlen_per_dp_cp_rank" for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref")),
    "critic.megatron.max_seqlen_per_dp_cp_rank",
}
#: The megatron block's custom layer split keys: any value but false means a custom split (megatron-core checks it).
CUSTOM_SPLIT = "override_transformer_config."


class Trainer:
    """What ``trainer_job`` reads of verl's trainer: its config."""

    def __init__(self, config: Any) -> None:
        self.config = config


def plan(config: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``verl-split plan`` of ``config`` (as composed: the command's compose hands it back), in this process."""
    monkeypatch.setattr(plan_command, "compose_config", lambda *args: config)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["plan", "trainer.n_gpus_per_node=8"])  # an override: the config's path is taken
    return code, err.getvalue()


@contextlib.contextmanager
def set_to(config: Any, key: str, value: Any):
    """``key`` set to ``value`` in the block, as it was after: the nodes the block added removed."""
    from omegaconf import OmegaConf

    parts = key.split(".")
    node, depth = config, 0
    while depth < len(parts) - 1 and isinstance(node.get(parts[depth]), dict | type(config)):
        node, depth = node[parts[depth]], depth + 1
    head = parts[depth]  # the first part that may be missing: restored, or removed when it was
    had, was = head in node, node.get(head)
    OmegaConf.update(config, key, value, merge=False, force_add=True)
    try:
        yield
    finally:
        if had:
            node[head] = was
        else:
            del node[head]


@pytest.fixture(scope="module", params=sorted(JOBS))
def job(request) -> tuple[Any, dict[str, str]]:
    """(the job's composed config, resolved; each key read planning it -> the kind it was read as)."""
    from omegaconf import OmegaConf

    name, overrides = JOBS[request.param]
    config = compose_config(name, None, overrides)
    OmegaConf.resolve(config)  # a key another's value interpolates would be refused under the other's name
    OmegaConf.set_struct(config, False)  # a key the config has no node for yet (trainer.v1.sync's)
    with pytest.MonkeyPatch.context() as monkeypatch, recording() as reads:
        code, err = plan(config, monkeypatch)
        trainer_job(Trainer(config))
    assert code == 0, err
    kinds: dict[str, str] = {}
    for key, kind in reads:
        if kind != config_keys.PRESENT or key not in kinds:  # a typed read says more than whether it is set
            kinds[key] = kind
    return config, kinds


def test_the_walk_covers_the_keys_the_issue_names(job):
    _, kinds = job
    named = {
        "trainer.v1.sync.parameter_sync_step": config_keys.WHOLE,
        "global_profiler.steps": config_keys.STEPS,
        "trainer.v1.trainer_mode": config_keys.TEXT,
        "algorithm.adv_estimator": config_keys.TEXT,
        "critic.model.path": config_keys.TEXT,
        "actor_rollout_ref.rollout.checkpoint_engine.backend": config_keys.TEXT,
    }
    assert {key: kinds.get(key) for key in named} == named
    assert len(kinds) > 80  # the whole job, not a corner of it


def test_no_key_is_read_untyped_but_the_checked_few(job):
    _, kinds = job
    untyped = {key for key, kind in kinds.items() if kind == config_keys.AS_WRITTEN and CUSTOM_SPLIT not in key}
    assert untyped <= AS_WRITTEN


def test_every_key_of_another_type_is_refused_naming_it(job, monkeypatch):

    config, kinds = job
    config = copy.deepcopy(config)  # changed one key at a time below (a copy per key cost most of the walk)
    missed = []
    for key, kind in sorted(kinds.items()):
        if kind not in WRONG:
            continue
        with set_to(config, key, WRONG[kind]):
            code, err = plan(config, monkeypatch)
        if code != 2 or f"{key} is {WRONG[kind]!r} (" not in err:
            missed.append((key, kind, code, err.strip()[-300:]))
    assert missed == []
    assert plan(config, monkeypatch)[0] == 0  # each key set back: the job plans as before
    import ray

    assert not ray.is_initialized()  # refused before Ray starts


# --------------------------------------------------------------------------- the named keys, on the command line

#: (override as a user writes it, the refusal's start): each key the issue names, through hydra's own parse.
NAMED = [
    ('+trainer.v1.sync.parameter_sync_step="1"', "trainer.v1.sync.parameter_sync_step is '1' (text)"),
    ('global_profiler.steps="false"', "global_profiler.steps is 'false' (text)"),
    ("trainer.v1.trainer_mode=1", "trainer.v1.trainer_mode is 1 (int)"),
    ("algorithm.adv_estimator=true", "algorithm.adv_estimator is True (bool)"),
    ("critic.fsdp.model_dtype=BF16", "critic.fsdp.model_dtype is 'BF16' (text)"),
    ("actor_rollout_ref.rollout.checkpoint_engine.backend=1", "checkpoint_engine.backend is 1 (int)"),
]


def run_plan(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["plan", *args])
    return code, err.getvalue()


@pytest.mark.parametrize(("override", "refusal"), NAMED, ids=[n[0].split("=")[0].lstrip("+") for n in NAMED])
def test_plan_refuses_each_named_key_as_the_user_writes_it(override, refusal):
    code, err = run_plan("trainer.n_gpus_per_node=8", override)
    assert code == 2, err
    assert refusal in err


def test_plan_refuses_a_placement_block_that_is_no_mapping():
    code, err = run_plan("trainer.n_gpus_per_node=8", "+split_placement=7")
    assert code == 2, err
    assert "split_placement must be a mapping such as {placement: '6:2'}, got 7" in err


def test_plan_refuses_the_legacy_worker_switch_where_verl_reads_it():
    # 0.7's main_ppo.py reads it (and raises on another value inside the TaskRunner); 0.9 reads it nowhere.
    override = "+trainer.use_legacy_worker_impl=false"
    code, err = run_plan("--verl", "0.7", "trainer.n_gpus_per_node=8", override)
    assert code == 2, err
    assert "trainer.use_legacy_worker_impl is False (bool), where one of auto, enable, disable is needed" in err
    assert run_plan("trainer.n_gpus_per_node=8", override)[0] == 0
