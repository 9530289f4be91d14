"""Which verl releases verl-split supports and what each can do, declared once.

Every version question is answered here, with ``packaging`` against the installed
distribution's metadata (never verl's ``__version__``, never a hand-parsed string).
Standard library + ``packaging`` only: the start-up hook (``_startup``) imports this
module in every process of a run that set a ``VERL_SPLIT*`` variable.
"""

from __future__ import annotations

import functools
from importlib import metadata

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from verl_split.core.errors import UnsupportedVerlError

#: The oldest verl verl-split runs on; older releases stop a run that asked for verl-split.
MINIMUM = "0.7.0"
#: Releases at or above MINIMUM: a verl newer than the tested ones runs when the preflight finds every
#: seam's needs met (``verl_split/plugin/preflight.py``), with one line saying it is untested.
SUPPORTED = SpecifierSet(f">={MINIMUM}")
#: The release families the tests run on, oldest first: each has its environment; seams declare their ranges below.
SUPPORTED_FAMILIES: tuple[str, ...] = ("0.7", "0.8", "0.9")
#: Every PyPI release inside those families, each run in CI (``tests/project/test_releases.py``, ``make test-release``);
#: the README's "Supported verl" table lists the same (``tests/project/test_releases.py`` checks it).
TESTED_RELEASES: tuple[str, ...] = ("0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1")
#: The range those families span: a verl above it is accepted but untested.
TESTED = SpecifierSet(">=0.7.0,<0.10")

# What each release range has. Seams declare their range with these (seam_catalogue.SEAMS).
#: verl's ``__init__`` loads ``verl.plugins`` entry points; also ``main_ppo_v0`` and the platform registry: all
#: arrived in 0.9, and its development builds have them (verl's ``neo`` branch reads 0.9.0.dev0: a release range
#: ``>=0.9`` leaves it out, pre-releases included or not, as 0.9.0.dev0 sorts before 0.9).
ENTRY_POINTS = SpecifierSet(">=0.9.0.dev0")
MAIN_PPO_V0 = SpecifierSet(">=0.9.0.dev0")
PLATFORM_REGISTRY = SpecifierSet(">=0.9.0.dev0")
#: The v1 ``PPOTrainer`` as verl's trainer: the 0.9 releases (and newer). Not the 0.9.0.dev0 of verl's ``neo``
#: branch, which keeps its module but refuses it (``main_ppo.py``'s ``main``; RayPPOTrainer is its default).
V1_TRAINER = SpecifierSet(">=0.9")
#: Values streamed into generation's tail on the v1 trainer: 0.9.1 and newer. 0.9.0's ``PPOTrainer`` has no
#: ``prepare_step`` or ``_compute_values`` (its ``_step_once`` generates and values inline), so there the seams
#: are not declared and a split run values the batch after generation, as stock.
STREAM_VALUES_V1 = SpecifierSet(">=0.9.1")
#: Before 0.9: ``RayPPOTrainer`` is the only trainer, no platform registry (CPU device module instead).
BEFORE_V1 = SpecifierSet("<0.9.0.dev0")
#: verl's un/padding helpers without pure-torch fallbacks (flash-attention or NPU only): before the 0.9 releases,
#: neo's 0.9.0.dev0 included (its ``verl/utils/attention_utils.py``; 0.9.1's falls back to torch). Written
#: ``<0.9.0a0``: PEP 440's ``<0.9`` leaves out 0.9's own pre-releases, 0.9.0.dev0 among them.
NO_ATTENTION_FALLBACK = SpecifierSet("<0.9.0a0")
#: verl 0.8+: ``RayPPOTrainer``'s updates go through the engine workers' ``train_mini_batch``.
ENGINE_WORKERS = SpecifierSet(">=0.8")
#: verl 0.7: the legacy ``fsdp_workers`` (``update_critic`` dispatched with ``blocking=False``).
LEGACY_WORKERS = SpecifierSet("<0.8")
#: Shared rollout (rollout replicas on the critic pool too): built on the rollout servers' load balancer
#: (``workers/rollout/llm_server.py`` ``GlobalRequestLoadBalancer``, moved to ``router.py`` in 0.9.1, with
#: ``add_servers``), ``RolloutReplica.init_colocated`` and the checkpoint engine's ``CheckpointEngineManager``
#: with its ``custom_backend_module``. 0.7.1 has none of these (its balancer, ``experimental/agent_loop/
#: agent_loop.py`` ``GlobalRequestLoadBalancer``, has no ``add_servers``; no checkpoint engine). Per trainer:
#: the v1 trainer (0.9) and ``RayPPOTrainer`` (0.8, and 0.9's ``trainer.use_v1=false``).
SHARED_ROLLOUT_V1 = SpecifierSet(">=0.9")
SHARED_ROLLOUT_V0 = SpecifierSet(">=0.8")
#: Releases where any trainer has it.
SHARED_ROLLOUT = SpecifierSet(">=0.8")
#: verl 0.7.1 gathered the reward settings under ``reward`` (``reward.custom_reward_function``,
#: ``reward.num_workers``); 0.7.0 keeps ``custom_reward_function`` at the top and ``reward_model.num_workers``.
REWARD_SECTION = SpecifierSet(">=0.7.1")
#: verl 0.7.0's file logger writes with ``json.dumps`` (``FileLogger.log`` in ``tracking.py``), which fails on the
#: tensors and numpy scalars verl 0.7.0's own trainer logs (``RayPPOTrainer._balance_batch``'s
#: ``log_seqlen_unbalance`` stats); 0.7.1 writes numpy with orjson and logs lists.
PLAIN_JSON_FILE_LOGGER = SpecifierSet("<0.7.1")
ANY = SpecifierSet("")


def family_in(family: str, spec: SpecifierSet) -> bool:
    """True when release family ``family`` (``"0.8"``) lies in ``spec``: decisions per family go through the
    ranges above, never a family literal."""
    return spec.contains(family, prereleases=True)


# Differences verl-split meets by asking the object (duck typing), named here so that this module lists
# every verl difference. Each takes the verl object and answers for its release.


def colocate_count(manager: object) -> int:
    """A ``ResourcePoolManager``'s ``max_colocate_count``: 0.7 hard-codes 3 and has no such field."""
    return getattr(manager, "max_colocate_count", 3)


def replica_name_suffix(replica: object) -> str:
    """A ``RolloutReplica``'s ``name_suffix`` (0.8 added it, for reward/teacher replicas beside the policy's)."""
    return getattr(replica, "name_suffix", "")


def replica_max_concurrency(replica: object, default: int) -> int:
    """A ``RolloutReplica``'s server ``max_concurrency`` (its property since 0.7.1; 0.7.0 has none)."""
    return getattr(replica, "max_concurrency", default)


def installed_version(distribution: str = "verl") -> str | None:
    """The installed distribution's version from its metadata, without importing it."""
    return _metadata_version(distribution)


@functools.cache
def _metadata_version(distribution: str) -> str | None:
    # Read once per process: each read parses the distribution's METADATA (3.8 ms a call under cProfile), and
    # every seam's applies_to() asks (once per seam at activation; 16,828 times in one test's fingerprints).
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _installed() -> Version | None:
    raw = installed_version()
    try:
        return Version(raw) if raw is not None else None
    except InvalidVersion:
        return None


def verl_in(spec: SpecifierSet) -> bool:
    """True when the installed verl (pre-releases included) lies in ``spec``."""
    version = _installed()
    return version is not None and spec.contains(version, prereleases=True)


def has_entry_points() -> bool:
    """verl imports ``verl.plugins`` entry points itself (0.9+); before, the start-up hook does."""
    return verl_in(ENTRY_POINTS)


def has_v1_trainer() -> bool:
    """verl has the v1 ``PPOTrainer`` (``trainer.use_v1``), its default trainer (0.9+)."""
    return verl_in(V1_TRAINER)


def v1_trainer_is_default() -> bool | None:
    """The installed verl's own default for ``trainer.use_v1`` (its ``trainer/config/ppo_trainer.yaml``), read
    without importing verl; None when there is no verl or no such key (before 0.9).

    A release number cannot say it: verl's ``neo`` branch reads 0.9.0.dev, keeps the v1 trainer's module and
    makes ``RayPPOTrainer`` the default again (``use_v1: false``; ``use_v1=true`` raises in ``main_ppo.main``).
    """
    import re
    from importlib.util import find_spec

    spec = find_spec("verl")  # a top-level spec: nothing of verl is imported
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            with open(f"{root}/trainer/config/ppo_trainer.yaml", encoding="utf-8") as yaml:
                text = yaml.read()
        except OSError:
            continue
        found = re.search(r"^\s+use_v1:\s*(true|false)\b", text, re.MULTILINE | re.IGNORECASE)
        return None if found is None else found.group(1).lower() == "true"
    return None


def has_legacy_workers() -> bool:
    """verl's ``RayPPOTrainer`` runs the legacy ``fsdp_workers`` (0.7)."""
    return verl_in(LEGACY_WORKERS)


def family_of(version: str) -> str:
    """``"0.9.1"`` -> ``"0.9"``; pre-releases and local tags map to their family too."""
    parsed = Version(version)
    return f"{parsed.major}.{parsed.minor}"


def supported_range_text() -> str:
    return ", ".join(f"{family}.x" for family in SUPPORTED_FAMILIES)


def tested_text() -> str:
    """The tested releases, for messages: ``0.7.0, 0.7.1, 0.8.0, 0.9.0 or 0.9.1``."""
    return ", ".join(TESTED_RELEASES[:-1]) + f" or {TESTED_RELEASES[-1]}"


def is_tested(version: str | None = None) -> bool:
    """The installed verl (or ``version``) lies in a tested family; pre-releases of it included."""
    raw = installed_version() if version is None else version
    try:
        return raw is not None and TESTED.contains(Version(raw), prereleases=True)
    except InvalidVersion:
        return False


def untested_note(version: str | None = None) -> str:
    """One line for a verl newer than the tested families (empty for a tested one)."""
    raw = installed_version() if version is None else version
    if raw is None or is_tested(raw):
        return ""
    return (
        f"verl {raw} is newer than the releases verl-split is tested on ({supported_range_text()}); the preflight "
        "found every verl name the switched-on features use, so the run goes ahead, untested."
    )


def check_supported() -> str:
    """Return the family of the installed verl, or raise UnsupportedVerlError.

    A verl newer than the tested families is accepted here; the preflight then decides (``activation``).
    """
    version = installed_version()
    if version is None:
        raise UnsupportedVerlError(
            "verl is not installed in this environment. Install a supported release "
            f"({supported_range_text()}), e.g. `pip install 'verl{TESTED}'`."
        )
    if not verl_in(SUPPORTED):
        raise UnsupportedVerlError(
            f"verl {version} is installed, but verl-split supports verl {supported_range_text()} (and, untested, "
            f"newer releases: {SUPPORTED}). Install a supported verl, or unset VERL_SPLIT (and VERL_SPLIT_CPU) to "
            "run stock verl."
        )
    return family_of(version)
