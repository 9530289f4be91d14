"""``verl-split advise``'s command for a row runs what the row predicted (code_review_4 findings 1 and 8).

Each row's command is read back into verl-split's settings (``core/settings.py``, as a run reads its environment)
and the runtime path those settings take is the one the row models: the overlaps it was predicted with, the
deferral or not, and with shared rollout and the deferral the late join, which GPUs run only when asked for
(``coordinator.late_join_on``). And every ``+shared`` row passes the memory check the launch applies
(``placement.memory.with_memory_estimate``, as ``plan_from_config`` runs it), or is listed as refused with its
message. Synthetic profiles, not GPU measurements.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from support.advise_profiles import SUBLINEAR, Profile, run_file

from verl_split.core import settings
from verl_split.core.errors import PlacementError
from verl_split.placement import Cluster, plan_placement
from verl_split.placement.memory import with_memory_estimate
from verl_split.runtime.shared_rollout.coordinator import late_join_on
from verl_split.tools.advise import advise
from verl_split.tools.advise.advice import Advice
from verl_split.tools.advise.candidates import Candidate
from verl_split.tools.advise.variants import BOTH_TAG, SHARED_TAG
from verl_split.tools.cli import main

pytestmark = pytest.mark.unit

CLUSTER = Cluster(1, 8)
CLUSTER_ARGS = ["--nnodes", "1", "--n-gpus-per-node", "8"]
#: The critic's update runs well past the actor's and generation is long: every kind of row is made
#: (plain, +defer, +shared, +shared+defer), and +shared+defer is recommended.
CRITIC_HEAVY: Profile = {**SUBLINEAR, "gen": (2.0, 96.0), "critic_update": (8.0, 40.0)}
#: Generation dominates, actor and critic even: +shared is recommended on halves (test_advise_shared_rollout.py).
GEN_DOMINATED: Profile = {**SUBLINEAR, "gen": (1.0, 160.0)}
#: 7B actor and critic on 80 GiB GPUs: 6:2 trains, but its 2 critic GPUs cannot also hold vLLM's half and the push
#: (the launch's critic-pool check); 2:6's actor pool cannot take the push beside its awake vLLM (the late join's).
MEMORY = {"gpu_gb": 80.0, "model_params": 7e9, "critic_params": 7e9}


def _advice(tmp_path: Path, profile: Profile, **kwargs) -> tuple[Advice, list[str]]:
    stock = run_file(tmp_path / "stock.jsonl", profile, n=8)
    split = run_file(tmp_path / "split.jsonl", profile, actor_n=4, critic_n=4)
    return advise([stock, split], CLUSTER, push_s=0.5, **kwargs), [str(stock), str(split)]


def read_back(command: str) -> settings.Settings:
    """The ``VERL_SPLIT*`` assignments before ``python`` in a shell command line, read as a run reads them."""
    words = shlex.split(command)
    env = dict(word.split("=", 1) for word in words[: words.index("python")])
    return settings.read(env)


def runtime_path(read: settings.Settings) -> str:
    """What a run with these settings does with the critic pool on GPUs (``both_pools.update_weights``): no
    shared rollout; shared from every weight sync (nothing runs on at the sync without the deferral); with the
    deferral, a critic update still running at the sync has the critic pool join late, or sit the step out."""
    if not read.shared_rollout:
        return "actor pool generates"
    if not read.defer_critic:
        return "critic pool from every sync"
    settings.freeze(read)  # late_join_on reads the frozen settings, as in a run (conftest thaws them)
    return "late join" if late_join_on("cuda") else "sits out a step its update runs into"


def expected_path(row: Candidate) -> str:
    if not row.shared_rollout:
        return "actor pool generates"
    return "late join" if row.both else "critic pool from every sync"


def check_row(row: Candidate) -> None:
    read = read_back(row.command())
    if not row.is_split:
        assert not read.enabled, row.command()
        return
    assert read.enabled and read.placement == row.placement, row.command()
    assert read.defer_critic == row.deferred, row.command()
    assert read.overlap_phases - {"defer_critic"} == row.prediction.overlaps, row.command()
    assert runtime_path(read) == expected_path(row), row.command()


#: Rows by (shared rollout, deferred): plain, +defer, +shared, +shared+defer.
EVERY_KIND = {(False, False), (False, True), (True, False), (True, True)}


@pytest.mark.parametrize(
    ("profile", "kinds"),
    [(CRITIC_HEAVY, EVERY_KIND), (GEN_DOMINATED, {(False, False), (True, False)})],
    ids=["critic_heavy", "gen_dominated"],
)
def test_every_rows_command_runs_the_path_it_predicted(tmp_path, profile, kinds):
    advice, _ = _advice(tmp_path, profile)
    rows = [*advice.candidates, *advice.unranked]
    assert kinds <= {(r.shared_rollout, r.deferred) for r in rows if r.is_split}
    for row in rows:
        check_row(row)


def test_the_printed_command_reads_back_as_the_recommended_row(tmp_path, capsys):
    advice, paths = _advice(tmp_path, CRITIC_HEAVY)
    best = advice.recommended
    assert best.both  # the late join's row: the one whose switches the old line left out
    assert main(["advise", *paths, *CLUSTER_ARGS, "--push-s", "0.5"]) == 0
    flat = " ".join(capsys.readouterr().out.split())  # the report wraps its lines
    command = re.search(r"use it: (.*? python -m verl\.trainer\.main_ppo)", flat).group(1)
    read = read_back(command)
    assert read.shared_rollout and read.defer_critic and read.late_join is True
    assert runtime_path(read) == "late join" == expected_path(best)
    assert "has not run on GPUs" in flat
    assert main(["advise", *paths, *CLUSTER_ARGS, "--push-s", "0.5", "--json"]) == 0
    recommended = json.loads(capsys.readouterr().out)["recommended"]
    assert read_back(recommended["command"]) == read
    assert recommended["environment"]["VERL_SPLIT_LATE_JOIN"] == "on"


def test_a_shared_row_runs_without_the_deferral(tmp_path):
    """A ``+shared`` row is predicted with the critic pool generating from every sync. VERL_SPLIT_OVERLAP's
    default (``on``) includes the deferral, and on GPUs the critic pool would then sit out every step whose
    critic update runs past the sync: the command says the overlaps it was predicted with."""
    advice, _ = _advice(tmp_path, GEN_DOMINATED)
    shared = next(c for c in advice.candidates if c.shared_rollout and not c.deferred)
    assert shared.environment()["VERL_SPLIT_OVERLAP"] == "updates,prep"
    assert runtime_path(read_back(shared.command())) == "critic pool from every sync"


def test_shared_rows_pass_the_launchs_memory_check_or_are_refused_with_its_message(tmp_path):
    advice, _ = _advice(tmp_path, CRITIC_HEAVY, **MEMORY)
    rule = advice.memory
    refused = dict(advice.rejected)
    shared_rows = [c for c in (*advice.candidates, *advice.unranked) if c.shared_rollout]
    assert shared_rows
    for row in shared_rows:
        for name in (row.placement, *row.same_prediction_as):
            plan = plan_placement(name, CLUSTER, advice.job.requirements, shared_rollout=True)
            with_memory_estimate(plan, rule.job, rule.gpu_gb, rule.critic_params, rule.actor_params, late_join=row.both)
    # 6:2 trains (its row is ranked) but cannot generate on its 2 critic GPUs; 2:6's actor pool cannot take the
    # push beside an awake vLLM (the late join), while its +shared row (vLLM asleep at the push) passes.
    assert any(c.placement == "6:2" and not c.shared_rollout for c in advice.candidates)
    for name, late_join in ((f"6:2 {SHARED_TAG}", False), (f"6:2 {BOTH_TAG}", True), (f"2:6 {BOTH_TAG}", True)):
        placement = name.split()[0]
        plan = plan_placement(placement, CLUSTER, advice.job.requirements, shared_rollout=True)
        with pytest.raises(PlacementError) as launch:
            with_memory_estimate(plan, rule.job, rule.gpu_gb, rule.critic_params, rule.actor_params, late_join)
        assert refused[name] == str(launch.value), name
    assert any(c.placement == "2:6" and c.shared_rollout and not c.both for c in advice.candidates)
    assert all(c.name not in refused for c in advice.candidates)
