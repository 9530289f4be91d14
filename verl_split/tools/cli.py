"""The ``verl-split`` command: ``doctor``, ``plan``, ``demo`` and ``advise``.

Each subcommand lives in its own module with ``add_arguments(parser)`` and
``run(args) -> int``; this file only dispatches, and imports a subcommand's module
(which may import verl, Ray or torch) only when that subcommand runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from verl_split import __version__

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "doctor": (
        "verl_split.tools.doctor",
        "Check the installed verl and Ray, and what verl-split patches, here or in a Ray worker.",
    ),
    "plan": ("verl_split.tools.plan", "Show how a placement maps roles onto the cluster's GPUs."),
    "demo": (
        "verl_split.tools.demo",
        "Run a tiny PPO job on CPU (or one CUDA GPU): stock, split with VERL_SPLIT=1, or three ways with --compare.",
    ),
    "advise": (
        "verl_split.tools.advise.cli",
        "Predict each placement's step time from a job's runs and recommend one.",
    ),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    # The docstring's first line without its reST quotes: --help prints it as plain text.
    parser = argparse.ArgumentParser(prog="verl-split", description=__doc__.splitlines()[0].replace("``", ""))
    parser.add_argument("--version", action="version", version=f"verl-split {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    asked = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        # Load only the module of the subcommand asked for (its arguments are needed then).
        if name == asked:
            importlib.import_module(module_name).add_arguments(sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    module_name = SUBCOMMANDS[args.command][0]
    return int(importlib.import_module(module_name).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
