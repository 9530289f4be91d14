"""Where things are, for tests at any depth of ``tests/``: the repository, its examples and the test data."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the folder holding ``verl_split/`` and ``tests/``).
ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
#: Test inputs kept in the repository (a real verl log excerpt, with its source).
DATA = TESTS / "support" / "data"
EXAMPLE = ROOT / "examples" / "split_placement"
