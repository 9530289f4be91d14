"""Read a dotted key from verl's trainer config: an OmegaConf config (hydra's) or plain nested dicts; a count, a
flag or a number of its type, or refused naming the key, its value and the type it needs.

Called by the job view's builder (``job_config``, with ``megatron_config`` for a Megatron role's block): the rest
of the package reads the view's fields (``placement.job``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from verl_split.core.errors import PlacementError

#: verl-split's own block in verl's config, whose keys verl never reads.
OWN_BLOCK = "split_placement."


def select_key(config: Any, dotted: str, default: Any = None) -> Any:
    """``config.a.b.c`` of an OmegaConf config or nested dicts; ``default`` when a part is missing or None.

    For OmegaConf, ``OmegaConf.select``: a missing key or a ``???`` value gives ``default``, but an
    interpolation that cannot be resolved (``${oc.env:NNODES}`` with NNODES unset) raises a
    PlacementError naming the key and the cause, instead of a misleading "got None" later.
    """
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigTypeError, GrammarParseError, InterpolationResolutionError

    if isinstance(config, DictConfig):
        try:
            value = OmegaConf.select(config, dotted, default=None, throw_on_missing=False)
        except ConfigTypeError:  # a path through a leaf or a list ('a.c' where a is 3): not there
            return default
        except (InterpolationResolutionError, GrammarParseError) as exc:
            raise PlacementError(
                f"could not read {dotted} from verl's config: {type(exc).__name__}: {str(exc).splitlines()[0]}. "
                "Fix that value (set the environment variable it reads, or set the key on the command line)."
            ) from exc
        return default if value is None else value
    node = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return default if node is None else node


# ----------------------------------------------------------------------------- a value of its type, or refused
#
# verl hands a value to its workers as the config writes it: its role configs are built by hydra's ``instantiate``
# (``omega_conf_to_dataclass`` with a ``_target_``, 0.7.1 to 0.9.1), which passes a quoted ``"8"`` on as the text
# "8", never converting it to the field's type. A worker then fails on it after Ray has started (``"8"`` as
# vLLM's tensor-parallel size), or misreads it without a word (``"false"`` is true to an ``if``). So a key
# verl-split reads is of its type or refused here, before Ray starts, naming the key, the value and the type.


def count_key(config: Any, dotted: str) -> int | None:
    """A whole number (not a bool); None unset; anything else a PlacementError naming the key."""
    value = select_key(config, dotted)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise wrong_type(dotted, value, "a whole number", _as_written(value, int))


def flag_key(config: Any, dotted: str, default: bool = False) -> bool:
    """true or false; ``default`` unset; anything else (the text "false" too) a PlacementError naming the key."""
    value = select_key(config, dotted)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise wrong_type(dotted, value, "true or false", _as_written(value, bool))


def number_key(config: Any, dotted: str) -> float | None:
    """A number (a whole one too, not a bool); None unset; anything else a PlacementError naming the key."""
    value = select_key(config, dotted)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise wrong_type(dotted, value, "a number", _as_written(value, float))


def wrong_type(dotted: str, value: Any, needed: str, fixed: str | None = None) -> PlacementError:
    """The refusal of ``dotted``'s ``value``, which is not ``needed``; ``fixed``: the value as it should be written."""
    kind = "text" if isinstance(value, str) else "a list" if isinstance(value, Sequence) else type(value).__name__
    kind = "a mapping" if isinstance(value, Mapping) else kind
    why = ""
    if isinstance(value, str) and not dotted.startswith(OWN_BLOCK):
        why = " verl passes a quoted value on to its workers as text, unconverted: " + (
            "any text but the empty one, 'false' too, is true to them."
            if needed == "true or false"
            else "they fail on it after Ray has started."
        )
    fix = f"Write it unquoted: {dotted}={fixed}." if fixed is not None else f"Set it to {needed}."
    return PlacementError(f"{dotted} is {value!r} ({kind}), where {needed} is needed.{why} {fix}")


def _as_written(value: Any, kind: type) -> str | None:
    """The hydra override that says what ``value`` (text) meant, when it reads as ``kind``; else None."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if kind is bool:
        return text.lower() if text.lower() in ("true", "false") else None
    try:
        number = kind(text)
    except ValueError:
        return None
    return text if kind is float or str(number) == text else None
