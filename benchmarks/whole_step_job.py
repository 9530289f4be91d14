"""The whole-step benchmark's job: the work of one PPO step, fixed by its sizes, so that two runs measure the same.

Used by ``whole_step.py``. A job is a :class:`Workload` (prompts, answer length, epochs, token budgets, trainer).
It comes from one of three places (``--job``):

- a **pinned** job by name, per trainer (:data:`PINNED`): the sizes a recorded run's calibration landed on,
  the run whose figures the docs quote; ``long-tail`` is the ``1to1`` job's budgets with long-tailed answers
  (:data:`LONG_TAIL_RESPONSE_LENGTH`);
- a **file**: a results JSON this script wrote (its ``settings`` row holds the job it ran), or a calibration
  saved with ``--calibrate --repeats 0 --json FILE``;
- a new **calibration** (``--calibrate``): split sequential runs that move the token budgets until each phase
  has the work ratio asked; the job it lands on is printed and stored, and ``--job FILE`` runs it again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

MAX_PROMPT = 32  # dry_run_overrides' data.max_prompt_length


@dataclass
class Workload:
    batch: int
    response_length: int
    critic_tokens: int
    critic_epochs: int
    actor_epochs: int
    actor_update_tokens: int
    actor_prep_tokens: int
    trainer: str
    #: The CPU rollout's answer lengths (``VERL_SPLIT_CPU_LENGTHS``): ``fixed`` (every answer up to
    #: ``response_length``) or ``long_tail`` (each prompt's own cap). JSONs from before it ran ``fixed``.
    lengths: str = "fixed"

    @property
    def min_tokens(self) -> int:  # verl's dynamic batch size needs the longest sequence to fit
        return MAX_PROMPT + self.response_length

    def overrides(self) -> list[str]:
        """Hydra overrides on top of the dry run's (later ones win)."""
        b = self.batch
        return [
            f"data.train_batch_size={b}",
            f"data.max_response_length={self.response_length}",
            f"actor_rollout_ref.rollout.max_model_len={self.min_tokens}",
            "trainer.total_epochs=1000",  # the 256 prompts would otherwise end the run after 256 / batch steps
            f"actor_rollout_ref.actor.ppo_mini_batch_size={b}",
            f"critic.ppo_mini_batch_size={b}",
            f"actor_rollout_ref.actor.ppo_epochs={self.actor_epochs}",
            f"critic.ppo_epochs={self.critic_epochs}",
            "actor_rollout_ref.actor.use_kl_loss=true",  # a reference policy: ref runs in the preparation
            "actor_rollout_ref.actor.use_dynamic_bsz=true",  # the critic's follows it
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={self.actor_update_tokens}",
            f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={self.actor_prep_tokens}",
            f"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={self.actor_prep_tokens}",
            f"critic.ppo_max_token_len_per_gpu={self.critic_tokens}",
            f"+critic.ppo_infer_max_token_len_per_gpu={self.critic_tokens}",  # v1: the critic's only budget
        ]

    def environment(self) -> dict[str, str]:
        """The variables the run needs besides the configuration's: the answers' lengths where not the default."""
        return {} if self.lengths == "fixed" else {"VERL_SPLIT_CPU_LENGTHS": self.lengths}

    def describe(self) -> str:
        answers = (
            f"{self.response_length}-token answers"
            if self.lengths == "fixed"
            else f"long-tailed answers of at most {self.response_length} tokens (VERL_SPLIT_CPU_LENGTHS={self.lengths})"
        )
        return (
            f"trainer {self.trainer}, {self.batch} prompts a step, {answers}, PPO epochs "
            f"actor {self.actor_epochs} / critic {self.critic_epochs}, tokens per micro-batch: actor update "
            f"{self.actor_update_tokens}, actor old_log_prob and ref {self.actor_prep_tokens}, "
            f"critic {self.critic_tokens}"
        )


@dataclass
class Job:
    """A workload and where it came from (a pinned name, a file, a calibration)."""

    name: str
    source: str
    workload: Workload

    def describe(self) -> str:
        return f"job {self.name} ({self.source}): {self.workload.describe()}"

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "workload": asdict(self.workload)}


@dataclass(frozen=True)
class Pinned:
    """A pinned job: its sizes, the recorded run (a JSON in benchmarks/) whose calibration landed on them, and what
    that calibration reached."""

    workload: Workload
    recorded: str
    reached: str


def _pinned(recorded: str, reached: str, **sizes) -> Pinned:
    return Pinned(Workload(batch=128, response_length=16, actor_prep_tokens=2048, **sizes), recorded, reached)


#: Per trainer and name, the job a recorded run's calibration landed on (its JSON's ``settings.workload``) and
#: that run, whose figures the docs quote. ``tests/project/test_whole_step_benchmark.py`` holds each against its JSON.
PINNED: dict[tuple[str, str], Pinned] = {
    # Actor and critic updates alike: calibration run 4 of 4, 2026-11-24 (split + overlaps on + shared 1.08x stock).
    ("v1", "1to1"): _pinned(
        "whole_step.json",
        "0.99:1 in the updates, 1.10:1 in the preparation",
        critic_tokens=221,
        critic_epochs=1,
        actor_epochs=1,
        actor_update_tokens=262,
        trainer="v1",
    ),
    # A critic twice the actor (--update-ratio 0.5 --critic-epochs 2): run 4 of 4, 2026-11-25, after the servers'
    # cap change the code still has (split + overlaps on + shared 1.08x stock).
    ("v1", "critic-heavy"): _pinned(
        "whole_step_late_join_critic_heavy_2.json",
        "0.52:1 in the updates, 0.81:1 in the preparation",
        critic_tokens=139,
        critic_epochs=2,
        actor_epochs=2,
        actor_update_tokens=425,
        trainer="v1",
    ),
    # RayPPOTrainer at 1:1 (--calibration-runs 6): run 4, 2026-11-27 (split + updates + prep + shared 1.13x).
    ("v0", "1to1"): _pinned(
        "whole_step_v0_1to1_calibrated.json",
        "1.02:1 in the updates, 0.94:1 in the preparation",
        critic_tokens=131,
        critic_epochs=1,
        actor_epochs=1,
        actor_update_tokens=190,
        trainer="v0",
    ),
    # RayPPOTrainer, asked for 0.5:1 (--calibration-runs 2), landed on a critic 3.2x the actor: run 2, 2026-11-27
    # (split + overlaps on + shared 1.09x). Heavier than v1's critic-heavy job: the figures it gave were on this one.
    ("v0", "critic-heavy"): _pinned(
        "whole_step_v0_critic_heavy.json",
        "0.31:1 in the updates, 0.51:1 in the preparation",
        critic_tokens=116,
        critic_epochs=2,
        actor_epochs=2,
        actor_update_tokens=417,
        trainer="v0",
    ),
}
#: The long-tail job's answer cap. Its lengths are the published run's (a lognormal capped at 512 tokens,
#: ``benchmarks/control_plane_model.py``) scaled so that 512 becomes 48: over the dry run's 256 training prompts
#: the caps average 18.6 tokens (median 17, 90th percentile 30, 4 at 48). The scale keeps a step's tokens near
#: the 1to1 job's (16 tokens an answer), which is what the CPU generates in seconds a step, so the 1to1 job's
#: token budgets still give its lanes about their 1:1 work, and the longest answers are 2.6 times the mean, as in
#: the published run.
LONG_TAIL_RESPONSE_LENGTH = 48


def _long_tail(of: Pinned) -> Pinned:
    """The ``1to1`` job with long-tailed answers (its budgets, 131 tokens and more, hold prompt + 48 tokens)."""
    workload = Workload(**{**asdict(of.workload), "response_length": LONG_TAIL_RESPONSE_LENGTH, "lengths": "long_tail"})
    return Pinned(workload, of.recorded, of.reached)


#: Not calibrated on its own: its source names the 1to1 job it borrows the budgets from.
LONG_TAIL = "long-tail"
PINNED.update({(trainer, LONG_TAIL): _long_tail(PINNED[(trainer, "1to1")]) for trainer in ("v1", "v0")})
NAMES = sorted({name for _, name in PINNED})


def pinned(name: str, trainer: str) -> Job:
    pin = PINNED[(trainer, name)]
    source = f"pinned: the job of benchmarks/{pin.recorded}, whose calibration reached {pin.reached}"
    if name == LONG_TAIL:
        source = (
            f"pinned: the {trainer} 1to1 job's budgets (benchmarks/{pin.recorded}) with long-tailed answers, "
            f"the published run's lengths scaled to {LONG_TAIL_RESPONSE_LENGTH} tokens"
        )
    return Job(f"{trainer} {name}", source, Workload(**asdict(pin.workload)))


def load(path: Path) -> Job:
    """The job a results JSON ran (its ``settings`` row), or a calibration saved with ``--repeats 0``."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"--job {path}: cannot read it as this benchmark's JSON ({error})") from None
    settings = next((r for r in rows if isinstance(r, dict) and r.get("kind") == "settings"), None) if rows else None
    recorded = (settings or {}).get("workload")
    names = {f.name for f in fields(Workload)}
    if isinstance(recorded, dict) and "lengths" not in recorded:  # recorded before the lengths were a setting
        recorded = {**recorded, "lengths": "fixed"}
    if not isinstance(recorded, dict) or set(recorded) != names:
        raise ValueError(
            f"--job {path}: no job in it (a results JSON of benchmarks/whole_step.py has a settings row whose "
            f"workload names {', '.join(sorted(names))})"
        )
    # The name it ran under (a pinned job's, "calibrated"); JSONs from before issue 47 have none.
    name = ((settings or {}).get("job") or {}).get("name") or "recorded"
    return Job(name, f"the job of {path}", Workload(**recorded))


def resolve(spec: str, trainer: str | None) -> Job:
    """``--job``: a pinned name (for ``trainer``, v1 if not given) or a file; ``trainer`` must agree with a file's."""
    if spec in NAMES:
        return pinned(spec, trainer or "v1")
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"--job {spec}: neither a pinned job ({', '.join(NAMES)}) nor a file")
    job = load(path)
    if trainer and trainer != job.workload.trainer:
        raise ValueError(
            f"--job {spec} ran on the {job.workload.trainer} trainer, --trainer asks for {trainer}: a job is its "
            "trainer's (drop --trainer, or calibrate a job for it with --calibrate)"
        )
    return job
