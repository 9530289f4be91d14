"""Rollout on both pools ("shared rollout"), end to end: stock ``main_ppo`` on CPU with ``VERL_SPLIT=1``
and ``VERL_SPLIT_SHARED_ROLLOUT=1``, placement ``halves`` on 2 logical GPUs (one per pool).

verl 0.9's v1 trainer (its default). Stand-ins, as in every CPU dry run: verl-split's CPU rollout
(Hugging Face ``generate`` for vLLM) and its object-store checkpoint engine for verl's NCCL one
(``verl_split/runtime/cpu/weight_transfer.py``), which runs verl's whole weight-push protocol. The run is
``shared_rollout_run`` (tests/conftest.py; test_checkpoint_e2e.py resumes from its step-2 checkpoint); the run
without shared rollout it is compared with is the example's (``example_run``): same job, same seeds.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from support.ppo_run import (
    CHECKPOINTED_STEPS,
    checkpointed_overrides,
    last_checkpoint,
    plugin_env,
    run_main_ppo,
)

from verl_split.core import compat
from verl_split.dryrun.runner import METRICS_FILE, read_metrics

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not compat.verl_in(compat.SHARED_ROLLOUT), reason="shared rollout is on verl 0.9's v1 trainer only"
    ),
]

#: Losses of the same job with and without shared rollout: verl's v1 trainer moves the batch through
#: TransferQueue, whose float sums vary at this level between any two runs (test_overlap_e2e.py).
TOLERANCE = 1e-5
#: The dry run's rollout-vs-actor probability gap: the two compute the same log-probs on the CPU.
PROB_GAP = 1e-6
STEPS = CHECKPOINTED_STEPS


def test_both_pools_generate_every_step(shared_rollout_run):
    _, run = shared_rollout_run
    run.assert_ok()
    assert "shared rollout: 1 rollout replica(s) on the critic pool (replica ranks [1]" in run.log
    assert "checkpoint engine 'verl_split_cpu'" in run.log
    assert [m["step"] for m in run.metrics] == list(range(1, STEPS + 1))
    # The balancer routed requests to both pools in every step (one server per pool here).
    shares = run.series("split/critic_pool_rollout_share")
    assert len(shares) == STEPS and all(0.0 < s < 1.0 for s in shares), shares
    # ... and each server says so itself: step k generates with the weights pushed after step k-1.
    for step in range(1, STEPS + 1):
        for replica in (0, 1):
            assert f"replica {replica} generates with the weights of step {step - 1}" in run.log, (replica, step)


def test_no_balancer_process_outlives_the_run(shared_rollout_run):
    """A load balancer's process once outlived its run by minutes, its raylet gone, reparented to init
    (code_review_3.md item 8): verl-split kills verl's balancer only once it has started. No orphan is left."""
    _, run = shared_rollout_run
    run.assert_ok()
    deadline = time.monotonic() + 15.0
    while (orphans := orphaned_balancers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not orphans, orphans


def orphaned_balancers() -> list[str]:
    """Ray worker processes of a load balancer whose parent is init (their raylet gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == 1 and ("LoadBalancer" in cmdline or "SharedRolloutBalancer" in cmdline):
            found.append(f"{entry.name}: {cmdline[:80]}")
    return found


def test_the_critic_pool_joins_generation_when_the_critic_update_ends(shared_rollout_run):
    """The decision is forced (``LATE_JOIN``, tests/support/ppo_run.py): the critic's updates of steps 1 and 3 run on
    past the weight sync, the critic pool joins without asking the rate model, and finds requests still queued.
    What follows is checked: when it joined, what it took, with which weights, never beside the critic's update."""
    out, run = shared_rollout_run
    run.assert_ok()
    by_step = {m["step"]: m for m in run.metrics}
    for step in (1, 3):  # from the start: the first push at start-up; after step 2's checkpoint joined its update
        assert by_step[step]["split/critic_pool_joined"] == 1.0 and by_step[step]["split/critic_pool_join_s"] == 0.0
        assert by_step[step]["split/critic_update_deferred"] == 1.0
    records = [json.loads(line) for line in (out / "updates.jsonl").read_text().splitlines()]
    update_ends = sorted(
        r["end"] for r in records if r.get("role") == "critic" and r["phase"] == "update" and "end" in r
    )
    for step in (2, 4):
        # Step k-1's critic update ran on (deferred); the actor pool generated meanwhile, the critic pool joined
        # after it, took what was still queued, and the step says what that saved (an estimate).
        late_step = by_step[step]
        assert f"shared rollout: the critic pool joined step {step}'s generation after the critic's update" in run.log
        assert late_step["split/critic_pool_joined"] == 1.0 and late_step["split/critic_pool_join_s"] > 0.0
        assert 0.0 < late_step["split/critic_pool_rollout_share"] < 1.0, late_step
        assert late_step["split/shared_rollout_saved_estimate_s"] > 0.0
        # The critic's update and the critic pool's generation never shared its GPU: as the processes themselves
        # saw it, every request the critic pool's server (replica 1) generated with step k-1's weights began after
        # step k-1's critic update had ended on its worker.
        late = [
            r["start"] for r in records if r["phase"] == "generate" and r["replica"] == 1 and r["weights"] == step - 1
        ]
        ended = update_ends[step - 2]
        assert late and min(late) > ended, (step, late, ended)


def test_every_replica_gets_every_step_s_weights(shared_rollout_run):
    _, run = shared_rollout_run
    run.assert_ok()
    # The hybrid replica (0) gets them in-process (naive), the critic pool's (1) through the checkpoint engine,
    # once at start-up (step 0) and after every step's update.
    for step in range(0, STEPS + 1):
        for replica in (0, 1):
            assert re.search(rf"replica {replica} loaded \d+ tensors \(step {step}\)", run.log), (replica, step)
    pushes = run.series("split/shared_rollout_sync_s")
    assert len(pushes) == STEPS and all(s > 0.0 for s in pushes), pushes  # logged every step; not a timing
    # Sequences generated on the critic pool were sampled with the actor's current weights: verl's
    # rollout-vs-actor probability gap stays at the dry run's ~1e-9 (it covers every sequence of the step).
    gaps = run.series("training/rollout_probs_diff_max")
    assert len(gaps) == STEPS and max(gaps) < PROB_GAP, gaps


def test_same_numbers_as_without_shared_rollout(shared_rollout_run, example_run):
    """The CPU rollout seeds each sample from its prompt and the weights' step, not from the replica,
    so the sampling is the same wherever a request lands: the losses are those of the run without (the example's
    run of the same job, its first steps)."""
    _, shared = shared_rollout_run
    example_out, example, console = example_run
    shared.assert_ok()
    assert example.returncode == 0, console[-6000:]
    plain = read_metrics(example_out / METRICS_FILE)
    assert plain and "split/critic_pool_rollout_share" not in plain[0]
    for key in ("critic/vf_loss", "actor/pg_loss", "critic/vpred_mean", "critic/returns/mean", "response_length/mean"):
        without = [float(step[key]) for step in plain]
        assert shared.series(key)[: len(without)] == pytest.approx(without, rel=TOLERANCE, abs=TOLERANCE), key


#: The hung server's limit in the runs below (VERL_SPLIT_ROLLOUT_WATCHDOG_S): a request there takes under a second.
HANG_LIMIT_S = 20
#: What the critic pool's server does in step 2 (the test plugin), the record it logs then, and what the run's error
#: says of it.
FAULTS = {
    "dies": (
        {"SLOW_ROLLOUT_DIE": "1@2"},
        "died",
        r"died \(Ray records its server's actor as dead\)\. It is parked",
    ),
    "hangs": (
        {"SLOW_ROLLOUT_HANG": "1@2"},
        "hangs",
        rf"hangs: it has held (?P<held>\d+) request\(s\) and ended none for (?P<idle>\d+) s "
        rf"\(VERL_SPLIT_ROLLOUT_WATCHDOG_S={HANG_LIMIT_S}\)\. It is parked",
    ),
}


@pytest.mark.extended(
    reason="a server that dies mid-generation ends a RayPPOTrainer run in CI (test_shared_rollout_v0_e2e.py); the "
    "watch that finds a dead or hung server while the v1 trainer waits, and the balancer that parks it or finds it "
    "holding requests past the limit: test_generation_watchdog.py (verl's balancer, the trainer's side faked)"
)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_server_that_dies_or_hangs_mid_generation_ends_the_run_naming_it(tiny_assets, tmp_path, fault):
    """The critic pool's server exits at its second request of step 2 (test plugin ``SLOW_ROLLOUT_DIE``), or never
    ends its first (``SLOW_ROLLOUT_HANG``: it holds that request and the ones behind it). verl's v1 trainer does not
    stop for either: ``ReplayBuffer.sample`` counts a failed prompt as done and the step would go on without it, and
    it waits for a held one without end. Without the deferral the critic pool generates from every weight sync, so
    step 2 certainly routes to it. The watchdog stops the run with verl-split's error naming the replica, the dead
    server at its next probe or when the wait ends (every server probed once more), the hung one once it has held
    its requests past the limit; step 1's checkpoint is the last, intact."""
    knobs, logged, said = FAULTS[fault]
    out = tmp_path / fault
    out.mkdir()
    checkpoints = out / "checkpoints"
    environment = plugin_env(
        out,
        VERL_SPLIT="1",
        VERL_SPLIT_PLACEMENT="halves",
        VERL_SPLIT_SHARED_ROLLOUT="1",
        VERL_SPLIT_OVERLAP="updates,prep",
        VERL_SPLIT_ROLLOUT_WATCHDOG_S=str(HANG_LIMIT_S),
        SLOW_GENERATE_SLEEP="0.25",
        RAY_DEDUP_LOGS="0",
        **knobs,
    )
    overrides = checkpointed_overrides(tiny_assets, out, "v1", checkpoints, resume=False, steps=2, saved=1)
    run = run_main_ppo(overrides, out, env=environment)
    assert run.returncode != 0
    records = [json.loads(line) for line in (out / "updates.jsonl").read_text().splitlines()]
    assert [r[logged] for r in records if logged in r] == [1]
    found = re.search(
        r"SharedRolloutError: shared rollout: generation stopped: the rollout server of replica 1 \(critic pool\) "
        + said,
        run.log,
    )
    assert found, run.log[-4000:]
    if fault == "hangs":
        assert int(found["held"]) >= 1 and int(found["idle"]) >= HANG_LIMIT_S
    assert [m["step"] for m in run.metrics] == [1]  # step 1 completed and was logged; nothing after
    assert last_checkpoint(checkpoints) == 1
