"""The shipped examples and docs against the installed verl and verl-split's own code.

* Every shipped config composes with hydra against the installed verl (``ppo_trainer_split.yaml``), and the
  planner accepts it.
* Every ``VERL_SPLIT*`` variable and every ``split_placement`` key the docs (README.md, docs/*.md, the example
  READMEs) name exists in ``settings.VARIABLES`` / ``placement.CONFIG_KEYS``; the reference docs
  (docs/configuration.md and the example READMEs) document every one.
* Every ``verl-split plan`` picture in the docs is what the command prints today, and every ``verl-split plan``
  command line in a ``bash`` block runs.

The docs' links and the paths they name: test_docs.py.

Fast: hydra composition and the planner only, no process, no Ray and no training (the scripts:
test_example_scripts.py; tests/e2e runs the rest).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from support.examples import FITS_3_5, FITS_6_2, compose_split
from support.paths import EXAMPLE, ROOT

from verl_split import placement as planner
from verl_split.core import settings
from verl_split.dryrun.assets import TinyAssets
from verl_split.dryrun.recipe import dry_run_overrides
from verl_split.tools.hydra_config import compose_config

pytestmark = pytest.mark.unit

EXAMPLE_DOCS = (EXAMPLE / "README.md", EXAMPLE / "README_zh.md")
#: The docs that document every variable and every config key: the reference, and the guide in both languages.
REFERENCE_DOCS = (ROOT / "docs" / "configuration.md", *EXAMPLE_DOCS)
#: Every doc: what they name must exist.
ALL_DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *EXAMPLE_DOCS)


@pytest.fixture(autouse=True)
def _no_placement_from_the_shell(monkeypatch):
    # The example config defaults to VERL_SPLIT_PLACEMENT; a developer's shell must not change the tests.
    monkeypatch.delenv("VERL_SPLIT_PLACEMENT", raising=False)


def spec_of(config) -> dict[str, list[int]]:
    # env_value="": the config's own block decides, as in a run (its default already reads the variable).
    return planner.plan_from_config(config, env_value="").resource_pool_spec


# --------------------------------------------------------------------------- ppo_trainer_split.yaml


def test_split_config_is_verls_ppo_trainer_plus_split_placement():
    split = OmegaConf.to_container(compose_split([]), resolve=False)
    stock = OmegaConf.to_container(compose_config("ppo_trainer", None, []), resolve=False)
    assert split.pop("split_placement") == {"placement": "${oc.env:VERL_SPLIT_PLACEMENT,halves}"}
    assert split == stock


def test_split_config_defaults_to_halves_and_plans():
    config = compose_split([])
    assert config.split_placement.placement == "halves"
    assert spec_of(config) == {"actor_rollout_ref_pool": [4], "critic_pool": [4]}


def test_split_config_takes_verl_split_placement_from_the_environment(monkeypatch):
    monkeypatch.setenv("VERL_SPLIT_PLACEMENT", "6:2")
    assert spec_of(compose_split(FITS_6_2)) == {"actor_rollout_ref_pool": [6], "critic_pool": [2]}


def test_split_config_override_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("VERL_SPLIT_PLACEMENT", "6:2")
    config = compose_split(
        ["split_placement.placement=3:5", "actor_rollout_ref.rollout.tensor_model_parallel_size=1", *FITS_3_5]
    )
    assert spec_of(config) == {"actor_rollout_ref_pool": [3], "critic_pool": [5]}


def test_split_config_takes_groups_instead_of_placement():
    config = compose_split(
        [
            "~split_placement.placement",
            "+split_placement.groups=[{roles:[actor,rollout,ref],gpus:'0-5'},{roles:[critic],gpus:'6-7'}]",
            *FITS_6_2,
        ]
    )
    assert spec_of(config) == {"actor_rollout_ref_pool": [6], "critic_pool": [2]}


def test_split_config_takes_role_groups_quoted_as_the_readme_shows():
    # What the shell hands hydra for 'split_placement.placement="actor,rollout,ref:0-5;critic,reward:6-7"'.
    config = compose_split(['split_placement.placement="actor,rollout,ref:0-5;critic,reward:6-7"', *FITS_6_2])
    assert spec_of(config) == {"actor_rollout_ref_pool": [6], "critic_pool": [2]}


def test_split_config_takes_the_cpu_dry_run_overrides(tmp_path):
    # Only paths: composing and planning never open them.
    assets = TinyAssets(
        root=tmp_path,
        model=tmp_path / "model",
        critic_model=tmp_path / "critic_model",
        train_file=tmp_path / "train.parquet",
        val_file=tmp_path / "val.parquet",
        reward_file=tmp_path / "reward.py",
    )
    config = compose_split(dry_run_overrides(assets, steps=2, out_dir=tmp_path, n_gpus_per_node=2))
    assert spec_of(config) == {"actor_rollout_ref_pool": [1], "critic_pool": [1]}


# --------------------------------------------------------------------------- the docs against the code

# `VERL_SPLIT`, `VERL_SPLIT_TRACE`: a name stops at the first character outside [A-Z0-9_]
# (so `VERL_SPLIT*` and `VERL_SPLIT_*` read as `VERL_SPLIT`).
_VARIABLE = re.compile(r"\bVERL_SPLIT(?:_[A-Z0-9]+)*")
_CONFIG_KEY = re.compile(r"\bsplit_placement\.([A-Za-z_][A-Za-z0-9_]*)")
_YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)


def _read(doc: Path) -> str:
    if not doc.exists():
        pytest.fail(f"{doc.relative_to(ROOT)} is missing")
    return doc.read_text()


@pytest.mark.parametrize("doc", ALL_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_only_variables_that_exist(doc):
    named = set(_VARIABLE.findall(_read(doc)))
    assert named <= set(settings.VARIABLES), f"not in settings.VARIABLES: {sorted(named - set(settings.VARIABLES))}"


@pytest.mark.parametrize("doc", ALL_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_only_split_placement_keys_that_exist(doc):
    text = _read(doc)
    named = set(_CONFIG_KEY.findall(text))
    for block in _YAML_BLOCK.findall(text):
        loaded = yaml.safe_load(block)
        if isinstance(loaded, dict) and isinstance(loaded.get("split_placement"), dict):
            named |= set(loaded["split_placement"])
    assert named <= set(planner.CONFIG_KEYS), f"not in CONFIG_KEYS: {sorted(named - set(planner.CONFIG_KEYS))}"


@pytest.mark.parametrize("doc", REFERENCE_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_reference_docs_document_every_variable(doc):
    # Documented means named in backticks on its own: `VERL_SPLIT_TRACE` (a table row, say);
    # `VERL_SPLIT_TRACE=/tmp/t.json` in a command does not count.
    text = _read(doc)
    missing = [name for name in settings.VARIABLES if f"`{name}`" not in text]
    assert not missing, f"{doc.relative_to(ROOT)} does not document {missing} (write each as `NAME`)"


@pytest.mark.parametrize("doc", REFERENCE_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_reference_docs_document_every_split_placement_key(doc):
    text = _read(doc)
    missing = [key for key in planner.CONFIG_KEYS if f"split_placement.{key}" not in text]
    assert not missing, f"{doc.relative_to(ROOT)} does not document split_placement.{missing}"


# --------------------------------------------------------------------------- verl-split plan pictures

# A ```console block whose first line is `$ [VAR=value ...] verl-split plan ...`: the rest of the
# block is the output shown. The first output line (placement and where it came from) is skipped.
_CONSOLE_BLOCK = re.compile(r"^```console\n\$ (.*?)\n(.*?)^```", re.S | re.M)


def _doc_id(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def _plan_blocks() -> list[tuple[str, str, str]]:
    blocks = []
    for doc in ALL_DOCS:
        if doc.exists():
            for command, shown in _CONSOLE_BLOCK.findall(doc.read_text()):
                if "verl-split plan" in command:
                    blocks.append((_doc_id(doc), command, shown))
    return blocks


def test_docs_show_plan_pictures():
    assert len(_plan_blocks()) >= 6, "each placement strategy comes with its `verl-split plan` picture"


@pytest.mark.parametrize(("doc", "command", "shown"), [pytest.param(*b, id=f"{b[0]}: {b[1]}") for b in _plan_blocks()])
def test_docs_plan_pictures_are_what_plan_prints(doc, command, shown, monkeypatch, capsys):
    from verl_split.tools import cli

    words = shlex.split(command)
    while "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        key, value = words.pop(0).split("=", 1)
        monkeypatch.setenv(key, value)
    assert words[:2] == ["verl-split", "plan"], command
    assert cli.main(words[1:]) == 0
    printed = capsys.readouterr().out
    assert printed.rstrip().splitlines()[1:] == shown.rstrip().splitlines()[1:], f"{doc}: $ {command}"


_BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def _plan_commands() -> list[tuple[str, str]]:
    commands = []
    for doc in ALL_DOCS:
        if doc.exists():
            for block in _BASH_BLOCK.findall(doc.read_text()):
                for line in block.replace("\\\n", " ").splitlines():
                    if line.startswith("verl-split plan"):
                        commands.append((_doc_id(doc), line))
    return commands


@pytest.mark.parametrize(("doc", "command"), _plan_commands())
def test_docs_plan_commands_run(doc, command, monkeypatch, capsys):
    from verl_split.tools import cli

    monkeypatch.chdir(ROOT)  # the docs give paths from the repository's root
    # A trailing `# comment` (the README's) is the shell's, not the command's.
    assert cli.main(shlex.split(command, comments=True)[1:]) == 0, f"{doc}: {command}\n{capsys.readouterr().err}"
