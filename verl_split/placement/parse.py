"""Parse a placement: a shorthand, a ratio ``A:C``, ``ROLES:GPUS`` groups, or a list of ``{roles, gpus}``."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from verl_split.core.errors import PlacementError
from verl_split.placement.model import ROLES, GroupSpec, Placement

SHORTHANDS: tuple[str, ...] = ("halves", "per-node", "per-group", "all")
DEFAULT_PLACEMENT = "halves"

_RATIO = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
_INDEX = re.compile(r"^\d+$")
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_FORMS_HELP = (
    "Use halves, per-node, per-group, all, a ratio A:C such as 6:2, or role groups such as "
    "'actor,rollout,ref:0-5;critic,reward:6-7'."
)


def parse_placement(spec: Any, source: str = "placement") -> Placement:
    """Parse a shorthand string or a list of ``{roles, gpus}`` groups; raise PlacementError."""
    if isinstance(spec, str):
        return _parse_text(spec, source)
    if isinstance(spec, Sequence) and not isinstance(spec, (bytes, bytearray)):
        return _parse_structured(spec, source)
    raise PlacementError(
        f"{source} must be a string or a list of groups, got {type(spec).__name__} {spec!r}. {_FORMS_HELP}"
    )


def _parse_text(text: str, source: str) -> Placement:
    stripped = text.strip()
    if not stripped:
        raise PlacementError(f"{source} is empty. {_FORMS_HELP}")
    word = stripped.lower()
    if word in SHORTHANDS:
        return Placement(kind=word, text=word, source=source)
    ratio = _RATIO.match(stripped)
    if ratio:
        actor, critic = int(ratio.group(1)), int(ratio.group(2))
        return Placement(kind="ratio", text=f"{actor}:{critic}", ratio=(actor, critic), source=source)
    if ":" not in stripped:
        close = difflib.get_close_matches(word, SHORTHANDS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise PlacementError(f"{source}: unknown placement {stripped!r}.{hint} {_FORMS_HELP}")
    groups = []
    for number, chunk in enumerate(stripped.split(";"), start=1):
        if not chunk.strip():
            raise PlacementError(
                f"{source}: group {number} of {stripped!r} is empty (two ';' in a row, or a ';' at an end). "
                "Separate role groups with one ';', e.g. 'actor,rollout,ref:0-3;critic:4-7'."
            )
        if ":" not in chunk:
            raise PlacementError(
                f"{source}: group {chunk.strip()!r} has no ':' between its roles and its GPUs. "
                "Write ROLES:GPUS, e.g. 'critic,reward:4-7'."
            )
        roles_text, gpus_text = chunk.split(":", 1)
        roles = _parse_roles([r.strip() for r in roles_text.split(",")], chunk.strip(), source)
        gpus = _parse_gpus(gpus_text, chunk.strip(), source)
        groups.append(GroupSpec(roles=roles, gpus=gpus, text=chunk.strip()))
    return Placement(kind="groups", text=";".join(g.text for g in groups), groups=tuple(groups), source=source)


def _parse_structured(items: Sequence[Any], source: str) -> Placement:
    if not items:
        raise PlacementError(f"{source}: the list of groups is empty. Give at least the actor's group. {_FORMS_HELP}")
    groups = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, Mapping):
            raise PlacementError(
                f"{source}: group {number} is {type(item).__name__} {item!r}, not a mapping. "
                "Write each group as {roles: [actor, rollout, ref], gpus: '0-3'}."
            )
        extra = sorted(str(k) for k in item if k not in ("roles", "gpus"))
        if extra:
            raise PlacementError(
                f"{source}: group {number} has unknown key(s) {', '.join(extra)}; a group has only 'roles' and 'gpus'."
            )
        if "roles" not in item or "gpus" not in item:
            missing = "roles" if "roles" not in item else "gpus"
            raise PlacementError(
                f"{source}: group {number} has no {missing!r}. Write it as {{roles: [critic], gpus: '4-7'}}."
            )
        raw_roles = item["roles"]
        if isinstance(raw_roles, str):
            role_names = [r.strip() for r in raw_roles.split(",")]
        elif isinstance(raw_roles, Sequence) and all(isinstance(r, str) for r in raw_roles):
            role_names = [r.strip() for r in raw_roles]
        else:
            raise PlacementError(
                f"{source}: group {number} roles must be a list of role names or a comma-separated string, "
                f"got {raw_roles!r}."
            )
        raw_gpus = item["gpus"]
        if isinstance(raw_gpus, int) and not isinstance(raw_gpus, bool):
            gpus_text = str(raw_gpus)
        elif isinstance(raw_gpus, str):
            gpus_text = raw_gpus
        elif (
            isinstance(raw_gpus, Sequence)
            and raw_gpus
            and all(isinstance(g, (int, str)) and not isinstance(g, bool) for g in raw_gpus)
        ):
            gpus_text = ",".join(str(g) for g in raw_gpus)
        else:
            raise PlacementError(
                f"{source}: group {number} gpus must be 'all', a string such as '0-3,8', an index or a list "
                f"of indices, got {raw_gpus!r}."
            )
        label = f"{','.join(role_names)}:{gpus_text}"
        roles = _parse_roles(role_names, label, source)
        gpus = _parse_gpus(gpus_text, label, source)
        groups.append(GroupSpec(roles=roles, gpus=gpus, text=label))
    return Placement(kind="groups", text=";".join(g.text for g in groups), groups=tuple(groups), source=source)


def _parse_roles(names: list[str], group: str, source: str) -> tuple[str, ...]:
    if not any(names):
        raise PlacementError(
            f"{source}: group {group!r} names no role. Put role names before the ':', e.g. 'critic,reward:4-7'."
        )
    seen: list[str] = []
    for name in names:
        role = name.lower()
        if not role:
            raise PlacementError(f"{source}: group {group!r} has an empty role name (a stray ','). Remove it.")
        if role not in ROLES:
            raise PlacementError(f"{source}: unknown role {name!r} in group {group!r}. Roles are {', '.join(ROLES)}.")
        if role in seen:
            raise PlacementError(f"{source}: role {role!r} is listed twice in group {group!r}. List it once.")
        seen.append(role)
    return tuple(seen)


def _parse_gpus(text: str, group: str, source: str) -> tuple[tuple[int, int], ...] | None:
    stripped = text.strip()
    if not stripped:
        raise PlacementError(
            f"{source}: group {group!r} names no GPU. Put GPU ids after the ':', e.g. '0-3' or '0,1,8-9' or 'all'."
        )
    if stripped.lower() == "all":
        return None
    ranges = []
    for token in (t.strip() for t in stripped.split(",")):
        if not token:
            raise PlacementError(f"{source}: group {group!r} has an empty GPU entry (a stray ','). Remove it.")
        if _INDEX.match(token):
            ranges.append((int(token), int(token)))
            continue
        match = _RANGE.match(token)
        if not match:
            raise PlacementError(
                f"{source}: {token!r} in group {group!r} is not a GPU index or range. "
                "Write indices and ranges such as '0-3,8' (global ids: node k holds k*G..k*G+G-1)."
            )
        low, high = int(match.group(1)), int(match.group(2))
        if low > high:
            raise PlacementError(f"{source}: GPU range {token!r} in group {group!r} is reversed. Write {high}-{low}.")
        ranges.append((low, high))
    return tuple(ranges)
