"""How fast ``verl-split advise`` reads a long console log (issue 24: 500 steps, tens of MB, under 2 s).

Writes the driver's console of a 500-step verl 0.9 run (``tests/support/verl_console.py`` ``long_console_log``: each
step's line as verl's ``concat_dict_to_str`` prints it, ~130 metrics like a real v1 step, behind Ray's coloured
prefix; between the steps, other processes' lines, some with bytes that are not UTF-8, until the file reaches
``--mb``), then times ``verl-split advise LOG`` in this process (read, fit, rank, report), ``--repeats`` times.

    .venv/bin/python benchmarks/advise_speed.py [--steps 500] [--mb 40] [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.verl_console import long_console_log  # noqa: E402

from verl_split.tools.advise.logs import read_log  # noqa: E402
from verl_split.tools.cli import main  # noqa: E402


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--mb", type=float, default=40.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "main_ppo.log"
        size = long_console_log(log, args.steps, args.mb)
        steps = len(read_log(log).steps)
        parse, whole = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            read_log(log)
            parse.append(time.perf_counter() - start)
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                code = main(["advise", str(log), "--nnodes", "1", "--n-gpus-per-node", "8"])
            whole.append(time.perf_counter() - start)
            assert code == 0
    result = {
        "steps": steps,
        "size_mb": size / 2**20,
        "read_log_s": {"median": statistics.median(parse), "max": max(parse)},
        "advise_s": {"median": statistics.median(whole), "max": max(whole)},
        "repeats": args.repeats,
    }
    print(
        f"{steps} steps, {result['size_mb']:.1f} MB: read {result['read_log_s']['median']:.2f} s "
        f"(max {result['read_log_s']['max']:.2f}), whole advise {result['advise_s']['median']:.2f} s "
        f"(max {result['advise_s']['max']:.2f}), median of {args.repeats}; goal under 2 s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
