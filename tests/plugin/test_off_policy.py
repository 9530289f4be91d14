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


#: Each case is a fresh interpreter importing verl (7-10 s). The policy itself is one function
#: (verl_split/core/settings.py), every case of it checked in-process by tests/core/test_settings.py; CI runs one
#: case of each kind through ``import verl`` (off with bad values, a typo of the switch, a bad value when on).
ALSO_IN_PROCESS = pytest.mark.extended(reason="the same policy case by case: tests/core/test_settings.py")


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"VERL_SPLIT_OVERLAP": "maybe"}, id="bad-value-alone", marks=ALSO_IN_PROCESS),
        pytest.param(
            {"VERL_SPLIT": "0", "VERL_SPLIT_OVERLAP": "maybe", "VERL_SPLIT_PLACEMENT": "nonsense"},
            id="off-with-bad-values",
        ),
        pytest.param({"VERL_SPLIT": "off", "VERL_SPLIT_CPU": ""}, id="both-switches-off", marks=ALSO_IN_PROCESS),
    ],
)
def test_off_is_stock_whatever_the_other_values(env):
    assert run_json(IMPORT_VERL, env=env) == {"activation": False, "wrapt": False}


@pytest.mark.parametrize("name", ["VERL_SPLITT", pytest.param("VERL_SPLIT_CPUU", marks=ALSO_IN_PROCESS)])
def test_a_typo_of_the_switch_stops_the_run(name):
    proc = run_python("import verl", env={name: "1"})
    assert proc.returncode != 0
    assert f"unknown variable {name}; verl-split reads only VERL_SPLIT," in proc.stderr
    assert "Traceback" not in proc.stderr


def test_on_validates_the_values():
    proc = run_python("import verl", env={"VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "maybe"})
    assert proc.returncode != 0
    assert "VERL_SPLIT_OVERLAP='maybe' is not an accepted value" in proc.stderr
