"""What ``advise --profile`` checks before it runs anything: the overrides, the environment, the cluster.

Everything here is cheap and can fail before a single verl run starts (``profile.py`` runs them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from verl_split.core import settings
from verl_split.placement import Cluster
from verl_split.tools.advise.runs import AdviseError

#: hydra's own options that main_ppo accepts among the overrides.
_HYDRA_OPTIONS = {
    "--config-path": "config_path",
    "-cp": "config_path",
    "--config-name": "config_name",
    "-cn": "config_name",
}
_OVERRIDE = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][\w.@/-]*(=|$)")


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
