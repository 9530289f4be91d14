"""``python -m verl_split ...``: the ``verl-split`` command (``tools/cli.py``), where the script is not on PATH."""

import sys

from verl_split.tools.cli import main

sys.exit(main())
