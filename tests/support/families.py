"""Which verl release family this test run has, and the skips that follow from it."""

from __future__ import annotations

import pytest

from verl_split.core import compat
from verl_split.dryrun.recipe import default_trainer

VERSION = compat.installed_version() or "0"
FAMILY = compat.family_of(VERSION)

#: The trainer ``main_ppo`` runs by default on this family: v1 on 0.9 (and, untested, newer), RayPPOTrainer (v0) before.
DEFAULT_TRAINER = default_trainer(FAMILY) if compat.verl_in(compat.SUPPORTED) else "v0"


def only_on(family: str, why: str) -> pytest.MarkDecorator:
    """Skip unless the installed verl is of ``family``; ``why`` says what ties the test to it."""
    return pytest.mark.skipif(family != FAMILY, reason=f"verl {VERSION} is not of family {family}: {why}")


def extended_on(families: tuple[str, ...], why: str):
    """Mark a test ``extended`` (left out of CI, run with --extended) on these families only; ``why`` names
    where the default suite shows the same on them."""
    if FAMILY in families:
        return pytest.mark.extended(reason=why)
    return lambda test: test
