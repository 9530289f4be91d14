"""Read a dotted key from verl's trainer config: an OmegaConf config (hydra's) or plain nested dicts.

Called by the job view's builder (``job_config``, with ``megatron_config`` for a Megatron role's block): the rest
of the package reads the view's fields (``placement.job``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl_split.core.errors import PlacementError


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
