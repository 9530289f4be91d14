"""The verl releases verl-split supports, declared once, and the gate that enforces them."""

from __future__ import annotations

from importlib import metadata

from verl_split.errors import UnsupportedVerlError

#: Supported release families, oldest first. A family is supported from its first
#: release through its last patch release; each family has an adapter in ``seams``.
SUPPORTED_FAMILIES: tuple[str, ...] = ("0.7", "0.8", "0.9")


def installed_version(distribution: str = "verl") -> str | None:
    """The installed distribution's version from its metadata, without importing it."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def family_of(version: str) -> str:
    """``"0.9.1"`` -> ``"0.9"``; pre-releases and local tags map to their family too."""
    parts = version.split(".")
    if len(parts) < 2:
        return version
    minor = "".join(ch for ch in parts[1] if ch.isdigit()) or parts[1]
    return f"{parts[0]}.{minor}"


def supported_range_text() -> str:
    return ", ".join(f"{family}.x" for family in SUPPORTED_FAMILIES)


def check_supported() -> str:
    """Return the supported family of the installed verl, or raise UnsupportedVerlError."""
    version = installed_version()
    if version is None:
        newest = SUPPORTED_FAMILIES[-1]
        raise UnsupportedVerlError(
            "verl is not installed in this environment. Install a supported release "
            f"({supported_range_text()}), e.g. `pip install 'verl>={newest},<{_next(newest)}'`."
        )
    family = family_of(version)
    if family not in SUPPORTED_FAMILIES:
        raise UnsupportedVerlError(
            f"verl {version} is installed, but verl-split supports verl {supported_range_text()}. "
            "Install a supported verl, or unset VERL_SPLIT (and VERL_SPLIT_CPU) to run stock verl."
        )
    return family


def _next(family: str) -> str:
    major, minor = family.split(".")
    return f"{major}.{int(minor) + 1}"
