"""Every verl release verl-split claims is tested, as the README, compat.py, the Makefile and CI say it.

compat.TESTED_RELEASES is the list; the README's "Supported verl" table must list exactly those releases (one
row each) and the families compat knows; CI (the Makefile's `test` target) must run each release: the full
legs on their family's pinned release, `scripts/check-release.sh` on every other one. With the package index
reachable, no PyPI release inside the tested families is missing from the list.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
from packaging.version import Version
from support.paths import ROOT

from verl_split.core import compat

pytestmark = pytest.mark.unit

RELEASE = re.compile(r"^\d+\.\d+\.\d+$")


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("|") and not set(line) <= set("|- "):
            rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows[1:]  # without the header


def makefile_value(name: str) -> str:
    match = re.search(rf"^{name} \?= (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"the Makefile sets no {name}"
    return match.group(1).strip()


def pinned(family: str) -> str:
    text = (ROOT / "constraints" / f"verl-{family}.txt").read_text()
    return re.search(r"^verl==(\S+)$", text, re.MULTILINE).group(1)


def test_the_readme_table_lists_exactly_compats_tested_releases():
    rows = table_rows(readme_section("Supported verl"))
    listed = [row[0] for row in rows if RELEASE.match(row[0])]
    assert sorted(listed, key=Version) == sorted(compat.TESTED_RELEASES, key=Version)
    assert len(listed) == len(set(listed))
    assert {compat.family_of(r) for r in listed} == set(compat.SUPPORTED_FAMILIES)
    untested = [row for row in rows if not RELEASE.match(row[0])]
    assert untested and "untested" in " ".join(untested[0]).lower(), "a row says what a newer verl gets"


def test_compats_ranges_agree_with_the_families():
    assert all(compat.family_of(r) in compat.SUPPORTED_FAMILIES for r in compat.TESTED_RELEASES)
    assert all(compat.is_tested(r) for r in compat.TESTED_RELEASES)
    assert min(compat.TESTED_RELEASES, key=Version) == compat.MINIMUM
    newest = max(Version(f) for f in compat.SUPPORTED_FAMILIES)
    assert not compat.is_tested(f"{newest.major}.{newest.minor + 1}.0.dev0")
    assert compat.SUPPORTED.contains(f"{newest.major}.{newest.minor + 1}.0.dev0", prereleases=True)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"verl>={compat.MINIMUM}",' in pyproject, "pyproject's verl requirement is compat.SUPPORTED"


def test_ci_runs_every_tested_release():
    full_legs = {pinned(compat.SUPPORTED_FAMILIES[-1]), pinned(makefile_value("OLDEST_FAMILY"))}
    checked = set(makefile_value("RELEASE_CHECKS").split())
    assert full_legs | checked == set(compat.TESTED_RELEASES)
    assert not full_legs & checked, "a release with a full leg needs no short check"
    grpo = set(makefile_value("RELEASE_GRPO").split())
    assert grpo and grpo <= checked, f"RELEASE_GRPO {grpo} names releases RELEASE_CHECKS does not check"
    # Shared rollout on RayPPOTrainer's oldest release (0.8), a GAE run (it needs a critic pool).
    shared = set(makefile_value("RELEASE_SHARED").split())
    assert shared and shared <= checked - grpo, f"RELEASE_SHARED {shared}: GAE runs RELEASE_CHECKS checks"
    assert all(compat.SHARED_ROLLOUT_V0.contains(r) for r in shared)
    makefile = (ROOT / "Makefile").read_text()
    test_target = makefile[makefile.index("\ntest:") :].split("\n\n")[0]
    assert "test-oldest" in test_target and "test-releases" in test_target


def test_every_pypi_release_of_the_tested_families_is_listed():
    try:
        with urllib.request.urlopen("https://pypi.org/pypi/verl/json", timeout=30) as response:
            releases = json.load(response)["releases"]
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        pytest.skip(f"PyPI is not reachable ({exc})")
    on_pypi = {
        r
        for r, files in releases.items()
        if files and not Version(r).is_prerelease and compat.is_tested(r) and not all(f["yanked"] for f in files)
    }
    assert on_pypi <= set(compat.TESTED_RELEASES), f"untested PyPI releases: {on_pypi - set(compat.TESTED_RELEASES)}"


def test_every_test_tied_to_the_oldest_family_runs_in_its_leg():
    # A test file that skips on every family but the oldest (marked only_on with it) runs in CI only if the
    # oldest family's leg names it: tests/runtime/overlap/test_megatron_legacy.py was left out once, and passed by
    # skipping.
    oldest = makefile_value("OLDEST_FAMILY")
    makefile = (ROOT / "Makefile").read_text()
    leg = makefile[makefile.index("OLDEST_SEAMS :=") : makefile.index("\ntest-oldest:")]
    tied = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if f'only_on("{oldest}"' in path.read_text()
    }
    assert tied, "no test is tied to the oldest family: is the marker spelled only_on(FAMILY, ...)?"
    missing = sorted(path for path in tied if path not in leg)
    assert not missing, f"tied to verl {oldest} but not in the Makefile's OLDEST_SEAMS: {missing}"
