"""The one "off" policy through ``import verl``, on whichever verl family runs the tests.

verl 0.9 reaches verl-split through its ``verl.plugins`` entry point, 0.7/0.8 through the
start-up hook (``verl_split_activate.pth``); both must answer the same environment alike.
Run on 0.9 with ``.venv`` and on 0.7 with ``.venvs/verl-0.7`` (``make test`` runs both).
"""

from __future__ import annotations

import pytest
from support.pyrun import run_json, run_python

pytestmark = pytest.mark.subprocess

IMPORT_VERL = """
import json, sys, verl
print(json.dumps({"activation": "verl_split.plugin.activation" in sys.modules, "wrapt": "wrapt" in sys.modules}))
"""


@pytest.mark.parametrize(
    "env",
    [
        {"VERL_SPLIT_OVERLAP": "maybe"},
        {"VERL_SPLIT": "0", "VERL_SPLIT_OVERLAP": "maybe", "VERL_SPLIT_PLACEMENT": "nonsense"},
        {"VERL_SPLIT": "off", "VERL_SPLIT_CPU": ""},
    ],
    ids=["bad-value-alone", "off-with-bad-values", "both-switches-off"],
)
def test_off_is_stock_whatever_the_other_values(env):
    assert run_json(IMPORT_VERL, env=env) == {"activation": False, "wrapt": False}


@pytest.mark.parametrize("name", ["VERL_SPLITT", "VERL_SPLIT_CPUU"])
def test_a_typo_of_the_switch_stops_the_run(name):
    proc = run_python("import verl", env={name: "1"})
    assert proc.returncode != 0
    assert f"unknown variable {name}; verl-split reads only VERL_SPLIT," in proc.stderr
    assert "Traceback" not in proc.stderr


def test_on_validates_the_values():
    proc = run_python("import verl", env={"VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "maybe"})
    assert proc.returncode != 0
    assert "VERL_SPLIT_OVERLAP='maybe' is not an accepted value" in proc.stderr
