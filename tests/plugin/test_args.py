"""verl_split.plugin.args.get_argument: a wrapped call's argument, by position or by name."""

from __future__ import annotations

import pytest

from verl_split.plugin.args import get_argument

pytestmark = pytest.mark.unit


def test_positional_keyword_and_default():
    assert get_argument(("s", "m", "d", "c", "e", "B"), {}, 5, "blocking") == "B"
    assert get_argument(("s", "m"), {"blocking": "K"}, 5, "blocking") == "K"
    assert get_argument(("s", "m"), {}, 5, "blocking", None) is None
    assert get_argument((), {"config": 1}, 0, "config") == 1


def test_a_keyword_wins_over_a_shorter_positional_tuple():
    # Python forbids both at once; a wrapper only ever sees one. The keyword is the explicit one.
    assert get_argument(("positional",), {"config": "keyword"}, 0, "config") == "keyword"


def test_a_falsy_argument_is_returned_not_the_default():
    assert get_argument((0,), {}, 0, "config", "default") == 0
    assert get_argument((), {"config": None}, 0, "config", "default") is None


def test_missing_without_default_names_the_parameter():
    with pytest.raises(TypeError, match="'config' .*position 0"):
        get_argument((), {"other": 1}, 0, "config")


def test_the_seams_read_their_arguments_either_way(monkeypatch):
    from verl_split.runtime.overlap import legacy
    from verl_split.runtime.placement import hooks

    def func_generator(self, method_name, dispatch_fn, collect_fn, execute_fn, blocking):
        return lambda: "verl's method"

    # blocking=DEFERRED by position or by name: the method is wrapped to block for ordinary callers;
    # any other value (here False): verl's own method, unwrapped.
    built = [
        legacy.wrap_func_generator(func_generator, None, args, kwargs)
        for args, kwargs in (
            ((None, "m", None, None, None, legacy.DEFERRED), {}),
            ((None, "m", None, None, None), {"blocking": legacy.DEFERRED}),
            ((None, "m", None, None, None, False), {}),
        )
    ]
    assert [isinstance(method, legacy.MaterialisedUnlessDeferred) for method in built] == [True, True, False]
    assert built[0]() == built[1]() == built[2]() == "verl's method"

    checked = []
    monkeypatch.setattr(hooks, "check_config", checked.append)
    hooks.wrap_auto_set_device(lambda config: None, None, ({"c": 1},), {})
    hooks.wrap_auto_set_device(lambda config: None, None, (), {"config": {"c": 2}})
    assert checked == [{"c": 1}, {"c": 2}]
