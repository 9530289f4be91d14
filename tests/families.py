"""Which verl release family this test run has, and the skips that follow from it."""

from __future__ import annotations

import pytest

from verl_split import compat

VERSION = compat.installed_version() or "0"
FAMILY = compat.family_of(VERSION)

#: Families whose PPO loop runs on CPU (VERL_SPLIT_CPU): the CPU platform plugs into verl's
#: platform registry (verl/plugin/platform), which verl 0.7 and 0.8 do not have.
CPU_DRY_RUN_FAMILIES = ("0.9",)

needs_cpu_dry_run = pytest.mark.skipif(
    FAMILY not in CPU_DRY_RUN_FAMILIES,
    reason=(
        f"verl {VERSION}: the CPU dry run is not ported to this family (no verl.plugin.platform registry "
        "before 0.9); real worker groups and trainer code stand in: tests/e2e/test_overlap_legacy_workers.py "
        "(0.7), tests/e2e/test_overlap_engine_workers.py (0.8)"
    ),
)


def only_on(family: str, why: str) -> pytest.MarkDecorator:
    """Skip unless the installed verl is of ``family``; ``why`` says what ties the test to it."""
    return pytest.mark.skipif(family != FAMILY, reason=f"verl {VERSION} is not of family {family}: {why}")
