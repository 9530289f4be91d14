"""Read the job's batch sizes, and which family's batch rules apply, from verl's trainer config.

Which rules (``placement.batch_rules``): verl 0.9 runs its v1 trainer unless ``trainer.use_v1=false``
(``verl/trainer/main_ppo.py``); 0.8 runs ``RayPPOTrainer`` on the engine workers; 0.7 runs its legacy
``fsdp_workers`` / ``megatron_workers`` unless ``trainer.use_legacy_worker_impl=disable``
(0.7.1 ``verl/trainer/main_ppo.py:128-207``).
"""

from __future__ import annotations

from typing import Any

from verl_split.core import compat
from verl_split.placement.megatron_config import mesh_of, uses_reference
from verl_split.placement.mesh import ModelShape
from verl_split.placement.model import (
    ACTOR_MINI,
    BATCH_KEYS,
    BATCH_RULES,
    CRITIC_MINI,
    BatchConfig,
)

#: The families whose rules are known, oldest first.
FAMILIES: tuple[str, ...] = compat.SUPPORTED_FAMILIES
#: Where each role's training keys live, and its engine block (Ulysses size, Megatron sizes).
_ROLE_PREFIX = {"actor": "actor_rollout_ref.actor", "ref": "actor_rollout_ref.ref", "critic": "critic"}
_FSDP_BLOCKS = {"actor": ("fsdp_config",), "ref": ("fsdp_config",), "critic": ("fsdp", "model.fsdp_config")}


def installed_family() -> str | None:
    from verl_split.core import compat

    version = compat.installed_version()
    if version is None:
        return None
    try:
        return compat.family_of(version)
    except Exception:  # an unparsable version: the newest rules
        return None


def rules_of(config: Any, family: str) -> str:
    """Which of ``BATCH_RULES`` the run's workers follow: "v1", "v0" (engine workers) or "legacy"."""
    from verl_split.placement.config_keys import select_key

    if compat.family_in(family, compat.V1_TRAINER):
        rules = "v0" if select_key(config, "trainer.use_v1", True) is False else "v1"
    elif compat.family_in(family, compat.ENGINE_WORKERS):
        rules = "v0"
    else:
        impl = str(select_key(config, "trainer.use_legacy_worker_impl", "auto"))
        rules = "v0" if impl == "disable" else "legacy"
    assert rules in BATCH_RULES
    return rules


def ulysses_keys(role: str, rules: str) -> tuple[str, ...]:
    """The keys verl reads a role's Ulysses size from (the largest counts).

    0.7's legacy workers read the role's own key (``verl/workers/fsdp_workers.py:178`` actor, ``:1315`` critic).
    The engine workers read the engine block: the actor's config copies its role-level key there when above 1
    (``verl/workers/config/actor.py`` ``FSDPActorConfig.__post_init__``), the critic's never does (0.8.0 and
    0.9.1 ``verl/workers/config/critic.py`` ``FSDPCriticConfig``: the role-level key is "[DEPRECATED]" and only
    validated), so there ``critic.ulysses_sequence_parallel_size`` alone leaves the critic without SP.
    """
    prefix = _ROLE_PREFIX[role]
    if rules == "legacy":
        return (f"{prefix}.ulysses_sequence_parallel_size",)
    block = f"{prefix}.{_FSDP_BLOCKS[role][0]}.ulysses_sequence_parallel_size"
    return (block,) if role == "critic" else (f"{prefix}.ulysses_sequence_parallel_size", block)


def ignored_ulysses_note(config: Any, family: str) -> str | None:
    """A note when the critic's role-level Ulysses key is set but the run's critic does not read it."""
    from verl_split.placement.config_keys import select_key

    rules = rules_of(config, family)
    asked = _int(select_key(config, "critic.ulysses_sequence_parallel_size")) or 1
    if rules == "legacy" or asked <= 1 or _ulysses(config, "critic", rules) == asked:
        return None
    (key,) = ulysses_keys("critic", rules)
    return (
        f"critic.ulysses_sequence_parallel_size={asked} is not read by verl {family}'s engine critic (its engine "
        f"block is): the critic trains without sequence parallelism. Set {key}={asked} to have it."
    )


def batch_from_config(config: Any, family: str | None = None) -> BatchConfig | None:
    """The run's batch: None when the config has no train batch size (nothing to check)."""
    from verl_split.placement.config_keys import select_key

    if select_key(config, "data.train_batch_size") is None:
        return None
    family = family or installed_family() or FAMILIES[-1]
    if family not in FAMILIES:
        family = FAMILIES[-1] if family > FAMILIES[-1] else FAMILIES[0]
    rules = rules_of(config, family)

    values = tuple((key, _int(select_key(config, key))) for key in BATCH_KEYS)
    dynamic = set()
    if select_key(config, "actor_rollout_ref.actor.use_dynamic_bsz", False):
        dynamic.add("actor")
    if select_key(config, "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", False):
        dynamic.add("log_prob")
    if select_key(config, "actor_rollout_ref.ref.log_prob_use_dynamic_bsz", False):
        dynamic.add("ref")

    uses_ref = uses_reference(config)
    divisors = []
    megatron, single_dp, vpp_groups = set(), set(), []
    for role in ("actor", "ref", "critic"):
        if role == "ref" and not uses_ref:
            continue
        mesh = mesh_of(config, role, ModelShape())  # the model's shape sets no batch rule
        divisors.append((role, mesh.model_size if mesh is not None else _ulysses(config, role, rules)))
        if mesh is None:
            continue
        if rules == "legacy":
            megatron.add(role)
            continue
        if mesh.dynamic_cp and compat.family_in(family, compat.ENGINE_WORKERS):  # 0.7 has no dynamic CP
            single_dp.add(role)
            # 0.9's dynamic-CP scheduler cuts the micro-batches, not prepare_micro_batches
            # (workers/engine/megatron/transformer_impl.py:879-901 in 0.9.1).
            if compat.family_in(family, compat.V1_TRAINER):
                dynamic |= {"actor", "log_prob"} if role == "actor" else {role}
        if mesh.interleaved:
            vpp_groups.append((role, mesh.group))
    return BatchConfig(
        family=family,
        rules=rules,
        values=values,
        followers=_followers(config),
        dynamic=frozenset(dynamic),
        divisors=tuple(divisors),
        megatron=frozenset(megatron),
        single_dp=frozenset(single_dp),
        vpp_groups=tuple(vpp_groups),
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ulysses(config: Any, role: str, rules: str) -> int:
    """What splits an FSDP role's pool besides data parallelism: its Ulysses size, as the run's workers read it."""
    from verl_split.placement.config_keys import select_key

    return max((_int(select_key(config, key)) or 1 for key in ulysses_keys(role, rules)), default=1)


def _followers(config: Any) -> tuple[tuple[str, str], ...]:
    """Keys whose value is an interpolation of another batch key (verl's critic mini-batch follows the actor's)."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(config, DictConfig):
        return ()
    found = []
    for key in (CRITIC_MINI,):
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(config, parent)
        if not isinstance(node, DictConfig) or leaf not in node or not OmegaConf.is_interpolation(node, leaf):
            continue
        raw = OmegaConf.to_container(node, resolve=False).get(leaf)
        if isinstance(raw, str) and ACTOR_MINI in raw:
            found.append((key, ACTOR_MINI))
    return tuple(found)
