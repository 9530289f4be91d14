"""The preflight (verl_split/plugin/preflight.py): every seam's declared needs, checked against verl's source.

The unit tests break the installed verl the way a new release could, one seam at a time: a copy of the
one file that defines what the seam needs, with the class or method renamed, removed, or a parameter
renamed, put before the real verl (``verl_source.Source`` reads the copy first). The preflight must name
the seam's feature, the verl symbol and what differs, in one line, with the way to switch the feature
off; it reads source only, so no Ray (nor verl's trainer) is involved at all. The real path, a run over
such a copy: test_preflight_runs.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from support.families import FAMILY, VERSION
from support.pyrun import run_json

from verl_split.core import compat
from verl_split.plugin import needs, preflight, verl_source
from verl_split.plugin.seam import Seam
from verl_split.seam_catalogue import SEAMS

pytestmark = pytest.mark.unit

ROOTS = verl_source.verl_roots()
APPLYING = [s for s in SEAMS if s.applies_to()]


def source(*overlay: Path) -> verl_source.Source:
    return verl_source.Source([*overlay, *ROOTS])


def needs_of(seam: Seam) -> list[needs.Need]:
    return [needs.parse(text, seam.target) for text in seam.needs]


def breakable(seam: Seam, *, with_params: bool = False) -> tuple[needs.Need, str, ast.AST]:
    """The seam's first need whose definition (a def or a class) can be edited in a copy of its file."""
    for need in needs_of(seam):
        if need.optional or (with_params and not need.params):
            continue
        found = needs.locate(source(), need)
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


def gone(need: needs.Need) -> str:
    """What the line says of a name verl no longer defines where the need looks.

    A method a base class also has (``__init__``) is then inherited: the line names its parameters instead.
    """
    return f"has no {need.path[-1]!r}" if not need.params else "has no "


def problem_for(seam: Seam, overlay: Path) -> preflight.Problem:
    report = preflight.run([seam], source(overlay))
    assert report.errors == []
    assert len(report.problems) == 1, report.problems
    return report.problems[0]


def assert_one_line_naming(problem: preflight.Problem, seam: Seam, need: needs.Need, what: str):
    line = problem.line(VERSION)
    assert "\n" not in line
    feature = preflight.FEATURES[seam.feature]
    assert line.startswith(f"{feature.label} needs verl's {need.symbol} (seam {seam.name}), but on verl {VERSION} ")
    assert what in line, line
    assert feature.off in line


def test_every_declared_need_is_met_by_the_installed_verl():
    report = preflight.run(APPLYING)
    assert report.problems == [] and report.errors == []
    assert set(report.checked) == {s.feature for s in APPLYING}
    for seam in APPLYING:
        for need in needs_of(seam):  # a declaration that parses and names real verl code, each
            assert need.path


def test_declarations_name_known_features_and_parse():
    for seam in SEAMS:
        assert seam.feature in preflight.FEATURES, seam
        for text in seam.needs:
            needs.parse(text, seam.target)
    with pytest.raises(ValueError, match="malformed need"):
        needs.parse("Class.method(a@x)", "verl.x")


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


def test_a_moved_parameter_is_named(tmp_path):
    (seam,) = [s for s in APPLYING if s.name == "step_metrics"]  # Tracking.log(data@0): every family
    need, module, node = breakable(seam, with_params=True)

    def swap(lines):
        lines[node.lineno - 1] = lines[node.lineno - 1].replace("self, data, step", "self, step, data")
        return lines

    problem = problem_for(seam, edited_copy(tmp_path, module, swap))
    assert "parameter 'data' is argument 1, not 0" in problem.line(VERSION)


def test_a_missing_module_is_named():
    (seam,) = [s for s in APPLYING if s.name == "step_metrics"]

    class WithoutTracking(verl_source.Source):
        def file_of(self, module):
            return None if module == seam.target else super().file_of(module)

    report = preflight.run([seam], WithoutTracking(ROOTS))
    (problem,) = report.problems
    assert f"module {seam.target} does not exist" in problem.line(VERSION)


def test_a_module_named_in_two_places_is_found_in_either(tmp_path):
    # verl 0.7.1 moved ResourcePoolManager from ray_trainer.py to single_controller/ray/base.py.
    need = needs.parse("verl.not_there|verl.single_controller.ray.base:RayResourcePool", "verl")
    assert needs.check_need(source(), need) is None
    missing = needs.parse("verl.single_controller.ray.base|verl.not_there:NoSuchPool", "verl")
    assert "has no 'NoSuchPool'" in needs.check_need(source(), missing)


def test_an_optional_need_is_checked_only_where_verl_has_it():
    assert needs.check_need(source(), needs.parse("?verl.utils.tracking:NoSuchClass", "verl")) is None
    renamed = needs.parse("?verl.utils.tracking:Tracking.log(no_such_parameter)", "verl")
    assert "has no parameter 'no_such_parameter'" in needs.check_need(source(), renamed)


def test_the_preflight_reads_source_only_and_is_quick():
    report = preflight.run(APPLYING)
    assert report.seconds < 5  # about 0.15 s on the 2-core machine: a dozen files parsed
    code = (
        "import sys, json; from verl_split import seam_catalogue; from verl_split.plugin import activation; "
        "seam_catalogue.install(); activation.run_preflight(); "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'verl' or m.startswith('verl.'))))"
    )
    imported = run_json(code)
    assert imported == [], "the preflight imported verl"


# ------------------------------------------------------------------------------------------ the real path


def test_this_run_s_verl_is_tested_or_said_to_be_untested():
    if compat.is_tested():
        assert FAMILY in compat.SUPPORTED_FAMILIES and compat.untested_note() == ""
    else:  # make test-release VERL=main
        assert f"verl {VERSION} is newer than the releases verl-split is tested on" in compat.untested_note()


@pytest.mark.skipif(not compat.verl_in(compat.SHARED_ROLLOUT), reason="shared rollout is built on verl 0.9")
def test_shared_rollout_switched_on_in_the_config_is_preflighted_before_ray(tmp_path, monkeypatch):
    # The config key (split_placement.shared_rollout) is read after activation, in the launching process's
    # placement check: there the shared-rollout seam's needs are checked, with a balancer that verl renamed.
    from verl_split import seam_catalogue
    from verl_split.core import settings
    from verl_split.core.errors import ActivationFailed
    from verl_split.runtime.placement import hooks as placement_check

    seam_catalogue.install()  # as activation has, in the launching process (alone, no other test did it first)
    (seam,) = [s for s in APPLYING if s.name == "shared_rollout_v1"]
    need = needs.parse("verl.workers.rollout.llm_server:GlobalRequestLoadBalancer", seam.target)
    module, node = needs.locate(source(), need)

    def rename(lines):
        lines[node.lineno - 1] = lines[node.lineno - 1].replace("class GlobalRequestLoadBalancer", "class Renamed")
        return lines

    overlay = edited_copy(tmp_path, module, rename)
    monkeypatch.setattr(preflight, "verl_roots", lambda: [overlay, *ROOTS])
    settings.freeze(settings.Settings(enabled=True))
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
