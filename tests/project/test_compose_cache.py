"""The tests' compose cache (tests/support/compose_cache.py): a compose is kept by everything that decides it, and
nothing else is kept. Real hydra on a one-file config folder; the counter counts hydra's own composes."""

from __future__ import annotations

import hydra
import pytest
from hydra import initialize_config_dir
from omegaconf import OmegaConf
from support import compose_cache

pytestmark = pytest.mark.unit


@pytest.fixture
def cached(tmp_path, monkeypatch):
    """(compose(overrides), the config file, how many composes hydra made, the cache folder)."""
    made = []
    hydra_compose = getattr(hydra.compose, "__wrapped__", hydra.compose)  # conftest installed the cache already

    def counted(*args, **kwargs):
        made.append(kwargs.get("overrides"))
        return hydra_compose(*args, **kwargs)

    monkeypatch.setattr(hydra, "compose", counted)
    monkeypatch.setattr(compose_cache, "_VOLATILE", [])  # this test's folder is in the run's temporary folder
    kept = tmp_path / "kept"
    kept.mkdir()
    compose_cache.install(kept)
    config_dir = tmp_path / "conf"
    config_dir.mkdir()
    (config_dir / "job.yaml").write_text("trainer:\n  steps: 2\n  name: ${trainer.steps}-steps\n")

    def compose(*overrides):
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return hydra.compose(config_name="job", overrides=list(overrides))

    return compose, config_dir / "job.yaml", made, kept


def test_the_same_compose_is_made_once_and_equals_a_fresh_one(cached):
    compose, _, made, kept = cached
    first, second = compose("trainer.steps=3"), compose("trainer.steps=3")
    assert len(made) == 1 and len(list(kept.glob("*.pickle"))) == 1
    assert OmegaConf.to_yaml(second) == OmegaConf.to_yaml(first) and second.trainer.name == "3-steps"
    assert OmegaConf.is_struct(second) and second is not first  # each caller gets its own copy
    compose("trainer.steps=4")
    assert len(made) == 2


def test_an_edited_config_file_is_composed_again(cached):
    compose, job, made, _ = cached
    compose()
    job.write_text("trainer:\n  steps: 5\n  name: x\n")
    assert compose().trainer.steps == 5 and len(made) == 2


def test_a_failed_compose_and_one_naming_a_volatile_folder_are_not_kept(cached):
    compose, job, made, kept = cached
    for _ in range(2):
        with pytest.raises(Exception, match="nowhere"):
            compose("trainer.nowhere=1")
    assert len(made) == 2 and not list(kept.glob("*.pickle"))
    compose_cache.skip_containing(str(job.parent))  # the config folder is this run's temporary folder
    compose(), compose()
    assert len(made) == 4 and not list(kept.glob("*.pickle"))
