"""Run Python snippets in a fresh interpreter: patches must be tested where nothing was imported yet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment minus every VERL_SPLIT* and verl plugin variable, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("VERL_SPLIT") and k not in ("VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES")
    }
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra or {})
    return env


def run_python(code: str, env: Mapping[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_json(code: str, env: Mapping[str, str] | None = None, timeout: float = 180):
    """Run ``code``, which must print one JSON document as its last stdout line; return it."""
    proc = run_python(code, env, timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: Code for a snippet's start: counts in ``calls`` how often verl-split is switched on in that process.
COUNT_ACTIVATIONS = """
from verl_split.plugin import activation
calls = []
_activate = activation.activate
def counting(*args, **kwargs):
    calls.append(1)
    return _activate(*args, **kwargs)
activation.activate = counting
"""
