"""What the pytest witness holds still while tests run: pytest's own functions that run and report
a test, unittest.TestCase's (its asserts among them), the functions registered on the hooks a
test runs and is reported through, and each test's function and fixtures. Each is held as it was
when the witness started (a hook registered during collection: when collection ended; a test:
when it was collected), code included (a ``__code__`` can be swapped under the same object); a
change is named, for the witness to list as foreign."""

from __future__ import annotations

import contextlib
import importlib
import sys
import unittest
from pathlib import Path
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
    # rewrite a test module's asserts as it is imported, decide an expected failure
    ("_pytest.assertion.rewrite", "AssertionRewriter", "visit_Assert"),
    ("_pytest.assertion.rewrite", "AssertionRewritingHook", "exec_module"),
    ("_pytest.assertion.rewrite", "", "rewrite_asserts"),
    ("_pytest.skipping", "", "evaluate_xfail_marks"),
    ("_pytest.skipping", "", "evaluate_skip_marks"),
    # find a doctest file's examples
    ("_pytest.doctest", "DoctestTextfile", "collect"),
    ("doctest", "DocTestParser", "parse"),
    ("doctest", "DocTestParser", "get_doctest"),
    ("doctest", "DocTestParser", "get_examples"),
    ("builtins", "", "AssertionError"),
    # and call the hooks' functions
    ("pluggy._callers", "", "_multicall"),
    ("pluggy._hooks", "HookCaller", "__call__"),
    ("pluggy._hooks", "HookCaller", "get_hookimpls"),
    ("pluggy._manager", "PluginManager", "_hookexec"),
    ("_pytest.main", "Session", "gethookproxy"),
    ("_pytest.nodes", "Node", "ihook"),
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


# module, name, the module or class holding it, attribute, the object, its code
Held = tuple[str, str, Any, str, object, object]


def _testcase() -> list[tuple[str, str, str]]:
    """unittest.TestCase's own functions (its asserts, run, skipTest, ...): a unittest test
    decides and reports its outcome through them."""
    return [
        ("unittest.case", "TestCase", name)
        for name, value in vars(unittest.TestCase).items()
        if callable(value) or isinstance(value, classmethod | staticmethod)
    ]


def _internals() -> list[Held]:
    """Each of :data:`INTERNALS` and of unittest.TestCase's functions as its class or module
    holds it (a classmethod itself), with its code; Nones for one this pytest lacks. A class
    is held in its module too."""
    found: list[Held] = []
    for module, owner, attribute in (*INTERNALS, *_testcase()):
        top = module.partition(".")[0]
        whose = "pytest's" if top in ("_pytest", "pluggy", "builtins") else f"{top}'s"
        holder: Any = sys.modules.get(module) or importlib.import_module(module)
        if owner:
            cls = vars(holder).get(owner)
            held_class = (module, f"{whose} {module}.{owner}", holder, owner, cls, None)
            found += [held_class] if held_class not in found else []
            holder = cls
        held = vars(holder or {}).get(attribute)
        name = ".".join(filter(None, (owner or module, attribute)))
        found.append((module, f"{whose} {name}", holder, attribute, held, code_of(held)))
    return found


def _foreign_file(module: str, held: object, code: object) -> bool:
    """Whether what :data:`INTERNALS` holds for ``module`` is not its package's own: code
    from a file outside the package, or a builtin defined elsewhere (replaced before the
    witness started, by a conftest.py's import of the code under test, say)."""
    if module == "builtins":
        return getattr(held, "__module__", module) != module
    package = getattr(sys.modules.get(module.partition(".")[0]), "__file__", None)
    if code is None or package is None:
        return False
    filename = getattr(code, "co_filename", "")
    if filename == contextlib.__file__:  # a @contextmanager's (TestCase.subTest): its function
        wrapped = getattr(getattr(held, "__func__", held), "__wrapped__", None)
        return _foreign_file(module, wrapped, code_of(wrapped))
    return not _inside(filename, Path(package).parent)


def _inside(filename: str, folder: Path) -> bool:
    return Path(filename).resolve().is_relative_to(folder.resolve())


def _executor_foreign(manager: Any) -> bool:
    """Whether pluggy's hook executor is not pluggy's own (its tracing, --debug, is)."""
    pluggy = Path(sys.modules["pluggy"].__file__ or "").parent
    code = code_of(getattr(manager, "_inner_hookexec", None))
    return code is None or not _inside(getattr(code, "co_filename", ""), pluggy)


def tampered_before(config: pytest.Config) -> list[str]:
    """What was no longer pytest's and pluggy's own when the witness started: the snapshot the
    witness holds from then on cannot show it."""
    found = [
        f"{name} replaced before the witness started"
        for module, name, _, _, held, code in _internals()
        if _foreign_file(module, held, code)
    ]
    if _executor_foreign(config.pluginmanager):
        found.append("pluggy's hook executor replaced before the witness started")
    return found


Impls = dict[str, tuple[tuple[Any, object, object], ...]]  # hook -> (impl, function, code)


def _hook_functions(config: pytest.Config) -> Impls:
    """Each of :data:`RUN_HOOKS`' implementations with its function and that function's code."""
    found = {}
    for name in RUN_HOOKS:
        caller = getattr(config.hook, name, None)
        impls = caller.get_hookimpls() if caller is not None else ()
        found[name] = tuple((i, i.function, code_of(i.function)) for i in impls)
    return found


def _same(now: tuple[Any, ...], held: tuple[tuple[Any, object, object], ...]) -> bool:
    """Whether ``now`` (a hook's implementations) are those held, function and code alike."""
    return len(now) == len(held) and all(
        i is impl and i.function is function and code_of(i.function) is code
        for i, (impl, function, code) in zip(now, held, strict=True)
    )


def _hook_changes(hook: str, now: tuple[Any, ...], held: Any, added: bool) -> list[str]:
    """What changed among a hook's implementations: removed, replaced, and ``added`` ones."""
    current = {i: (i.function, code_of(i.function)) for i in now}
    changes = []
    for impl, function, code in held:
        if impl not in current:
            changes.append(f"{impl.plugin_name}'s {hook} unregistered")
        elif current[impl][0] is not function or current[impl][1] is not code:
            changes.append(f"{impl.plugin_name}'s {hook} replaced")
    then = {impl for impl, _, _ in held}
    return changes + [f"{i.plugin_name}'s {hook} added" for i in now if added and i not in then]


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


_SKIP_MARKS = ("skip", "skipif", "xfail")  # the marks that turn a failure into no failure


def _marks(item: pytest.Item) -> tuple[str, ...]:
    return tuple(m.name for m in item.iter_markers() if m.name in _SKIP_MARKS)


class RunIntegrity:
    """The witness's record of what must not change while tests run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.internals = _internals()
        self.hooks = _hook_functions(config)
        # what calls the hooks' functions: pytest's hook relay and pluggy's executor
        self.callers = (config.hook, getattr(config.pluginmanager, "_inner_hookexec", None))
        self.items: dict[str, tuple[object, ...]] = {}
        # each test's marks as collected, then as the selection of tests left them
        self.marks: dict[str, tuple[str, ...]] = {}
        self.session: pytest.Session | None = None  # once collection has ended

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

    def collected(self, session: pytest.Session) -> list[str]:
        """What changed during collection (a plugin added then is judged as it is registered),
        then hold the hooks as they are and each test's marks."""
        self.session = session
        changed = self.changed(added=False)
        self.hooks = _hook_functions(self.config)
        self.marks = {item.nodeid: _marks(item) for item in session.items}
        return changed

    def changed(self, added: bool = True) -> list[str]:
        """pytest's functions and the hooks' functions that are not what was held; ``added``:
        a hook function registered since collection ended is a change too (a process that
        collects nothing, pytest-xdist's controller, registers its own until the end)."""
        added = added and self.session is not None
        changed = [
            f"{name} replaced"
            for _, name, holder, attribute, held, code in self.internals
            if (now := vars(holder or {}).get(attribute)) is not held or code_of(now) is not code
        ]
        manager = self.config.pluginmanager
        if (self.config.hook, getattr(manager, "_inner_hookexec", None)) != self.callers:
            changed.append("pytest's hook relay or pluggy's hook executor replaced")
        if self.session is not None:
            changed.extend(filter(None, [self.session_changed(self.session)]))
        for hook, held in self.hooks.items():
            caller = getattr(self.config.hook, hook, None)
            now = tuple(caller.get_hookimpls()) if caller is not None else ()
            if not _same(now, held):
                changed += _hook_changes(hook, now, held, added)
        return changed

    def session_changed(self, session: pytest.Session) -> str | None:
        """Whether the session holds a hook relay of its own (an attribute over its class's
        ``gethookproxy``, through which each test's hooks are called)."""
        if "gethookproxy" in vars(session) or "ihook" in vars(session):
            return "pytest's Session.gethookproxy replaced on the session"
        return None

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
