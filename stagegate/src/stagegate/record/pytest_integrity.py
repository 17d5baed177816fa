"""What the pytest witness holds still while tests run: pytest's own functions that run and
report a test, the functions registered on the hooks a test runs and is reported through, and
each test's function and fixtures. Each is held as it was when the witness started (a hook
registered during collection: when collection ended; a test: when it was collected), code
included (a ``__code__`` can be swapped under the same object); a change is named, for the
witness to list as foreign."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

# pytest's functions that run a test, make its report, send it from a pytest-xdist worker and
# write it to JUnit: (module, class or "", attribute)
INTERNALS = (
    ("_pytest.python", "Function", "runtest"),
    ("_pytest.runner", "CallInfo", "from_call"),
    ("_pytest.runner", "", "call_and_report"),
    ("_pytest.runner", "", "runtestprotocol"),
    ("_pytest.reports", "TestReport", "from_item_and_call"),
    ("_pytest.reports", "", "_report_to_json"),
    ("_pytest.junitxml", "_NodeReporter", "append_failure"),
    ("_pytest.junitxml", "_NodeReporter", "append_error"),
    # and rewrite a test module's asserts as it is imported
    ("_pytest.assertion.rewrite", "AssertionRewriter", "visit_Assert"),
    ("_pytest.assertion.rewrite", "AssertionRewritingHook", "exec_module"),
    ("_pytest.assertion.rewrite", "", "rewrite_asserts"),
)

# The hooks a test is run and reported through
RUN_HOOKS = (
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
    "pytest_runtest_call",
    "pytest_runtest_teardown",
    "pytest_pyfunc_call",
    "pytest_fixture_setup",
    "pytest_runtest_makereport",
    "pytest_runtest_logreport",
    "pytest_report_teststatus",
)


def code_of(function: object) -> object:
    """The code a function, method or classmethod runs (None for what has none)."""
    return getattr(getattr(function, "__func__", function), "__code__", None)


def _internals() -> dict[str, tuple[object, object]]:
    """Each of :data:`INTERNALS` as its class or module holds it (a classmethod itself), with
    its code; Nones for one this pytest lacks."""
    found = {}
    for module, owner, attribute in INTERNALS:
        holder: Any = sys.modules.get(module) or importlib.import_module(module)
        holder = getattr(holder, owner, None) if owner else holder
        held = vars(holder or {}).get(attribute)
        found[".".join(filter(None, (owner or module, attribute)))] = (held, code_of(held))
    return found


def _hook_functions(config: pytest.Config) -> dict[tuple[str, object], tuple[object, object]]:
    """(hook, implementation) -> (its function, that function's code), for :data:`RUN_HOOKS`."""
    found = {}
    for name in RUN_HOOKS:
        caller = getattr(config.hook, name, None)
        for impl in caller.get_hookimpls() if caller is not None else ():
            found[(name, impl)] = (impl.function, code_of(impl.function))
    return found


def _held(callable_: object) -> tuple[object, object]:
    """A function as held: the object pytest calls (a method's function) and its code; an
    object that wraps a function's code in anything else is not the function."""
    return getattr(callable_, "__func__", callable_), code_of(callable_)


def _item_code(item: pytest.Item) -> tuple[object, ...]:
    """A test's function and each fixture's it was collected with, with their code."""
    function = item.obj if isinstance(item, pytest.Function) else None
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", None) or {}
    defs = (d for ds in fixtures.values() for d in ds)
    return (_held(function), *(_held(getattr(d, "func", None)) for d in defs))


def _marks(item: pytest.Item) -> tuple[str, ...]:
    return tuple(mark.name for mark in item.iter_markers())


class RunIntegrity:
    """The witness's record of what must not change while tests run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.internals = _internals()
        self.hooks = _hook_functions(config)
        self.items: dict[str, tuple[object, ...]] = {}
        # each test's marks as collected, then as the selection of tests left them
        self.marks: dict[str, tuple[str, ...]] = {}
        self.collecting_done = False

    def hold(self, item: pytest.Item) -> None:
        """Hold a test's code as it is collected (a module collected later cannot change it
        unseen)."""
        self.items[item.nodeid] = _item_code(item)
        self.marks[item.nodeid] = _marks(item)

    def marked_while_collecting(self, items: list[pytest.Item]) -> list[str]:
        """The tests whose marks changed between their collection and the selection of tests
        (``pytest_collection_modifyitems``, where a conftest may mark them): a module collected
        after them marked them."""
        return [
            f"{i.nodeid}: its marks changed while other modules were collected"
            for i in items
            if self.marks.get(i.nodeid, _marks(i)) != _marks(i)
        ]

    def collected(self, items: list[pytest.Item]) -> list[str]:
        """Hold the hooks registered since the start too (those held already are checked,
        never taken anew) and each test's marks; what changed so far."""
        changed = self.changed()
        for key, held in _hook_functions(self.config).items():
            self.hooks.setdefault(key, held)
        self.marks = {item.nodeid: _marks(item) for item in items}
        self.collecting_done = True
        return changed

    def changed(self) -> list[str]:
        """pytest's functions and the hooks' functions that are not what was held."""
        changed = [
            f"pytest's {name} replaced"
            for name, (held, code) in _internals().items()
            if held is not self.internals[name][0] or code != self.internals[name][1]
        ]
        now = _hook_functions(self.config)
        if self.collecting_done:  # every hook function there is is held
            changed += [f"{getattr(i, 'plugin_name', '?')}'s {h} added" for h, i in now.keys()
                        - self.hooks.keys()]  # fmt: skip
        for (hook, impl), (function, code) in self.hooks.items():
            plugin = getattr(impl, "plugin_name", "?")
            if (hook, impl) not in now:
                changed.append(f"{plugin}'s {hook} unregistered")
            elif now[(hook, impl)][0] is not function or now[(hook, impl)][1] != code:
                changed.append(f"{plugin}'s {hook} replaced")
        return changed

    def marks_changed(self, item: pytest.Item) -> str | None:
        """Whether the test's marks, before its first setup, are not those it had when
        collection ended (a mark added at run time: an xfail on a failing test)."""
        held = self.marks.pop(item.nodeid, None)
        if held is None or held == _marks(item):
            return None
        return f"{item.nodeid}: its marks changed after collection"

    def item_changed(self, item: pytest.Item) -> str | None:
        """Whether the test's function or a fixture's code is not what was collected."""
        held = self.items.get(item.nodeid)
        if held is None or held == _item_code(item):
            return None
        return f"{item.nodeid}: its function or a fixture's code replaced after collection"
