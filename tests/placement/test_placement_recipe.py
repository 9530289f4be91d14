"""The 8-GPU recipe's advertised layouts plan with the recipe's own settings, on every family's batch rules.

Each ``bash run_deepseek7b_llm.sh ...`` line of the script's header is run with a stand-in interpreter
that records the arguments (``tests/support/examples.py``'s ``script_arguments``), composed with hydra against the
installed verl's config, and planned with the batch rules of verl 0.7 (legacy and engine workers),
0.8, and 0.9 (v1 and v0 trainers). The layouts the recipe used to advertise, 6:2 and 3:5 with its
1024 / 256 batch, are refused, through ``verl-split plan`` too.
"""

from __future__ import annotations

import functools
import re
import shlex
import tempfile
from pathlib import Path

import pytest
from support.examples import compose_split, script_arguments
from support.paths import EXAMPLE

from verl_split import placement as planner
from verl_split.core.errors import PlacementError

pytestmark = pytest.mark.subprocess

SCRIPT = EXAMPLE / "run_deepseek7b_llm.sh"


@functools.cache
def _split_config():
    return compose_split([])


def _set(key: str, value: str) -> str:
    """``key=value``, with hydra's ``+`` when the installed verl's config lacks the key (another family's)."""
    present = planner.select_key(_split_config(), key) is not None
    return f"{'' if present else '+'}{key}={value}"


#: (family, extra settings): every trainer path whose batch rules differ. The overrides are made in the test
#: (``_set`` composes verl's config: at collection it would cost every pytest run seconds).
RULES = [
    ("0.9", ()),
    ("0.9", (("trainer.use_v1", "false"),)),
    ("0.8", ()),
    ("0.7", ()),
    ("0.7", (("trainer.use_legacy_worker_impl", "disable"),)),
]
RULE_IDS = ["0.9-v1", "0.9-v0", "0.8", "0.7-legacy", "0.7-engine"]
#: What the header advertises for 6:2 (one or two nodes).
FITS_6_2 = ("data.train_batch_size=1152", "actor_rollout_ref.actor.ppo_mini_batch_size=384")


def advertised() -> list[tuple[dict[str, str], list[str]]]:
    """(environment, arguments) of every ``bash run_deepseek7b_llm.sh`` line in the script's header."""
    lines = []
    for line in SCRIPT.read_text().splitlines():
        if not line.startswith("#"):
            break
        match = re.match(r"#\s+((?:\w+=\S+\s+)*)bash run_deepseek7b_llm\.sh(.*?)(?:\s+#.*)?$", line)
        if match:
            env = dict(word.split("=", 1) for word in shlex.split(match.group(1)))
            lines.append((env, shlex.split(match.group(2))))
    return lines


@functools.cache
def recipe_overrides(env: tuple[tuple[str, str], ...], args: tuple[str, ...]) -> tuple[str, ...]:
    """The overrides the recipe hands main_ppo_split.py for these arguments (the script run once per line)."""
    home = Path(tempfile.mkdtemp(prefix="recipe-"))
    return tuple(script_arguments(SCRIPT, home, *args, env=dict(env))[1:])


def test_the_header_advertises_layouts():
    layouts = advertised()
    assert len(layouts) >= 4, layouts
    assert any("split_placement.placement=6:2" in args for _, args in layouts)


@pytest.mark.parametrize(("family", "extra"), RULES, ids=RULE_IDS)
@pytest.mark.parametrize(("env", "args"), advertised(), ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_every_advertised_layout_plans_with_the_recipes_settings(monkeypatch, env, args, family, extra):
    monkeypatch.delenv("VERL_SPLIT_PLACEMENT", raising=False)
    config = compose_split([*recipe_overrides(tuple(sorted(env.items())), tuple(args)), *(_set(*kv) for kv in extra)])
    req = planner.requirements_from_config(config, family=family)
    assert req.batch is not None and req.batch.family == family
    plan = planner.plan_placement(planner.placement_from_config(config, ""), planner.cluster_from_config(config), req)
    assert plan.pool_of("critic") is not None and plan.pool_of("critic") is not plan.pool_of("actor")


@pytest.mark.parametrize(("family", "extra"), RULES, ids=RULE_IDS)
@pytest.mark.parametrize(
    "layout",
    [
        ["split_placement.placement=6:2"],
        ["split_placement.placement=3:5", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"],
    ],
    ids=["6:2", "3:5"],
)
def test_the_old_advertised_layouts_are_refused_with_the_recipes_batch(monkeypatch, layout, family, extra):
    monkeypatch.delenv("VERL_SPLIT_PLACEMENT", raising=False)
    config = compose_split([*recipe_overrides((), tuple(layout)), *(_set(*kv) for kv in extra)])
    with pytest.raises(PlacementError) as exc:
        planner.plan_placement(
            planner.placement_from_config(config, ""),
            planner.cluster_from_config(config),
            planner.requirements_from_config(config, family=family),
        )
    message = str(exc.value)
    assert (
        "the pools cannot run this job's batch" in message and "Or a layout whose pools fit this batch: 4:4" in message
    )


def test_the_recipes_6_2_through_verl_split_plan(tmp_path, monkeypatch, capsys):
    """The recipe's own settings with 6:2, as `verl-split plan` takes them: the issue's case."""
    from verl_split.tools import cli

    monkeypatch.delenv("VERL_SPLIT_PLACEMENT", raising=False)
    argv = script_arguments(SCRIPT, tmp_path)
    command = ["plan", "--config-path", str(EXAMPLE / "config"), "--config-name", "ppo_trainer_split"]
    command += ["--verl", "0.9"]  # the issue's case: verl 0.9's v1 trainer, whatever verl is installed
    assert cli.main([*command, "--placement", "6:2", *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert "--placement='6:2': the pools cannot run this job's batch (verl 0.9, v1 trainer)" in err
    assert "actor (actor_rollout_ref_pool, 6 GPUs, data-parallel size 6)" in err
    assert "ppo_mini_batch_size=256 x actor_rollout_ref.rollout.n=1 = 256 samples" in err
    assert "(256 % 6 = 4); verl asserts it in the first step, after a whole generation, at " in err
    assert "at TrainingWorker.train_mini_batch in verl/workers/engine_workers.py." in err
    assert "Fits on these pools: actor_rollout_ref.actor.ppo_mini_batch_size=240 or 288." in err
    assert "Or a layout whose pools fit this batch: 4:4." in err
    # The fix the header advertises plans, through the same command.
    fixed = ["data.train_batch_size=1152", "actor_rollout_ref.actor.ppo_mini_batch_size=384"]
    assert cli.main([*command, "--placement", "6:2", *argv[1:], *fixed]) == 0


def test_legacy_workers_assert_when_they_start():
    """0.7's legacy workers check a rank's mini-batch against its micro-batches in their constructors."""
    config = compose_split(
        [*recipe_overrides((), ("split_placement.placement=6:2", *FITS_6_2)), "critic.ppo_micro_batch_size_per_gpu=7"]
    )
    with pytest.raises(PlacementError) as exc:
        planner.plan_placement(
            planner.placement_from_config(config, ""),
            planner.cluster_from_config(config),
            planner.requirements_from_config(config, family="0.7"),
        )
    message = str(exc.value)
    assert "(verl 0.7, RayPPOTrainer, legacy workers)" in message
    assert "critic (critic_pool, 2 GPUs, data-parallel size 2): its 192 samples of a mini-batch per rank" in message
    assert (
        "whole micro-batches of critic.ppo_micro_batch_size_per_gpu=7; verl asserts it when its workers start"
        in message
    )
    assert "CriticWorker.__init__ in verl/workers/fsdp_workers.py" in message
