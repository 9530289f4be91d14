"""verl's console output as each release prints it, written from the release's logger code (not copied from any
log), for ``verl-split advise``'s tests and ``benchmarks/advise_speed.py``.

What each release prints, and where it says so in verl's sources (the tags of verl-project/verl):

* **0.1** (``v0.1``): ``verl/utils/logger/aggregate_logger.py`` ``concat_dict_to_str``: ``step:{step}`` then
  ``f'{k}:{v:.3f}'`` for each numeric value, joined by `` - ``; ``verl/trainer/ppo/ray_trainer.py`` ``fit``
  times ``timing/gen``, ``timing/ref``, ``timing/values``, ``timing/adv``, ``timing/update_critic``,
  ``timing/update_actor`` (no step total, no old_log_prob: ``fsdp_workers.generate_sequences`` computes the old
  log-probs inside generation) and logs ``step=global_steps`` from 0. The trainer runs in the Ray task
  ``main_task`` (``verl/trainer/main_ppo.py``), which pprints the config first.
* **0.3** (``v0.3.0.post1``): the same ``{v:.3f}``; ``_timer`` names ``timing_s/*`` through
  ``metric_utils.compute_timing_metrics`` (``step`` last: the outer timer ends last), then
  ``timing_per_token_ms/*`` and ``perf/*``; an initial validation logged at step 0 (``val/test_score/<source>``),
  training from step 1; a ``tqdm`` bar "Training Progress"; the ``TaskRunner`` actor pprints the config.
* **0.7** (``v0.7.0``): ``f"{k}:{pprint.pformat(v)}"`` (since 0.5: a float's repr); ``marked_timer`` adds
  ``reward``; validation as ``val-core/<source>/reward/mean@1``; verl 0.7 pins numpy < 2, so plain reprs.
* **0.9** (``v0.9.0``): the same logger; the v1 trainer's ``TaskRunnerV1`` (``verl/trainer/main_ppo.py``) and
  ``verl/trainer/ppo/v1/trainer_base.py`` timers, with ``update_weights``; numpy 2's reprs
  (``np.float64(0.5)``, ``np.int64(2)``) for the metrics verl reduces with numpy.

Ray prints every line of a remote actor or task behind ``(Name pid=N)``, coloured cyan (``\\x1b[36m...\\x1b[0m``).
"""

from __future__ import annotations

import pprint
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CYAN, RESET = "\x1b[36m", "\x1b[0m"


@dataclass(frozen=True)
class Style:
    version: str
    task: str  # the Ray actor or task that runs the trainer
    three_decimals: bool  # {v:.3f} (0.1-0.4) or pprint.pformat (0.5+)
    timing: str  # "timing/" (0.1) or "timing_s/"
    total: bool  # logs timing_s/step
    first_step: int
    validation: str | None  # the key of the step-0 validation line, None: none
    numpy2: bool  # reduced metrics print as np.float64(...)
    tqdm: bool


STYLES = {
    "0.1": Style("0.1", "main_task", True, "timing/", False, 0, None, False, False),
    "0.3": Style("0.3", "TaskRunner", True, "timing_s/", True, 1, "val/test_score/openai/gsm8k", False, True),
    "0.7": Style("0.7", "TaskRunner", False, "timing_s/", True, 1, "val-core/openai/gsm8k/reward/mean@1", False, True),
    "0.9": Style("0.9", "TaskRunnerV1", False, "timing_s/", True, 1, "val-core/openai/gsm8k/reward/mean@1", True, True),
}
#: The order verl's timers end in a step (``timing_raw`` keeps insertion order; ``step`` ends last).
TIMER_ORDER = (
    "gen",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
    "update_weights",
    "step",
)


def config(nnodes: int, n_gpus_per_node: int, split_placement: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A trainer config as ``OmegaConf.to_container(config, resolve=True)`` gives it: the keys advise reads and
    enough others that the pprint spans many lines, as it does."""
    cfg: dict[str, Any] = {
        "actor_rollout_ref": {
            "actor": {"ppo_mini_batch_size": 64, "strategy": "fsdp", "optim": {"lr": 1e-06, "clip_grad": 1.0}},
            "model": {"path": "Qwen/Qwen2.5-0.5B-Instruct", "enable_gradient_checkpointing": True},
            "rollout": {"name": "vllm", "tensor_model_parallel_size": 1, "n": 1, "gpu_memory_utilization": 0.5},
            "ref": {"log_prob_micro_batch_size_per_gpu": 16},
        },
        "algorithm": {"adv_estimator": "gae", "gamma": 1.0, "lam": 1.0, "kl_ctrl": {"kl_coef": 0.001}},
        "critic": {"strategy": "fsdp", "optim": {"lr": 1e-05}, "model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}},
        "data": {"train_batch_size": 256, "max_prompt_length": 512, "max_response_length": 512},
        "reward_model": {"enable": False, "max_length": None, "clip": float("inf")},
        "trainer": {
            "critic_warmup": 0,
            "experiment_name": "gsm8k_ppo",
            "logger": ["console"],
            "n_gpus_per_node": n_gpus_per_node,
            "nnodes": nnodes,
            "project_name": "verl_examples",
            "save_freq": -1,
            "test_freq": 10,
            "total_epochs": 15,
        },
    }
    if split_placement is not None:
        cfg["split_placement"] = dict(split_placement)
    return cfg


def _value(style: Style, key: str, value: float, reduced: bool) -> str:
    if style.three_decimals:
        return f"{key}:{value:.3f}"
    if reduced and style.numpy2:
        return f"{key}:np.float64({value!r})"
    return f"{key}:{pprint.pformat(value)}"


def step_line(style: Style, step: int, metrics: Mapping[str, float]) -> str:
    """``concat_dict_to_str`` of one training step, in the order its ``fit`` fills ``metrics``."""
    timings = {name: metrics[f"timing_s/{name}"] for name in TIMER_ORDER if f"timing_s/{name}" in metrics}
    if style.version == "0.1":  # no old_log_prob timer: it runs inside generate_sequences; no step timer
        timings["gen"] = timings.get("gen", 0.0) + timings.pop("old_log_prob", 0.0)
        timings.pop("step", None)
        timings.pop("reward", None)
        timings.pop("update_weights", None)
    items = [f"step:{step}"]
    if style.version != "0.1":
        items += [_value(style, f"global_seqlen/{k}", v, False) for k, v in (("min", 9822.0), ("max", 10213.0))]
    items += [_value(style, "critic/vf_loss", 0.0871, True), _value(style, "critic/grad_norm", 3.82, True)]
    items += [_value(style, "actor/pg_loss", -0.0123, True), _value(style, "actor/ppo_kl", 0.0004, True)]
    items += [_value(style, "critic/score/mean", 0.4125, False), _value(style, "response_length/mean", 187.5, False)]
    items += [_value(style, f"{style.timing}{name}", value, False) for name, value in timings.items()]
    items += [_value(style, f"timing_per_token_ms/{name}", 0.0213, False) for name in ("gen", "update_actor")]
    items += [_value(style, key, value, False) for key, value in metrics.items() if key.startswith("split/")]
    if style.version != "0.1":
        items += [_value(style, "perf/total_num_tokens", 98304, False), _value(style, "perf/throughput", 1234.5, False)]
    return " - ".join(items)


def prefix(style: Style, pid: int = 4321, colour: bool = True) -> str:
    text = f"({style.task} pid={pid})"
    return f"{CYAN}{text}{RESET} " if colour else f"{text} "


def console_log(
    version: str,
    steps: Sequence[Mapping[str, float]],
    cfg: Mapping[str, Any] | None = None,
    colour: bool = True,
    noise: int = 3,
) -> str:
    """What the driver's terminal shows for a run of ``steps`` (``timing_s/*`` and ``split/*`` metrics each, as
    ``test_advise_profiles`` writes them), in ``version``'s style, ``noise`` lines of other processes per step."""
    style = STYLES[version]
    own = prefix(style, colour=colour)
    worker = f"{CYAN}(WorkerDict pid=5555){RESET} " if colour else "(WorkerDict pid=5555) "
    lines = ["2025-05-01 10:00:00,000\tINFO worker.py:1888 -- Started a local Ray instance."]
    if cfg is not None:
        lines += [own + line for line in pprint.pformat(cfg).splitlines()]
    if style.validation:
        lines.append(own + f"step:0 - {_value(style, style.validation, 0.1, False)}")
    total = len(steps)
    for i, metrics in enumerate(steps):
        n = style.first_step + i
        for j in range(noise):
            lines.append(worker + f"[rank0]: step {n} micro-batch {j}: tokens 4096, loss scale 1.0")
        if style.tqdm:
            lines.append(own + f"Training Progress: {100 * (i + 1) // total:3d}%|####| {i + 1}/{total} [00:14<00:28]")
        lines.append(own + step_line(style, n, metrics))
    return "\n".join(lines) + "\n"


#: Metrics of a v1 step beyond those ``step_line`` writes: a real 0.9 step logs ~130 (actor/*, critic/*, perf/*).
EXTRA_METRICS = 100


def long_console_log(path: Path, steps: int, megabytes: float) -> int:
    """A long run's console in 0.9's style, ``megabytes`` in all: ~130 metrics a step line (as a real v1 step
    logs), other processes' lines between the steps, some with bytes that are not UTF-8. Its size in bytes."""
    style = STYLES["0.9"]
    own = prefix(style)
    extra = " - ".join(f"actor/extra_metric_{i}/mean:np.float64({0.001 * i!r})" for i in range(EXTRA_METRICS))
    worker = [f"{CYAN}(WorkerDict pid={5000 + i}){RESET} " for i in range(8)]
    noise = [
        "[rank{r}]:W1124 14:58:53.663000 6557 torch/fx/_symbolic_trace.py:56] is_fx_tracing will return true",
        "INFO:2026-11-24 14:58:54,896:replica {r} loaded 27 tensors (step {s}) [repeated 3x across cluster]",
        "/usr/lib/python3.11/site-packages/torch/distributed/fsdp/_fully_shard/_fsdp_state.py:331: UserWarning",
        "Using blocking ray.get inside async actor. This blocks the event loop. \udcff\udcfe",
    ]
    step_bytes = len(step_line(style, 1, _stock(8))) + len(extra) + 40
    per_step = max(int((megabytes * 2**20 / steps - step_bytes) / 110), 0)  # ~110 bytes a noise line
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("\n".join(own + line for line in pprint.pformat(config(1, 8)).splitlines()) + "\n")
        for n in range(1, steps + 1):
            for i in range(per_step):
                f.write(worker[i % 8] + noise[i % 4].format(r=i % 8, s=n) + "\n")
            f.write(own + step_line(style, n, _stock(8, 1.0 + 0.001 * (n % 7))) + " - " + extra + "\n")
    return path.stat().st_size


def _stock(n: int, scale: float = 1.0) -> dict[str, float]:
    from support.advise_profiles import SUBLINEAR, stock_step

    return stock_step(SUBLINEAR, n, scale)
