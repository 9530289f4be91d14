"""verl 0.7's legacy Megatron critic (``verl/workers/megatron_workers.py``) under the update overlap.

verl 0.7 runs every ``critic.strategy=megatron`` job on the legacy Megatron ``CriticWorker``
(``verl/trainer/main_ppo.py:195-197``), whose ``update_critic`` is registered blocking
(``megatron_workers.py:1235-1237``, ``register``'s default). Without a seam on it the update overlap ran
the updates one after the other and the deferral said nothing at all. megatron-core imports on CPU
(the 0.7 environment installs it: ``constraints/verl-0.7.txt``, extra ``megatron-cpu``), so verl's own
module is imported here, in a fresh interpreter; no Megatron model is built (its DDP buffers need CUDA).
"""

from __future__ import annotations

import pytest
from support.families import only_on
from support.pyrun import run_json

pytestmark = [pytest.mark.subprocess, only_on("0.7", "verl 0.8 removed the legacy Megatron workers")]

REGISTER = """
import json
from verl.single_controller.base.decorator import MAGIC_ATTR
{activate}
from verl.workers import fsdp_workers, megatron_workers

def blocking(module):
    return repr(getattr(module.CriticWorker.update_critic, MAGIC_ATTR)["blocking"])

print(json.dumps({{"megatron": blocking(megatron_workers), "fsdp": blocking(fsdp_workers)}}))
"""


def test_megatron_critic_update_is_dispatched_without_blocking():
    deferred = "verl_split.runtime.overlap.legacy.DEFERRED"
    on = run_json(REGISTER.format(activate=""), env={"VERL_SPLIT": "1"})
    assert on == {"megatron": deferred, "fsdp": deferred}
    off = run_json(REGISTER.format(activate=""))
    assert off == {"megatron": "True", "fsdp": "True"}


def test_megatron_critic_seam_comes_back_on_unpatch():
    snippet = REGISTER.format(
        activate="from verl_split import seam_catalogue\nfrom verl_split.plugin import activation\n"
        "seam_catalogue.activate()\nactivation.deactivate()"
    )
    assert run_json(snippet, env={"VERL_SPLIT": "1"}) == {"megatron": "True", "fsdp": "True"}
