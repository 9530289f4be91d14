"""The preflight (verl_split/preflight.py): every seam's declared needs, checked against verl's source.

The unit tests break the installed verl the way a new release could, one seam at a time: a copy of the
one file that defines what the seam needs, with the class or method renamed, removed, or a parameter
renamed, put before the real verl (``preflight.Source`` reads the copy first). The preflight must name
the seam's feature, the verl symbol and what differs, in one line, with the way to switch the feature
off; it reads source only, so no Ray (nor verl's trainer) is involved at all. The process tests at the
end run the real path: ``python -m verl.trainer.main_ppo`` over a copy of verl with one method renamed
stops with that line before Ray starts; the same feature switched off runs without the seam.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from families import FAMILY, VERSION
from pyrun import clean_env, run_json

from verl_split import activation, compat, preflight

ROOTS = preflight.verl_roots()
APPLYING = [s for s in activation.SEAMS if s.applies_to()]


def source(*overlay: Path) -> preflight.Source:
    return preflight.Source([*overlay, *ROOTS])


def needs(seam: activation.Seam) -> list[preflight.Need]:
    return [preflight.parse(text, seam.target) for text in seam.needs]


def breakable(seam: activation.Seam, *, with_params: bool = False) -> tuple[preflight.Need, str, ast.AST]:
    """The seam's first need whose definition (a def or a class) can be edited in a copy of its file."""
    for need in needs(seam):
        if need.optional or (with_params and not need.params):
            continue
        found = preflight.locate(source(), need)
        if found is not None and isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return need, found[0], found[1]
    pytest.skip(f"{seam.name} declares no {'parameters' if with_params else 'def or class'} to break")


def edited_copy(tmp_path: Path, module: str, edit) -> Path:
    """``tmp_path/overlay`` with ``module``'s file, its lines passed through ``edit``."""
    original = source().file_of(module)
    relative = original.relative_to(next(r for r in ROOTS if original.is_relative_to(r)))
    copy = tmp_path / "overlay" / relative
    copy.parent.mkdir(parents=True, exist_ok=True)
    lines = original.read_text().splitlines(keepends=True)
    copy.write_text("".join(edit(lines)))
    return tmp_path / "overlay"


def first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)]) - 1  # 0-based


def gone(need: preflight.Need) -> str:
    """What the line says of a name verl no longer defines where the need looks.

    A method a base class also has (``__init__``) is then inherited: the line names its parameters instead.
    """
    return f"has no {need.path[-1]!r}" if not need.params else "has no "


def problem_for(seam: activation.Seam, overlay: Path) -> preflight.Problem:
    report = preflight.run([seam], source(overlay))
    assert report.errors == []
    assert len(report.problems) == 1, report.problems
    return report.problems[0]


def assert_one_line_naming(problem: preflight.Problem, seam: activation.Seam, need: preflight.Need, what: str):
    line = problem.line(VERSION)
    assert "\n" not in line
    feature = preflight.FEATURES[seam.part]
    assert line.startswith(f"{feature.label} needs verl's {need.symbol} (seam {seam.name}), but on verl {VERSION} ")
    assert what in line, line
    assert feature.off in line


@pytest.mark.unit
def test_every_declared_need_is_met_by_the_installed_verl():
    report = preflight.run(APPLYING)
    assert report.problems == [] and report.errors == []
    assert set(report.checked) == {s.part for s in APPLYING}
    for seam in APPLYING:
        for need in needs(seam):  # a declaration that parses and names real verl code, each
            assert need.path


@pytest.mark.unit
def test_declarations_name_known_features_and_parse():
    for seam in activation.SEAMS:
        assert seam.part in preflight.FEATURES, seam
        for text in seam.needs:
            preflight.parse(text, seam.target)
    with pytest.raises(ValueError, match="malformed need"):
        preflight.parse("Class.method(a@x)", "verl.x")


@pytest.mark.unit
@pytest.mark.parametrize("seam", APPLYING, ids=lambda s: s.name)
def test_a_renamed_class_or_method_is_named(seam, tmp_path):
    need, module, node = breakable(seam)
    name = need.path[-1]

    def rename(lines):
        start = first_line(node)
        for index in range(start, node.lineno):
            lines[index] = re.sub(rf"\b(def|class) {name}\b", rf"\1 {name}_renamed", lines[index])
        return lines

    problem = problem_for(seam, edited_copy(tmp_path, module, rename))
    assert problem.need == need
    assert_one_line_naming(problem, seam, need, gone(need))


@pytest.mark.unit
@pytest.mark.parametrize("seam", APPLYING, ids=lambda s: s.name)
def test_a_removed_class_or_method_is_named(seam, tmp_path):
    need, module, node = breakable(seam)

    def remove(lines):
        indent = re.match(r"\s*", lines[node.lineno - 1]).group()
        # Keep the block valid Python: a body that held only this definition gets `pass`.
        return [*lines[: first_line(node)], f"{indent}pass\n", *lines[node.end_lineno :]]

    problem = problem_for(seam, edited_copy(tmp_path, module, remove))
    assert problem.need == need
    assert_one_line_naming(problem, seam, need, gone(need))


@pytest.mark.unit
@pytest.mark.parametrize("seam", APPLYING, ids=lambda s: s.name)
def test_a_renamed_parameter_is_named(seam, tmp_path):
    need, module, node = breakable(seam, with_params=True)
    parameter = need.params[0][0]
    if isinstance(node, ast.ClassDef):
        init = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        # A dataclass: its fields are its constructor's parameters.
        fields = [n for n in node.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == parameter]
        node = init[0] if init else fields[0]
    lines_of_signature = range(node.lineno - 1, node.body[0].lineno - 1) if hasattr(node, "body") else [node.lineno - 1]

    def rename(lines):
        for index in lines_of_signature:
            lines[index] = re.sub(rf"\b{parameter}\b", f"{parameter}_renamed", lines[index])
        return lines

    problem = problem_for(seam, edited_copy(tmp_path, module, rename))
    assert problem.need == need
    assert_one_line_naming(problem, seam, need, f"has no parameter {parameter!r}")


@pytest.mark.unit
def test_a_moved_parameter_is_named(tmp_path):
    (seam,) = [s for s in APPLYING if s.name == "step_metrics"]  # Tracking.log(data@0): every family
    need, module, node = breakable(seam, with_params=True)

    def swap(lines):
        lines[node.lineno - 1] = lines[node.lineno - 1].replace("self, data, step", "self, step, data")
        return lines

    problem = problem_for(seam, edited_copy(tmp_path, module, swap))
    assert "parameter 'data' is argument 1, not 0" in problem.line(VERSION)


@pytest.mark.unit
def test_a_missing_module_is_named():
    (seam,) = [s for s in APPLYING if s.name == "step_metrics"]

    class WithoutTracking(preflight.Source):
        def file_of(self, module):
            return None if module == seam.target else super().file_of(module)

    report = preflight.run([seam], WithoutTracking(ROOTS))
    (problem,) = report.problems
    assert f"module {seam.target} does not exist" in problem.line(VERSION)


@pytest.mark.unit
def test_a_module_named_in_two_places_is_found_in_either(tmp_path):
    # verl 0.7.1 moved ResourcePoolManager from ray_trainer.py to single_controller/ray/base.py.
    need = preflight.parse("verl.not_there|verl.single_controller.ray.base:RayResourcePool", "verl")
    assert preflight.check_need(source(), need) is None
    missing = preflight.parse("verl.single_controller.ray.base|verl.not_there:NoSuchPool", "verl")
    assert "has no 'NoSuchPool'" in preflight.check_need(source(), missing)


@pytest.mark.unit
def test_an_optional_need_is_checked_only_where_verl_has_it():
    assert preflight.check_need(source(), preflight.parse("?verl.utils.tracking:NoSuchClass", "verl")) is None
    renamed = preflight.parse("?verl.utils.tracking:Tracking.log(no_such_parameter)", "verl")
    assert "has no parameter 'no_such_parameter'" in preflight.check_need(source(), renamed)


@pytest.mark.unit
def test_the_preflight_reads_source_only_and_is_quick():
    report = preflight.run(APPLYING)
    assert report.seconds < 5  # about 0.15 s on the 2-core machine: a dozen files parsed
    code = (
        "import sys, json; from verl_split import activation; activation.run_preflight(); "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'verl' or m.startswith('verl.'))))"
    )
    imported = run_json(code)
    assert imported == [], "the preflight imported verl"


# ------------------------------------------------------------------------------------------ the real path


def broken_verl_copy(tmp_path: Path, module: str, name: str) -> Path:
    """A copy of the installed verl package with ``def name`` renamed in ``module``."""
    root = tmp_path / "verl_copy"
    shutil.copytree(ROOTS[0] / "verl", root / "verl", ignore=shutil.ignore_patterns("__pycache__"))
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    text = path.read_text()
    assert f"def {name}(" in text
    path.write_text(text.replace(f"def {name}(", f"def {name}_renamed("))
    return root


#: The update overlap's wrapped method on the default trainer of this family.
if compat.has_v1_trainer():
    UPDATE_SEAM, UPDATE_MODULE = "overlap_v1", "verl.trainer.ppo.v1.trainer_base"
    UPDATE_SYMBOL = "verl.trainer.ppo.v1.trainer_base:PPOTrainer._update_critic"
else:
    UPDATE_SEAM = "overlap_legacy" if compat.has_legacy_workers() else "overlap_v0"
    UPDATE_MODULE = "verl.trainer.ppo.ray_trainer"
    UPDATE_SYMBOL = "verl.trainer.ppo.ray_trainer:RayPPOTrainer._update_critic"


def test_main_ppo_stops_before_ray_naming_the_renamed_method(tmp_path):
    root = broken_verl_copy(tmp_path, UPDATE_MODULE, "_update_critic")
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "trainer.n_gpus_per_node=2"],
        env=clean_env({"PYTHONPATH": str(root), "VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("verl-split: ")][-1:]
    assert line.startswith(f"verl-split: overlapped updates needs verl's {UPDATE_SYMBOL} (seam {UPDATE_SEAM})")
    assert "has no '_update_critic'" in line and "VERL_SPLIT_OVERLAP=prep" in line
    assert "Traceback" not in proc.stderr
    assert "Started a local Ray instance" not in proc.stdout + proc.stderr


def test_the_feature_switched_off_runs_without_its_seam(tmp_path):
    root = broken_verl_copy(tmp_path, UPDATE_MODULE, "_update_critic")
    seen = run_json(
        f"""
import json, importlib, verl
from verl_split import activation
importlib.import_module({UPDATE_MODULE!r})
print(json.dumps({{"skipped": activation.skipped_patches(), "applied": activation.applied_patches()}}))
""",
        env={"PYTHONPATH": str(root), "VERL_SPLIT": "1", "VERL_SPLIT_OVERLAP": "prep"},
    )
    assert UPDATE_SEAM in seen["skipped"] and UPDATE_SEAM not in seen["applied"]
    assert any(name.startswith("prep_") for name in seen["applied"])


@pytest.fixture
def newer_verl(tmp_path):
    """Distribution metadata claiming verl 0.10.0, before the real one: a verl newer than the tested ones."""
    dist = tmp_path / "meta" / "verl-0.10.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.10.0\n")
    return tmp_path / "meta"


#: A newer version faked over verl 0.7/0.8's code: the start-up hook leaves loading to verl, which has no
#: entry-point loader there. No real verl is like that (verl loads entry points since 0.9).
needs_entry_points = pytest.mark.skipif(
    not compat.has_entry_points(), reason=f"verl {VERSION} has no entry-point loader for a faked newer version"
)


@needs_entry_points
def test_a_newer_verl_runs_with_one_untested_line_when_the_preflight_passes(newer_verl):
    code = "import verl; from verl_split import activation; print(activation.is_active())"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env({"PYTHONPATH": str(newer_verl), "VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"
    (line,) = [line for line in proc.stderr.splitlines() if "untested" in line]
    assert "verl 0.10.0 is newer than the releases verl-split is tested on" in line


@needs_entry_points
def test_a_newer_verl_that_moved_a_seam_is_refused_with_the_reason(newer_verl, tmp_path):
    root = broken_verl_copy(tmp_path, UPDATE_MODULE, "_update_critic")
    proc = subprocess.run(
        [sys.executable, "-c", "import verl"],
        env=clean_env({"PYTHONPATH": f"{newer_verl}:{root}", "VERL_SPLIT": "1"}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode != 0
    assert f"overlapped updates needs verl's {UPDATE_SYMBOL}" in proc.stderr
    assert "on verl 0.10.0 " in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.unit
def test_this_run_s_verl_is_tested_or_said_to_be_untested():
    if compat.is_tested():
        assert FAMILY in compat.SUPPORTED_FAMILIES and compat.untested_note() == ""
    else:  # make test-release VERL=main
        assert f"verl {VERSION} is newer than the releases verl-split is tested on" in compat.untested_note()


@pytest.mark.unit
@pytest.mark.skipif(not compat.verl_in(compat.SHARED_ROLLOUT), reason="shared rollout is built on verl 0.9")
def test_shared_rollout_switched_on_in_the_config_is_preflighted_before_ray(tmp_path, monkeypatch):
    # The config key (split_placement.shared_rollout) is read after activation, in the launching process's
    # placement check: there the shared-rollout seam's needs are checked, with a balancer that verl renamed.
    from verl_split import settings
    from verl_split.errors import ActivationFailed
    from verl_split.seams import placement_check

    (seam,) = [s for s in APPLYING if s.name == "shared_rollout_v1"]
    need = preflight.parse("verl.workers.rollout.llm_server:GlobalRequestLoadBalancer", seam.target)
    module, node = preflight.locate(source(), need)

    def rename(lines):
        lines[node.lineno - 1] = lines[node.lineno - 1].replace("class GlobalRequestLoadBalancer", "class Renamed")
        return lines

    overlay = edited_copy(tmp_path, module, rename)
    monkeypatch.setattr(preflight, "verl_roots", lambda: [overlay, *ROOTS])
    monkeypatch.setattr(settings, "_frozen", settings.Settings(enabled=True))
    config = {
        "trainer": {"nnodes": 1, "n_gpus_per_node": 8},
        "actor_rollout_ref": {"rollout": {"tensor_model_parallel_size": 1}},
        "critic": {"enable": True},
        "split_placement": {"shared_rollout": True},
    }
    with pytest.raises(ActivationFailed) as stopped:
        placement_check.check_config(config)
    message = str(stopped.value.code)
    assert message.startswith("verl-split: shared rollout needs verl's verl.workers.rollout.llm_server:")
    assert "has no 'GlobalRequestLoadBalancer'" in message and "VERL_SPLIT_SHARED_ROLLOUT" in message
    config["split_placement"]["shared_rollout"] = False
    placement_check.check_config(config)  # off: nothing of shared rollout is needed
