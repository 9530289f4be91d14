"""Do two runs of the whole-step benchmark agree? Each configuration's speed-up over stock, side by side.

    .venv/bin/python benchmarks/whole_step_compare.py A.json B.json

Two JSONs of ``whole_step.py`` that ran the same job (their ``settings.workload``; it refuses two different
jobs, whose figures do not compare): per configuration both runs' speed-up over stock (median [min-max] of
their repetitions) and its share of the bound where the runs measured one, and whether the two ranges
overlap ("agree": each run's spread reaches the other's). It exits 0 when every configuration both ran
agrees, 1 when one does not, 2 when the two cannot be compared.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: What is compared per configuration: the step row's key and how it is named.
MEASURES = (("speedup_vs_stock", "x stock"), ("share_of_bound", "of the bound"))


#: Configurations' display names in JSONs written before 2026-11-29, and what whole_step.py calls them now.
FORMER_NAMES = {"split + all": "split + overlaps on", "split + all + shared": "split + overlaps on + shared"}


def _rows(path: Path) -> tuple[dict, dict[str, dict]]:
    rows = json.loads(path.read_text())
    settings = next(r for r in rows if r.get("kind") == "settings")
    return settings, {FORMER_NAMES.get(r["config"], r["config"]): r for r in rows if r.get("kind") == "step"}


def job_of(settings: dict) -> dict | None:
    """The run's workload; one recorded before the answers' lengths were part of it ran fixed lengths."""
    workload = settings.get("workload")
    return {"lengths": "fixed", **workload} if isinstance(workload, dict) else workload


def overlap(a: dict, b: dict) -> bool:
    """Whether two [min-max] ranges share a point."""
    return a["min"] <= b["max"] and b["min"] <= a["max"]


def compare(a: Path, b: Path) -> tuple[list[str], bool | None]:
    """The lines to print, and whether every configuration both ran agrees (None: they ran different jobs)."""
    (set_a, steps_a), (set_b, steps_b) = _rows(a), _rows(b)
    if job_of(set_a) != job_of(set_b):
        return [f"different jobs: {a} ran {job_of(set_a)}, {b} ran {job_of(set_b)}"], None
    lines = [f"the same job: {job_of(set_a)}", f"{a}: {set_a.get('date')}; {b}: {set_b.get('date')}"]
    agree = True
    for config in (c for c in steps_a if c in steps_b and c != "stock"):
        for key, unit in MEASURES:
            ra, rb = steps_a[config].get(key), steps_b[config].get(key)
            if ra is None or rb is None:
                continue
            same = overlap(ra, rb)
            agree &= same
            lines.append(
                f"{config}: {_cell(ra)} against {_cell(rb)} {unit}: {'agree' if same else 'DIFFER'} (ranges "
                f"{'overlap' if same else 'do not overlap'})"
            )
    return lines, agree


def _cell(s: dict) -> str:
    return f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args(argv)
    lines, agree = compare(args.first, args.second)
    print("\n".join(lines))
    if agree is None:
        return 2
    print("every configuration agrees" if agree else "some configuration differs")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
