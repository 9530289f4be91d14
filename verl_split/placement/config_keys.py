"""Read a dotted key from verl's trainer config: an OmegaConf config (hydra's) or plain nested dicts; a count, a
flag, a number, a text, one of a few values or a list of steps, of its type, or refused naming the key, its value
and the type it needs.

Called by the job view's builder (``job_config``, with ``megatron_config`` for a Megatron role's block): the rest
of the package reads the view's fields (``placement.job``). ``recording`` lists every key read and the kind it
was read as, so a test can feed each one a value of another type and see it refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from verl_split.core.errors import PlacementError

#: verl-split's own block in verl's config, whose keys verl never reads.
OWN_BLOCK = "split_placement."

# The kinds a key is read as, which ``recording`` lists beside it.
WHOLE = "a whole number"
SWITCH = "true or false"
NUMBER = "a number"
TEXT = "text"
CHOICE = "one of a few values"
STEPS = "a list of step numbers"
#: Only whether the key is set (its value is read under another kind, or not at all).
PRESENT = "set or not"
#: The value as the config writes it: a check elsewhere refuses what it cannot use (the placement's own parser).
AS_WRITTEN = "as written"


class Read(NamedTuple):
    key: str
    kind: str


#: The lists of the ``recording`` blocks now open: a key read is added to each.
_recorders: list[list[Read]] = []


@contextlib.contextmanager
def recording() -> Iterator[list[Read]]:
    """Every key read in the block (in the order read, repeats kept), with the kind it was read as."""
    reads: list[Read] = []
    _recorders.append(reads)
    try:
        yield reads
    finally:
        _recorders.remove(reads)


def select_key(config: Any, dotted: str, default: Any = None, kind: str = AS_WRITTEN) -> Any:
    """``config.a.b.c`` of an OmegaConf config or nested dicts; ``default`` when a part is missing or None.
    ``kind``: how the caller reads the value, for ``recording``.

    For OmegaConf, ``OmegaConf.select``: a missing key or a ``???`` value gives ``default``, but an
    interpolation that cannot be resolved (``${oc.env:NNODES}`` with NNODES unset) raises a
    PlacementError naming the key and the cause, instead of a misleading "got None" later.
    """
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigTypeError, GrammarParseError, InterpolationResolutionError

    for reads in _recorders:
        reads.append(Read(dotted, kind))
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
    value = select_key(config, dotted, kind=WHOLE)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise wrong_type(dotted, value, "a whole number", _as_written(value, int))


def flag_key(config: Any, dotted: str, default: bool = False) -> bool:
    """true or false; ``default`` unset; anything else (the text "false" too) a PlacementError naming the key."""
    value = select_key(config, dotted, kind=SWITCH)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise wrong_type(dotted, value, "true or false", _as_written(value, bool))


def number_key(config: Any, dotted: str) -> float | None:
    """A number (a whole one too, not a bool); None unset; anything else a PlacementError naming the key."""
    value = select_key(config, dotted, kind=NUMBER)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise wrong_type(dotted, value, "a number", _as_written(value, float))


def present_key(config: Any, dotted: str) -> bool:
    """Whether ``dotted`` is set (not missing, not None), its value unread."""
    return select_key(config, dotted, kind=PRESENT) is not None


def text_key(config: Any, dotted: str, default: str | None = None) -> str | None:
    """A text; ``default`` unset (or left mandatory, ``???``); anything else (a number, a switch, a list) a
    PlacementError naming the key: verl compares these keys with text, so ``1`` or ``true`` reads as no value of
    theirs (hydra turns an unquoted ``=1`` into a number)."""
    value = select_key(config, dotted, kind=TEXT)
    if value is None or value == "???":
        return default
    if isinstance(value, str):
        return value
    raise wrong_type(dotted, value, "text", fix=f"Write the text it means: {dotted}='<text>', quoted.")


def choice_key(config: Any, dotted: str, choices: Sequence[Any], default: Any = None) -> Any:
    """One of ``choices`` as verl compares them (``==``; a bool is none of them); ``default`` unset; anything
    else a PlacementError naming the key and the values verl takes."""
    value = select_key(config, dotted, kind=CHOICE)
    if value is None:
        return default
    if not isinstance(value, bool) and any(value == choice for choice in choices):
        return value
    listed = ", ".join(dict.fromkeys(str(choice) for choice in choices))  # 16 and "16" read alike
    raise wrong_type(dotted, value, f"one of {listed}", fix=f"Set it to one of {listed}.")


def steps_key(config: Any, dotted: str) -> tuple[int, ...] | None:
    """A list of whole step numbers (a ``ListConfig`` too); None unset; anything else (the text "false", a bare
    number) a PlacementError naming the key: verl tests ``step in <value>``, which fails on a number and on text,
    and never matches a quoted step."""
    value = select_key(config, dotted, kind=STEPS)
    if value is None:
        return None
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(step, int) and not isinstance(step, bool) for step in value)
    ):
        return tuple(value)
    raise wrong_type(
        dotted,
        value,
        "a list of whole step numbers, or null",
        fix=f"Write a list, {dotted}=[1,5], or {dotted}=null to profile no step.",
    )


def wrong_type(
    dotted: str, value: Any, needed: str, fixed: str | None = None, fix: str | None = None
) -> PlacementError:
    """The refusal of ``dotted``'s ``value``, which is not ``needed``; ``fixed``: the value as it should be written;
    ``fix``: what to do instead, where no one value is the fix."""
    kind = "text" if isinstance(value, str) else "a list" if isinstance(value, Sequence) else type(value).__name__
    kind = "a mapping" if isinstance(value, Mapping) else kind
    why = ""
    if isinstance(value, str) and not dotted.startswith(OWN_BLOCK):
        why = " verl passes a quoted value on to its workers as text, unconverted: " + (
            "any text but the empty one, 'false' too, is true to them."
            if needed == "true or false"
            else "they fail on it after Ray has started."
        )
    if fix is None:
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
