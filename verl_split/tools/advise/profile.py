"""``verl-split advise --profile``: run the job for a few steps in the layouts the cost model needs.

The model fits each lane at two pool sizes, so the job runs twice, for ``--steps`` steps each:

* stock verl (``VERL_SPLIT`` unset): every lane on all N GPUs;
* ``halves`` with the overlaps off (``VERL_SPLIT=1 VERL_SPLIT_PLACEMENT=halves VERL_SPLIT_OVERLAP=off``):
  every lane on its own pool, one after the other, so each lane's time is its own, not a wait.

Each run goes through :func:`verl_split.dryrun.runner.run_logged` into its own folder under ``--out``
(``main_ppo.log``, ``metrics.jsonl``), with a line per run start and per finished step on the console.
Then advice is read from the two metrics files, exactly as ``verl-split advise FILE FILE`` would.

Everything that can fail cheaply is checked before the first run: the overrides, the ``VERL_SPLIT*``
environment (verl-split stops a run with an unknown one), the cluster shape against the overrides, the
composed config (hydra errors), whether the cluster holds both layouts, and on one node without
``--cpu`` whether this machine has the GPUs.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from verl_split.core import settings
from verl_split.core.errors import VerlSplitError
from verl_split.dryrun import runner
from verl_split.placement import Cluster
from verl_split.tools.advise.runs import AdviseError

DEFAULT_STEPS = 3
DEFAULT_OUT = "verl_split_advise"
STOCK_DIR = "stock"
SPLIT_DIR = "halves_overlap_off"
#: Overrides --profile sets after the user's (later ones win in hydra): a short run that logs its steps
#: to a file, and never reads or writes the job's own checkpoints.
FORCED_KEYS = (
    "trainer.total_training_steps",
    "trainer.logger",
    "trainer.val_before_train",
    "trainer.test_freq",
    "trainer.save_freq",
    "trainer.resume_mode",
    "trainer.default_local_dir",
)
#: hydra's own options that main_ppo accepts among the overrides.
_HYDRA_OPTIONS = {
    "--config-path": "config_path",
    "-cp": "config_path",
    "--config-name": "config_name",
    "-cn": "config_name",
}
_OVERRIDE = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][\w.@/-]*(=|$)")


class ProfileRunFailed(VerlSplitError):
    """One of the profile's runs ended with a non-zero status; its log's end is printed."""

    def __init__(self, message: str, log: Path, returncode: int) -> None:
        super().__init__(message)
        self.log = log
        self.returncode = returncode


@dataclass(frozen=True)
class ProfileRun:
    """One run of the profile: its folder, what the progress lines call it, the environment it starts in."""

    folder: Path
    label: str
    env: dict[str, str]

    @property
    def metrics(self) -> Path:
        return self.folder / runner.METRICS_FILE

    @property
    def log(self) -> Path:
        return self.folder / runner.LOG_FILE


@dataclass(frozen=True)
class Profile:
    """What ``--profile`` will run: checked, nothing started yet."""

    cluster: Cluster
    steps: int
    out: Path
    overrides: tuple[str, ...]  # main_ppo's arguments, the forced ones last
    runs: tuple[ProfileRun, ...]
    rollout_tp: int
    cpu: bool
    critic: bool

    def run_overrides(self, run: ProfileRun) -> list[str]:
        return [*self.overrides, f"trainer.default_local_dir={run.folder / 'checkpoints'}"]

    def describe(self) -> str:
        layouts = " then ".join(run.label for run in self.runs)
        where = "CPU dry run (VERL_SPLIT_CPU=1), " if self.cpu else ""
        return (
            f"verl-split advise --profile: {where}{self.steps} steps of the job per layout on "
            f"{self.cluster.describe()}: {layouts}; each run's output in {self.out}/<layout>/{runner.LOG_FILE}"
        )


def forced_overrides(cluster: Cluster, steps: int) -> list[str]:
    """What --profile sets after the user's overrides (the run's checkpoint folder comes per run)."""
    return [
        f"trainer.nnodes={cluster.nnodes}",
        f"trainer.n_gpus_per_node={cluster.n_gpus_per_node}",
        f"trainer.total_training_steps={steps}",
        "trainer.logger=[console,file]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
    ]


def prepare(
    arguments: Sequence[str],
    cluster: Cluster,
    steps: int = DEFAULT_STEPS,
    out: str | os.PathLike[str] = DEFAULT_OUT,
    cpu: bool = False,
    assets: str | os.PathLike[str] | None = None,
    rollout_tp: int | None = None,
    environ: Mapping[str, str] | None = None,
    gpu_count: Any = None,
) -> Profile:
    """Check everything ``--profile`` can check without running the job; raise AdviseError (or another
    VerlSplitError) with one line saying what to fix. ``gpu_count()`` counts this machine's GPUs."""
    env = dict(os.environ if environ is None else environ)
    if steps < 2:
        raise AdviseError(
            f"--steps {steps}: at least 2, because step 1 pays one-off start-up costs and is left out of the model."
        )
    config_path, config_name, user = split_hydra_options(arguments)
    check_overrides(user)
    check_cluster_overrides(user, cluster)
    cpu_env = settings.parse_switch("VERL_SPLIT_CPU", env.get("VERL_SPLIT_CPU"), False)
    if cpu and cluster.nnodes != 1:
        raise AdviseError(f"--cpu runs on this machine only: use --nnodes 1, not {cluster.nnodes}.")
    if cpu and (config_path or config_name):
        raise AdviseError("--cpu runs verl's ppo_trainer config with the tiny job: leave out --config-path/-name.")
    stock_env, split_env = profile_environments(env, cpu)
    from verl_split.core import compat

    family = compat.check_supported()
    out_dir = Path(out).resolve()
    base: list[str] = []
    if cpu:
        from verl_split.dryrun.recipe import dry_run_overrides

        tiny = _tiny_assets(assets or out_dir / "assets")
        base = dry_run_overrides(tiny, steps, "gae", None, out_dir, cluster.n_gpus_per_node, family)
    hydra = [
        *(["--config-path", config_path] if config_path else []),
        *(["--config-name", config_name] if config_name else []),
    ]
    overrides = [*hydra, *base, *user, *forced_overrides(cluster, steps)]
    critic, replica = _check_layouts(
        config_path, config_name, [*base, *user, *forced_overrides(cluster, steps)], cluster
    )
    if rollout_tp is not None and rollout_tp != replica:
        raise AdviseError(
            f"--rollout-tp {rollout_tp}, but the job's rollout replica is {replica} GPUs "
            "(tensor x data x pipeline parallel): leave --rollout-tp out with --profile."
        )
    if not (cpu or cpu_env) and cluster.nnodes == 1 and not env.get("RAY_ADDRESS"):
        have = (gpu_count or cuda_device_count)()
        if have < cluster.n_gpus_per_node:
            raise AdviseError(
                f"this machine has {have} GPU{'s' if have != 1 else ''}, the runs need {cluster.n_gpus_per_node} "
                "(--n-gpus-per-node). Pass the cluster this machine holds, or on a machine without GPUs add --cpu "
                "(the tiny job) or VERL_SPLIT_CPU=1 (your job on CPU)."
            )
    runs = [ProfileRun(out_dir / STOCK_DIR, "stock verl", stock_env)]
    if critic:
        runs.append(ProfileRun(out_dir / SPLIT_DIR, "halves, overlaps off", split_env))
    return Profile(cluster, steps, out_dir, tuple(overrides), tuple(runs), replica, cpu, critic)


# -- the checks before any run: the config, the overrides, the cluster, the environment ------------
def _check_layouts(
    config_path: str | None, config_name: str | None, overrides: list[str], cluster: Cluster
) -> tuple[bool, int]:
    """Compose the job's config as main_ppo will and plan both layouts; (has a critic, rollout replica GPUs)."""
    from verl_split import placement
    from verl_split.tools import hydra_config

    try:
        config = hydra_config.compose_config(config_name or "ppo_trainer", config_path, overrides)
    except VerlSplitError as exc:
        # plan's message lists every override: with --cpu that is the whole tiny job. Hydra's line is enough.
        cause = str(exc.__cause__ or exc).strip().splitlines()
        raise AdviseError(
            f"the job's config does not compose with these overrides: {cause[0] if cause else exc}. "
            "Fix the override it names (a new key needs +key=value), as main_ppo would stop on it too."
        ) from None
    requirements = placement.requirements_from_config(config)
    replica = max((p.size for p in requirements.parallel if p.role == "rollout"), default=1)
    for name in ("all", "halves") if requirements.critic else ("all",):
        try:
            placement.plan_placement(placement.parse_placement(name), cluster, requirements)
        except VerlSplitError as exc:
            what = "stock verl" if name == "all" else "the split run (halves)"
            raise AdviseError(f"the cluster cannot hold {what} of this job: {exc}") from None
    return requirements.critic, replica


def split_hydra_options(arguments: Sequence[str]) -> tuple[str | None, str | None, list[str]]:
    """(config path, config name, the overrides): hydra's ``--config-path``/``--config-name`` taken out."""
    found: dict[str, str | None] = {"config_path": None, "config_name": None}
    rest: list[str] = []
    items = list(arguments)
    i = 0
    while i < len(items):
        item = items[i]
        name, eq, value = item.partition("=")
        if name in _HYDRA_OPTIONS:
            if not eq:
                if i + 1 >= len(items):
                    raise AdviseError(f"{name} needs a value, e.g. {name} <value>.")
                value = items[i + 1]
                i += 1
            found[_HYDRA_OPTIONS[name]] = value
        else:
            rest.append(item)
        i += 1
    return found["config_path"], found["config_name"], rest


def check_overrides(overrides: Sequence[str]) -> None:
    """Raise AdviseError for anything that is not a hydra override (a metrics file, a typo'd flag)."""
    for item in overrides:
        if not _OVERRIDE.match(item) or ("=" not in item and not item.startswith("~")):
            hint = (
                " --profile runs the job itself: pass the job's hydra overrides after --, "
                "or leave --profile out to advise from metrics files."
                if item.endswith(".jsonl") or os.path.exists(item)
                else " Pass the job's hydra overrides (key=value) after --, as verl.trainer.main_ppo takes them."
            )
            raise AdviseError(f"{item!r} is not a hydra override (key=value).{hint}")
        key = item.lstrip("+~").split("=", 1)[0]
        if key == "split_placement" or key.startswith("split_placement."):
            raise AdviseError(
                f"{item!r}: --profile runs stock verl and halves itself, and a split_placement in the config would "
                "replace halves. Leave split_placement out; advise then ranks every placement."
            )


def _override_value(overrides: Sequence[str], key: str) -> str | None:
    """The last value the overrides give ``key`` (with or without + / ++), or None."""
    value = None
    for item in overrides:
        name, eq, raw = item.lstrip("+").partition("=")
        if eq and name == key:
            value = raw.strip().strip("'\"")
    return value


def check_cluster_overrides(overrides: Sequence[str], cluster: Cluster) -> None:
    """The overrides may repeat the cluster's shape, not contradict it."""
    for key, flag, expected in (
        ("trainer.nnodes", "--nnodes", cluster.nnodes),
        ("trainer.n_gpus_per_node", "--n-gpus-per-node", cluster.n_gpus_per_node),
    ):
        value = _override_value(overrides, key)
        if value is not None and value != str(expected):
            raise AdviseError(
                f"the overrides set {key}={value} but {flag} is {expected}: the runs train on the cluster "
                f"{flag} names. Make them agree (or drop {key} from the overrides)."
            )


def profile_environments(environ: Mapping[str, str], cpu: bool) -> tuple[dict[str, str], dict[str, str]]:
    """(stock, split) environments: the caller's, without its ``VERL_SPLIT*`` but for CPU mode, plus each layout's.

    verl-split stops a run that has an unknown ``VERL_SPLIT*`` variable, so it is refused here, before any run.
    """
    unknown = settings.unknown_variables(environ)
    if unknown:
        raise AdviseError(
            f"unknown variable {', '.join(unknown)} in the environment; verl-split reads only "
            f"{', '.join(settings.VARIABLES)} and would stop both runs. Fix the name or unset it."
        )
    settings.parse_switch("VERL_SPLIT_CPU", environ.get("VERL_SPLIT_CPU"), False)  # a bad value: SettingsError
    base = {k: v for k, v in environ.items() if not k.startswith(settings.PREFIX)}
    if cpu:
        base["VERL_SPLIT_CPU"] = "1"
    elif "VERL_SPLIT_CPU" in environ:
        base["VERL_SPLIT_CPU"] = environ["VERL_SPLIT_CPU"]
    split = {**base, "VERL_SPLIT": "1", "VERL_SPLIT_PLACEMENT": "halves", "VERL_SPLIT_OVERLAP": "off"}
    return base, split


def _tiny_assets(directory: str | os.PathLike[str]) -> Any:
    """The tiny assets of the CPU dry run (cached), without transformers' load report on the console."""
    from transformers.utils import logging as hf_logging

    from verl_split.dryrun.assets import make_tiny_assets

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return make_tiny_assets(directory)


def cuda_device_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # no torch, or a broken CUDA install: say 0 GPUs, the message says what to do
        return 0


def run_profile(profile: Profile, stream: TextIO | None = None) -> list[Path]:
    """Run each layout in turn, a line per start and per finished step; the metrics files, stock first.

    A run that fails raises ProfileRunFailed after the end of its log is printed on stderr.
    """
    stream = stream or sys.stdout
    print(profile.describe(), file=stream, flush=True)
    if not profile.critic:
        print("the job has no critic: stock verl is the only layout, so one run", file=stream, flush=True)
    for number, run in enumerate(profile.runs, 1):
        tag = f"[{number}/{len(profile.runs)}] {run.label}"
        print(f"{tag}: starting main_ppo, its output in {run.log}", file=stream, flush=True)

        def on_step(step: dict[str, Any], tag: str = tag) -> None:
            took = step.get("timing_s/step")
            took_text = f"{float(took):.1f}s" if isinstance(took, int | float) else "done"
            print(f"{tag}: step {step['step']}/{profile.steps} {took_text}", file=stream, flush=True)

        env = dict(run.env)
        env["VERL_FILE_LOGGER_PATH"] = str(run.metrics)
        if profile.cpu:
            from verl_split.dryrun.recipe import run_environment

            env = run_environment(run.folder, env)
        finished = runner.run_logged(
            runner.main_ppo_command(profile.run_overrides(run)), env, run.folder, run.log, run.metrics, on_step
        )
        if finished.returncode != 0:
            print(runner.log_tail(run.log, 40), end="", file=sys.stderr)
            raise ProfileRunFailed(
                f"{run.label}: verl exited with status {finished.returncode}; its whole output: {run.log}",
                run.log,
                finished.returncode,
            )
        print(f"{tag}: finished in {finished.wall_s:.0f}s", file=stream, flush=True)
    return [run.metrics for run in profile.runs]
