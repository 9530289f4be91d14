"""The job a log ran, as far as the log says: the config verl printed, else the overrides its command echoed.

verl's ``main_ppo`` pprints the resolved config at start-up (:func:`verl_split.tools.advise.console.find_config`);
a log without it often still holds the command that started the run: a shell's ``set -x`` trace
(``+ python3 -m verl.trainer.main_ppo key=value ...``) or the command pasted at its head, continued over lines with
``\\``, or verl-data's ``command:`` heading at the log's head (the overrides a script was given, as one quoted
argument). Its ``key=value`` overrides (hydra's ``+key``/``++key`` too) become a nested config holding those keys only:
what the job left at verl's defaults is not known from them, and the planner's rules that need such a key are
not checked. ``$VAR`` and ``${VAR}`` are resolved from ``VAR=value`` lines earlier in the log (a ``set -x`` trace
echoes them; ``export VAR=value``); an override whose variable the log never sets is left out and said.

Which wins: the printed config (verl resolved it) over the echoed overrides; ``advise``'s flags over both.

The model's shape: verl's workers print the Hugging Face config they load (``Model config after override:
LlamaConfig {...}``); when every such print in the log agrees on the attention's shape (the actor and the critic
are often one model), its layers, KV heads and head size give the KV cache per token (:func:`model_shape`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

CONFIG = "the config printed at start-up"
OVERRIDES = "the overrides echoed in the log's command"
#: verl-data's logs (``eric-haibin-lin/verl-data``) open with ``commit:`` and ``command:`` headings, each over its
#: value's line; the command often runs an example script with the overrides as one quoted argument.
_HEADER_RE = re.compile(r"^command:[ \t]*\r?\n(.+)$", re.M)
HEADER_LINES = 40  # the heading is at the log's head
HEADER_CHARS = 64_000  # enough for those lines: a long log is not split into lines to find them
#: The trainer's module in a command line.
_ENTRY_RE = re.compile(r"verl\.trainer\.main_\w+")
#: A shell assignment a ``set -x`` trace or a script's head shows: ``+ TP=4``, ``export TP=4``, ``TP=4``.
_ASSIGNMENT_RE = re.compile(r"^(?:\++\s*)?(?:export\s+)?([A-Za-z_]\w*)=(\S*)\s*$")
_VARIABLE_RE = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
_KEY_RE = re.compile(r"^[+~]{0,2}([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)=(.*)$", re.S)
#: The keys of a printed Hugging Face config that shape the KV cache.
SHAPE_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")


@dataclass(frozen=True)
class JobConfig:
    """What the log says of the job's config, and from where."""

    config: dict[str, Any] | None
    source: str  # CONFIG, OVERRIDES, or "" when the log says neither
    notes: tuple[str, ...] = ()


def job_config(printed: dict[str, Any] | None, text: str) -> JobConfig:
    """The printed config when there is one, else the echoed overrides, else nothing (said)."""
    if printed is not None:
        return JobConfig(printed, CONFIG)
    overrides, notes = overrides_from_text(text)
    if overrides:
        return JobConfig(overrides, OVERRIDES, tuple(notes))
    return JobConfig(None, "", tuple(notes))


def model_shape(text: str) -> dict[str, int] | None:
    """Layers, KV heads and head size from the model configs the workers printed, when every print agrees."""
    if '"num_hidden_layers"' not in text:
        return None
    found: dict[str, set[int]] = {}
    for key in SHAPE_KEYS:
        found[key] = {int(v) for v in re.findall(rf'"{key}": (\d+)', text)}
    if any(len(values) > 1 for values in found.values()) or not all(
        found[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads")
    ):
        return None  # several models (a reward model, another critic) or a cut print: not one shape
    layers, hidden, heads = (next(iter(found[k])) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads"))
    kv_heads = next(iter(found["num_key_value_heads"]), heads)
    head_dim = next(iter(found["head_dim"]), hidden // heads)
    return {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim, "hidden": hidden}


def overrides_from_text(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The last command in the log that runs verl's trainer, its overrides as a nested dict; notes."""
    if not text:
        return None, []
    matches = list(_ENTRY_RE.finditer(text))
    notes = []
    if matches:
        command = _logical_line(text, matches[-1].end())
        variables = _assignments(text[: matches[-1].start()])
        tokens = _tokens(command)
    else:
        head = _HEADER_RE.search("\n".join(text[:HEADER_CHARS].splitlines()[:HEADER_LINES]))
        if head is None:
            return None, []
        # A script's argument that holds several overrides (one quoted string) counts as its overrides.
        tokens = [part for token in _tokens(head.group(1)) for part in _tokens(token)]
        variables = {}
        if not any(_ENTRY_RE.search(token) for token in tokens):
            notes.append(
                "the job's settings come from the command: heading at the log's head, which runs a script: what the "
                "script sets itself is not in the log"
            )
    nested: dict[str, Any] = {}
    unresolved = []
    for token in tokens:
        match = _KEY_RE.match(token)
        if match is None:
            continue
        key, raw = match.groups()
        value = _VARIABLE_RE.sub(lambda m: variables.get(m.group(1), m.group(0)), raw)
        if "$" in value:
            unresolved.append(key)
            continue
        _put(nested, key.split("."), _parse(value))
    if unresolved:
        notes.append(
            f"the log's command sets {', '.join(unresolved[:4])} through a shell variable the log does not show: "
            "left out (pass the flag that says it, e.g. --rollout-tp)"
        )
    return (nested or None), notes


def _tokens(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=False, posix=True)
    except ValueError:  # an unbalanced quote: the line was cut
        return command.split()


def _logical_line(text: str, start: int) -> str:
    """From ``start`` to the end of its line, with ``\\``-continued lines joined."""
    parts = []
    position = start
    while True:
        end = text.find("\n", position)
        line = text[position : len(text) if end < 0 else end].rstrip("\r")
        if line.rstrip().endswith("\\") and end >= 0:
            parts.append(line.rstrip()[:-1])
            position = end + 1
            continue
        parts.append(line)
        return " ".join(parts)


def _assignments(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines()[-2000:]:  # a script's head, not the whole log
        match = _ASSIGNMENT_RE.match(line.strip())
        if match:
            found[match.group(1)] = match.group(2).strip("'\"")
    return found


def _put(tree: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        child = tree.get(part)
        if not isinstance(child, dict):
            child = tree[part] = {}
        tree = child
    tree[path[-1]] = value


def _parse(raw: str) -> Any:
    """A hydra override's value as hydra reads the simple ones: int, float, bool, null, a flat list, text."""
    text = raw.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_parse(item) for item in inner.split(",")] if inner else []
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip("'\"")
