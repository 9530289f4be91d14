"""Every ``VERL_SPLIT*`` environment variable, read in this one module.

Standard library only: the bootstrap imports it in every process of every verl run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from verl_split.core.errors import SettingsError

#: Every variable verl-split reads starts with this; so must every name it is given.
PREFIX = "VERL_SPLIT"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

#: ``VERL_SPLIT_ROLLOUT_WATCHDOG_S``'s default: generous, half an hour. A vLLM server ends requests every few
#: seconds while it holds many; the longest wait is the last long response of a step alone on its server.
ROLLOUT_WATCHDOG_S = 1800.0
#: ``VERL_SPLIT_LATE_JOIN``'s value that joins without the rate model.
ALWAYS = "always"
#: ``VERL_SPLIT_TAIL``'s values (``runtime/shared_rollout/admission.py``'s orders; the first is the default).
TAIL_ORDERS = ("longest_first", "verl")
#: ``VERL_SPLIT_CPU_LENGTHS``'s values (``runtime/cpu/lengths.py``; the first is the default).
CPU_LENGTHS = ("fixed", "long_tail")

#: name -> (default, one-line meaning). docs/configuration.md's table lists these.
VARIABLES: dict[str, tuple[str, str]] = {
    "VERL_SPLIT": ("off", "Switch verl-split on (1/true/yes/on) in every process of the run."),
    "VERL_SPLIT_PLACEMENT": (
        "halves",
        "Placement shorthand: halves, all, a ratio A:C, or ROLES:GPUS groups joined by ';'.",
    ),
    "VERL_SPLIT_SHARED_ROLLOUT": (
        "off",
        "Extra rollout replicas on the critic pool's GPUs (rollout on both pools); verl 0.8+ (0.9's v1 trainer in "
        "sync mode, RayPPOTrainer).",
    ),
    "VERL_SPLIT_OVERLAP": (
        "on",
        "Phases run on both pools at once: on (all: updates,prep,defer_critic), off (none), or a comma list of "
        "updates (the actor and critic updates), prep (values beside old_log_prob + ref) and defer_critic "
        "(the critic's update runs on into the next step's generation, joined at its values).",
    ),
    "VERL_SPLIT_LATE_JOIN": (
        "auto",
        "With shared rollout and defer_critic: when the critic's update runs on past the weight sync, the critic "
        "pool joins generation once it ends, if the rate model says it pays (on), or sits that generation out "
        "(off); auto: on in the CPU dry run, off on GPUs, where the join's push beside a generating vLLM has not "
        "run yet; always: on, and it joins without asking the rate model (tests and measurements: a join that "
        "does not pay lengthens the step).",
    ),
    "VERL_SPLIT_TAIL": (
        "longest_first",
        "With shared rollout: the order requests waiting in verl-split's balancer get a server in: longest_first (the "
        "longest predicted from the same prompt's last length first) or verl (arrival order). Order only: the samples "
        "do not change.",
    ),
    "VERL_SPLIT_ROLLOUT_WATCHDOG_S": (
        f"{ROLLOUT_WATCHDOG_S:g}",
        "With shared rollout: a rollout server that holds requests and ends none of them for this many seconds is "
        "taken as hung, and the run stops naming its replica (SharedRolloutError); 0: no limit.",
    ),
    "VERL_SPLIT_STREAM_VALUES": (
        "on",
        "With split placement: the critic pool computes the values of samples that have finished generating while "
        "the rest still generate (on; it steps aside with a log line where that is not exact), or not (off).",
    ),
    "VERL_SPLIT_CPU": ("off", "CPU dry run: CPU platform, gloo and a Hugging Face rollout, no GPU needed."),
    "VERL_SPLIT_CPU_LENGTHS": (
        "fixed",
        "CPU dry run: the responses' lengths: fixed (up to rollout.response_length) or long_tail (each prompt's "
        "own cap, drawn from a long-tailed distribution, the same in every run).",
    ),
    "VERL_SPLIT_CPU_HOLD_AFTER": (
        "0",
        "CPU dry run, for tests: each rollout server answers its first N requests per weight version and holds "
        "the rest until verl-split's streamed values release them (a forced generation tail); 0: hold nothing.",
    ),
    "VERL_SPLIT_TRACE": ("", "Write a Chrome-trace timeline of the updates per pool to this file."),
}


#: The phases of a step that verl-split can run on both pools at once (``VERL_SPLIT_OVERLAP``).
#: ``defer_critic`` builds on ``updates``: the critic's update is dispatched beside the actor's and left
#: running into the next step (``verl_split/runtime/overlap/deferral.py``).
OVERLAP_PHASES = ("updates", "prep", "defer_critic")
#: What ``on`` (and an unset ``VERL_SPLIT_OVERLAP``) means: every phase.
ON_PHASES = frozenset(OVERLAP_PHASES)


def parse_overlap(raw: str | None) -> frozenset[str]:
    """``VERL_SPLIT_OVERLAP``: an on/off switch (on = every phase) or a comma list of phases."""
    value = (raw or "").strip().lower()
    if value in _TRUE or not value:
        return ON_PHASES
    if value in _FALSE:
        return frozenset()
    phases = [p.strip() for p in value.split(",") if p.strip()]
    if not phases or any(p not in OVERLAP_PHASES for p in phases):
        raise SettingsError(
            f"VERL_SPLIT_OVERLAP={raw!r} is not an accepted value. Use on ({','.join(sorted(ON_PHASES))}), "
            f"off (none), or a comma list of the phases {', '.join(OVERLAP_PHASES)}, e.g. VERL_SPLIT_OVERLAP=updates."
        )
    if "defer_critic" in phases and "updates" not in phases:
        # The deferred critic update is dispatched beside the actor's: it is the update overlap, extended.
        raise SettingsError(
            f"VERL_SPLIT_OVERLAP={raw!r}: defer_critic runs the critic's update on into the next step beside the "
            "actor's update, so it needs the updates phase too. Use e.g. VERL_SPLIT_OVERLAP=updates,defer_critic."
        )
    return frozenset(phases)


def parse_switch(name: str, raw: str | None, default: bool) -> bool:
    """Read an on/off variable strictly: a typo must not silently mean 'off'."""
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False if value else default
    raise SettingsError(
        f"{name}={raw!r} is not an accepted value. Use one of {', '.join(_TRUE)} to switch it on, "
        f"or one of {', '.join(v for v in _FALSE if v)} (or leave it unset) to switch it off."
    )


@dataclass(frozen=True)
class Settings:
    """What the environment asks of verl-split in this process."""

    enabled: bool = False
    placement: str = ""  # VERL_SPLIT_PLACEMENT as given; empty when unset (the planner then uses halves)
    overlap_phases: frozenset[str] = ON_PHASES
    cpu: bool = False
    trace_path: str = ""
    #: Rollout replicas on the critic pool too (``VERL_SPLIT_SHARED_ROLLOUT``); the config's
    #: ``split_placement.shared_rollout`` wins over it (``placement.shared_rollout_from_config``).
    shared_rollout: bool = False
    #: ``VERL_SPLIT_LATE_JOIN``: True on (and always), False off, None auto (``coordinator.late_join_on``).
    late_join: bool | None = None
    #: ``VERL_SPLIT_LATE_JOIN=always``: the critic pool joins without asking the rate model (``both_pools.py``).
    late_join_always: bool = False
    #: ``VERL_SPLIT_ROLLOUT_WATCHDOG_S``: seconds a rollout server may hold requests without ending one; 0: no
    #: limit (``shared_rollout.watchdog``).
    rollout_watchdog_s: float = ROLLOUT_WATCHDOG_S
    #: ``VERL_SPLIT_TAIL``: the balancer's admission order (``shared_rollout.admission``).
    tail: str = TAIL_ORDERS[0]
    #: ``VERL_SPLIT_STREAM_VALUES``: values streamed into generation's tail (``overlap.stream_values``).
    stream_values: bool = True
    #: ``VERL_SPLIT_CPU_LENGTHS``: the CPU rollout's response lengths (``runtime/cpu/lengths.py``).
    cpu_lengths: str = CPU_LENGTHS[0]
    #: ``VERL_SPLIT_CPU_HOLD_AFTER``: requests a CPU rollout server answers per weight version before it holds
    #: the rest (``runtime/cpu/hold.py``); 0: none held.
    cpu_hold_after: int = 0

    @property
    def overlap(self) -> bool:
        """The actor and critic updates of a step run at the same time."""
        return "updates" in self.overlap_phases

    @property
    def overlap_prep(self) -> bool:
        """The critic's values run beside the actor's old_log_prob + ref."""
        return "prep" in self.overlap_phases

    @property
    def defer_critic(self) -> bool:
        """The critic's update runs on while the actor pool starts the next step; it needs ``updates``."""
        return "defer_critic" in self.overlap_phases

    @property
    def any_active(self) -> bool:
        return self.enabled or self.cpu


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """``VERL_SPLIT*`` names in the environment that verl-split does not read (typos)."""
    env = os.environ if environ is None else environ
    return sorted(k for k in env if k.startswith(PREFIX) and k not in VARIABLES)


def read(environ: Mapping[str, str] | None = None) -> Settings:
    """Read every ``VERL_SPLIT*`` variable under the one "off" policy; raise SettingsError.

    The policy, the same on every verl family (0.9's entry point and 0.7/0.8's start-up
    hook both end here): an unknown ``VERL_SPLIT*`` name is always an error, because a
    typo of the switch (``VERL_SPLITT=1``) would otherwise run stock verl silently; the
    switches ``VERL_SPLIT`` / ``VERL_SPLIT_CPU`` must hold an on/off value; and while both
    are off nothing else is read, so a leftover ``VERL_SPLIT_OVERLAP=maybe`` leaves verl stock.
    """
    env = os.environ if environ is None else environ
    unknown = unknown_variables(env)
    if unknown:
        raise SettingsError(
            f"unknown variable {', '.join(unknown)}; verl-split reads only {', '.join(VARIABLES)}. "
            "Fix the name (e.g. VERL_SPLIT=1), or unset it to run stock verl."
        )
    enabled = parse_switch("VERL_SPLIT", env.get("VERL_SPLIT"), False)
    cpu = parse_switch("VERL_SPLIT_CPU", env.get("VERL_SPLIT_CPU"), False)
    if not (enabled or cpu):
        return Settings()
    return Settings(
        enabled=enabled,
        placement=(env.get("VERL_SPLIT_PLACEMENT") or "").strip(),
        overlap_phases=parse_overlap(env.get("VERL_SPLIT_OVERLAP")),
        cpu=cpu,
        trace_path=(env.get("VERL_SPLIT_TRACE") or "").strip(),
        shared_rollout=parse_switch("VERL_SPLIT_SHARED_ROLLOUT", env.get("VERL_SPLIT_SHARED_ROLLOUT"), False),
        late_join=parse_late_join(env.get("VERL_SPLIT_LATE_JOIN")),
        late_join_always=(env.get("VERL_SPLIT_LATE_JOIN") or "").strip().lower() == ALWAYS,
        rollout_watchdog_s=parse_seconds("VERL_SPLIT_ROLLOUT_WATCHDOG_S", env.get("VERL_SPLIT_ROLLOUT_WATCHDOG_S")),
        tail=parse_tail(env.get("VERL_SPLIT_TAIL")),
        stream_values=parse_switch("VERL_SPLIT_STREAM_VALUES", env.get("VERL_SPLIT_STREAM_VALUES"), True),
        cpu_lengths=parse_choice("VERL_SPLIT_CPU_LENGTHS", env.get("VERL_SPLIT_CPU_LENGTHS"), CPU_LENGTHS),
        cpu_hold_after=parse_count("VERL_SPLIT_CPU_HOLD_AFTER", env.get("VERL_SPLIT_CPU_HOLD_AFTER")),
    )


def parse_tail(raw: str | None) -> str:
    """``VERL_SPLIT_TAIL``: one of :data:`TAIL_ORDERS` (unset: the first)."""
    return parse_choice("VERL_SPLIT_TAIL", raw, TAIL_ORDERS)


def parse_choice(name: str, raw: str | None, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (unset or empty: the first)."""
    value = (raw or "").strip().lower() or choices[0]
    if value not in choices:
        raise SettingsError(f"{name}={raw!r} is not an accepted value. Use {' or '.join(choices)}.")
    return value


def parse_count(name: str, raw: str | None) -> int:
    """A whole number, 0 or more; unset or empty: 0."""
    value = (raw or "").strip() or "0"
    if not value.isdigit():
        raise SettingsError(f"{name}={raw!r} is not a whole number. Give one, 0 or more (0: off), e.g. {name}=4.")
    return int(value)


def parse_late_join(raw: str | None) -> bool | None:
    """``VERL_SPLIT_LATE_JOIN``: on/off, ``auto`` (or unset): None, ``always``: on (without the rate model)."""
    if raw is not None and raw.strip().lower() == ALWAYS:
        return True
    try:
        return parse_auto_switch("VERL_SPLIT_LATE_JOIN", raw)
    except SettingsError:
        raise SettingsError(
            f"VERL_SPLIT_LATE_JOIN={raw!r} is not an accepted value. Use auto (or leave it unset: on in the CPU dry "
            f"run, off on GPUs), on ({', '.join(_TRUE)}), off ({', '.join(v for v in _FALSE if v)}), or {ALWAYS} "
            "(on, without asking the rate model)."
        ) from None


def parse_seconds(name: str, raw: str | None, default: float = ROLLOUT_WATCHDOG_S) -> float:
    """A number of seconds, 0 or more (0: no limit); unset or empty: ``default``."""
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):  # also NaN
        raise SettingsError(
            f"{name}={raw!r} is not a number of seconds. Give one, 0 or more (0: no limit), e.g. {name}=600; "
            f"or leave it unset ({default:g})."
        )
    return value


def parse_auto_switch(name: str, raw: str | None) -> bool | None:
    """An on/off variable that may also be ``auto`` (or unset): None."""
    if raw is None or raw.strip().lower() in ("auto", ""):
        return None
    return parse_switch(name, raw, False)


_frozen: Settings | None = None


def freeze(frozen: Settings) -> None:
    """Keep the settings activation read: the run uses these, not a later environment."""
    global _frozen
    _frozen = frozen


def thaw() -> Settings | None:
    """Forget the frozen settings (tests): ``current()`` reads the environment again. Returns what was frozen."""
    global _frozen
    before, _frozen = _frozen, None
    return before


def current() -> Settings:
    """The settings frozen at activation; read from the environment where nothing activated."""
    return _frozen if _frozen is not None else read()


#: Variables besides VERL_SPLIT* that a run in CPU mode needs in every Ray worker.
CPU_MODE_VARIABLES: dict[str, str] = {
    "VERL_PLATFORM": "cpu",
    # verl registers its FSDP engines for devices "cuda" and "npu" only
    # (verl/workers/engine/fsdp/transformer_impl.py); this verl knob picks the "cuda" ones,
    # which run on whatever device the platform names.
    "VERL_ENGINE_DEVICE": "cuda",
}


def forwarded_env_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables to put into a Ray ``runtime_env``: workers on an existing cluster inherit
    the raylet's environment, not the launching shell's."""
    env = os.environ if environ is None else environ
    forwarded = {k: v for k, v in env.items() if k.startswith(PREFIX)}
    trace = forwarded.get("VERL_SPLIT_TRACE", "").strip()
    if trace:  # the trainer's process may start in another folder, or on another node: keep the user's path
        forwarded["VERL_SPLIT_TRACE"] = os.path.abspath(trace)
    if read(env).cpu:
        for key, default in CPU_MODE_VARIABLES.items():
            forwarded[key] = env.get(key, default)
    return forwarded
