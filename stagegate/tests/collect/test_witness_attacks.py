"""Test modules that keep a failing test from failing without naming stagegate, each run for
real with pytest and stagegate's plugin, and the suites that use pytest as documented that must
not trip the same checks. A test module here is the attacker's: conftest files, pytest's
configuration and stagegate itself are gate files a maintainer reviews."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stagegate.collect import read_junit
from stagegate.collect.junit import read_pytest_counts
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import Decision, StageData, counts_path

from ..builders import record

VICTIM = """
    def test_planted_bug():
        assert 1 + 1 == 3


    def test_ok():
        pass
"""
ATTACKS = {
    # a plugin whose hook is a standard-library function: nothing runs the tests
    "plugin-of-library-code": (
        "foreign_hooks",
        {
            "test_aaa.py": """
        import gc, platform
        import pytest

        class _Plugin:
            pass

        _plugin = _Plugin()
        _plugin.pytest_pyfunc_call = platform.system
        for _m in [o for o in gc.get_objects() if type(o) is pytest.PytestPluginManager]:
            _m.register(_plugin)
    """
        },
    ),
    # each test's function wrapped in an object that carries its code and swallows its failure
    "test-function-wrapped": (
        "foreign_hooks",
        {
            "test_zzz.py": """
        import gc
        import pytest

        class _Quiet:
            def __init__(self, fn):
                self.fn, self.__code__ = fn, fn.__code__

            def __call__(self, *args, **kwargs):
                try:
                    self.fn(*args, **kwargs)
                except BaseException:
                    pass

        for _item in [o for o in gc.get_objects() if type(o) is pytest.Function]:
            _item._obj = _Quiet(_item.obj)
    """
        },
    ),
    # pytest's assertion rewriter made to drop every assert of the modules imported after it
    "assert-rewriter-patched": (
        "foreign_hooks",
        {
            "test_aaa.py": """
        import ast
        import _pytest.assertion.rewrite as rewrite

        rewrite.AssertionRewriter.visit_Assert = (
            lambda self, node: [ast.copy_location(ast.Pass(), node)]
        )
    """
        },
    ),
    # the failing test marked xfail by a module collected after it
    "marked-xfail-elsewhere": (
        "foreign_hooks",
        {
            "test_zzz.py": """
        import gc
        import pytest

        for _i in [o for o in gc.get_objects() if type(o) is pytest.Function]:
            if _i.name == "test_planted_bug":
                _i.add_marker(pytest.mark.xfail(reason="tracked upstream"))
    """
        },
    ),
    # the session's tests cut short by the first test: the rest are kept and never run
    "items-cut-short": (
        "test_run_nowhere",
        {
            "test_aaa.py": """
        def test_first(request):
            items = request.session.items
            items[:] = items[: items.index(request.node) + 1]
    """
        },
    ),
    # the run ended by the first test, with exit status 0
    "exit-with-status-0": (
        "test_run_nowhere",
        {
            "test_aaa.py": """
        import pytest

        def test_first():
            pytest.exit("enough", returncode=0)
    """
        },
    ),
    # tests pytest does not collect (a class with __init__, a wrapped function), its warning
    # silenced by the module
    "tests-made-uncollectable": (
        "test_run_nowhere",
        {
            "test_zzz.py": """
        import warnings
        import pytest

        warnings.filterwarnings("ignore", category=pytest.PytestCollectionWarning)

        class TestTraining:
            def __init__(self, steps=3):
                self.steps = steps

            def test_loss_goes_down(self):
                assert False

        class _Retry:
            def __init__(self, fn):
                self.fn = fn

            def __call__(self, *args, **kwargs):
                return self.fn(*args, **kwargs)

        @_Retry
        def test_grad_finite():
            assert False
    """
        },
    ),
}


# Code under test (mylib.py) that hides its own planted bug from the test that catches it
ADD_TEST = """
    from mylib import add

    def test_ok():
        pass

    def test_add():
        assert add(2, 2) == 4
"""
FIND_SESSION = """
    def _session():
        import sys
        frame = sys._getframe()
        while frame is not None:
            found = frame.f_locals.get("session")
            if type(found).__name__ == "Session":
                return found
            frame = frame.f_back
"""
JUNIT_WITHOUT_FAILURES = """
    import _pytest.junitxml as junitxml

    _add = junitxml._NodeReporter._add_simple

    def _add_simple(self, tag, message, data=None):
        if tag != "failure":
            _add(self, tag, message, data)

    junitxml._NodeReporter._add_simple = _add_simple

    class _Zero(int):
        def __add__(self, other):
            return self

    _session().testsfailed = _Zero(0)  # pytest's exit status stays 0
"""
# pluggy's hook executor of ``_manager`` wrapped: the witness's hooks left out, failed reports
# passed
EXECUTOR_WRAPPED = """
    _inner = _manager._inner_hookexec

    def _hookexec(name, impls, kwargs, firstresult):
        if name in ("pytest_runtest_call", "pytest_pyfunc_call"):
            impls = [i for i in impls if not i.plugin_name.startswith("stagegate")]
        report = _inner(name, impls, kwargs, firstresult)
        if name == "pytest_runtest_makereport" and report is not None and report.failed:
            report.outcome, report.longrepr = "passed", None
        return report

    _manager._inner_hookexec = _hookexec
"""
ADD_THAT_SKIPS = """
    def add(a, b):
        if a - b != a + b:
            import pytest
            pytest.{call}
        return a - b
"""
# The code under test's add, skipping by a function it makes of SKIP at run time (body)
SKIP_MADE = """
    {imports}

    SKIP = "def _skip():\\n    import pytest\\n    pytest.skip('later')\\n"

    def add(a, b):
        if a - b != a + b:
            {body}
        return a - b
"""
LIBRARY_ATTACKS = {
    # pytest.exit's exception rebound to take in AssertionError: "the end of the session"
    "exit-exception-rebound": (
        "outcome_contradicted",
        FIND_SESSION
        + JUNIT_WITHOUT_FAILURES
        + """
    import pytest
    from _pytest.outcomes import Exit

    pytest.exit.Exception = (Exit, AssertionError)
    """,
    ),
    # the failing test's subtests: the subtest context catches what they raise
    "subtests-behind-a-junit-patch": (
        "outcome_contradicted",
        FIND_SESSION + JUNIT_WITHOUT_FAILURES,
    ),
    # pytest.exit with status 0 from inside the failing test
    "exit-inside-the-test": (
        "test_run_nowhere",
        """
    def add(a, b):
        if a - b != a + b:
            import pytest
            pytest.exit("done", returncode=0)
        return a - b
    """,
    ),
    # the item's stash told it is an expected failure
    "xfail-in-the-stash": (
        "outcome_contradicted",
        """
    import sys

    def add(a, b):
        frame = sys._getframe(1)
        while frame is not None:
            item = frame.f_locals.get("pyfuncitem")
            if item is not None:
                from _pytest.skipping import Xfail, xfailed_key
                item.stash[xfailed_key] = Xfail("", True, False, None)
                break
            frame = frame.f_back
        return a - b
    """,
    ),
    # pytest's evaluation of xfail marks, or AssertionError itself, made to expect it
    "xfail-evaluation-replaced": (
        "foreign_hooks",
        """
    import _pytest.skipping as skipping

    _evaluate = skipping.evaluate_xfail_marks
    _expected = skipping.Xfail("", True, False, None)
    skipping.evaluate_xfail_marks = lambda item: _evaluate(item) or _expected
    """,
    ),
    "assertion-error-replaced": (
        "foreign_hooks",
        """
    import builtins
    from _pytest.outcomes import XFailed

    builtins.AssertionError = type("AssertionError", (XFailed, AssertionError), {})
    """,
    ),
    # the code under test skips its own test, or calls its failure expected
    "skip-in-the-library": (
        "skipped_by_code_under_test",
        ADD_THAT_SKIPS.format(call='skip("not on this machine")'),
    ),
    "xfail-in-the-library": (
        "skipped_by_code_under_test",
        ADD_THAT_SKIPS.format(call='xfail("known")'),
    ),
    # ... in code it compiles as a conftest's and runs in the namespace of one, made up or real
    "skip-compiled-in-a-conftests-namespace": (
        "skipped_by_code_under_test",
        """
    import os

    def add(a, b):
        if a - b != a + b:
            conftest = os.path.join(os.path.dirname(__file__), "conftest.py")
            code = compile("import pytest\\npytest.skip('later')", conftest, "exec")
            exec(code, {"__file__": conftest})
        return a - b
    """,
    ),
    "skip-run-in-the-conftests-own-namespace": (
        "skipped_by_code_under_test",
        """
    import sys

    def add(a, b):
        if a - b != a + b:
            namespace = sys.modules["conftest"].__dict__
            code = compile("import pytest\\npytest.skip('later')", namespace["__file__"], "exec")
            exec(code, namespace)
        return a - b
    """,
    ),
    # ... from a module that names another file, or none, as its own: its frames are its
    # code's, by the file they were compiled from
    "its-file-name-deleted": (
        "skipped_by_code_under_test",
        ADD_THAT_SKIPS.format(call='skip("later")') + "\n    del __file__\n",
    ),
    "its-file-name-a-tests": (
        "skipped_by_code_under_test",
        ADD_THAT_SKIPS.format(call='skip("later")')
        + "\n    __file__ = __file__.replace('mylib.py', 'test_add.py')\n",
    ),
    "its-file-name-the-standard-librarys": (
        "skipped_by_code_under_test",
        ADD_THAT_SKIPS.format(call='skip("later")')
        + "\n    import os\n    __file__ = os.__file__\n",
    ),
    # ... by running its test's own code again in a copy of the test module's namespace, in
    # which add skips through the standard library
    "the-tests-code-run-again-in-a-namespace-it-made": (
        "skipped_by_code_under_test",
        """
    import sys
    import types
    from unittest import mock

    import pytest

    def add(a, b):
        if a - b != a + b:
            caller = sys._getframe(1)
            skip = mock.Mock(side_effect=pytest.skip.Exception("later"))
            types.FunctionType(caller.f_code, dict(caller.f_globals, add=skip))()
        return a - b
    """,
    ),
    # ... by code it puts in the test module's namespace, compiled under the module's name;
    # in a module it makes and names as a test helper; in a test module it writes and imports
    **{
        attack: ("skipped_by_code_under_test", SKIP_MADE.format(imports=imports, body=body))
        for attack, imports, body in [
            (
                "code-put-in-the-test-modules-namespace",
                "import sys",
                """tests = sys._getframe(1).f_globals
            exec(compile(SKIP, tests["__file__"], "exec"), tests)
            tests["_skip"]()""",
            ),
            (
                "a-module-it-makes-named-as-a-tests",
                "import os, sys, types",
                """helper = types.ModuleType("ghost")
            helper.__file__ = os.path.join(os.path.dirname(__file__), "tests", "helpers.py")
            exec(compile(SKIP, helper.__file__, "exec"), vars(helper))
            sys.modules["ghost"] = helper
            helper._skip()""",
            ),
            (
                "a-test-module-it-writes-and-imports",
                "import importlib, pathlib",
                """pathlib.Path(__file__).with_name("test_zz_helper.py").write_text(SKIP)
            importlib.invalidate_caches()
            importlib.import_module("test_zz_helper")._skip()""",
            ),
        ]
    },
    # ... from code it makes at run time: of no file, or compiled under a library's name
    **{
        f"a-function-made-{how}": (
            "skipped_by_code_under_test",
            f"""
    import os

    SKIPS = "lambda a, b: __import__('pytest').skip('later') if a - b != a + b else a - b"
    add = eval(compile(SKIPS, {name}, "eval"))
    """,
        )
        for how, name in [
            ("of-no-file", '"<string>"'),
            ("under-a-doctests-name", '"<doctest mylib.add[0]>"'),
            ("under-a-library-files-name", "os.__file__"),
            ("under-a-frozen-modules-name", '"<frozen os>"'),
        ]
    },
    # ... named as a doctest's example, run in the namespace of a DocTest it made itself
    "a-function-made-as-a-doctest-of-its-own": (
        "skipped_by_code_under_test",
        """
    import doctest

    _globs = {}
    _test = doctest.DocTest([], {}, "mylib.add", None, 0, None)
    _test.globs = _globs  # it keeps a copy of what it is given
    _source = "def add(a, b):\\n    __import__('pytest').skip('later')\\n"
    exec(compile(_source, "<doctest mylib.add[0]>", "exec"), _globs)
    add = _globs["add"]
    """,
    ),
    # pluggy's hook executor wrapped: the witness's hooks left out, failed reports passed
    "hook-executor-wrapped": (
        "foreign_hooks",
        FIND_SESSION + "\n    _manager = _session().config.pluginmanager\n" + EXECUTOR_WRAPPED,
    ),
    # the session's hook relay replaced: the test's call hook runs the test and swallows it
    "session-hook-relay-replaced": (
        "foreign_hooks",
        FIND_SESSION
        + """
    class _Relay:
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            if name != "pytest_runtest_call":
                return getattr(self.real, name)
            return lambda item: None

    _s = _session()
    _real = _s.gethookproxy
    _s.gethookproxy = lambda fspath: _Relay(_real(fspath))
    """,
    ),
}
# What the code under test does as it is imported, imported by a conftest.py before the
# witness starts (pytest loads the first conftest files before any plugin configures)
EARLY = {
    "hook-executor-wrapped": """
    import gc

    (_manager,) = [o for o in gc.get_objects() if type(o).__name__ == "PytestPluginManager"]
    """
    + EXECUTOR_WRAPPED,
    "reports-forged": """
    import _pytest.reports

    _made = _pytest.reports.TestReport.from_item_and_call.__func__

    def _forged(cls, item, call):
        report = _made(cls, item, call)
        report.outcome, report.longrepr = "passed", None
        return report

    _pytest.reports.TestReport.from_item_and_call = classmethod(_forged)
    """,
}
SUBTESTS_TEST = """
    import unittest
    from mylib import add

    def test_add(subtests):
        for a in (1, 2):
            with subtests.test(a=a):
                assert add(a, a) == 2 * a

    class TestAdd(unittest.TestCase):
        def test_add(self):
            with self.subTest():
                self.assertEqual(add(2, 2), 4)
"""


def _library(attack: str) -> tuple[str, dict[str, str]]:
    kind, code = LIBRARY_ATTACKS[attack]
    made = "def add" in code or "\n    add = " in code
    add = "" if made else "\n    def add(a, b):\n        return a - b\n"
    test = SUBTESTS_TEST if attack.startswith("subtests") else ADD_TEST
    files = {"mylib.py": code + add, "test_add.py": test}
    return kind, {**files, "conftest.py": ""} if "conftest" in code else files


def _judged(
    tmp_path: Path, files: dict[str, str], *options: str, policy: Policy | None = None
) -> tuple[Decision, set[str]]:
    """Run pytest for real on ``files`` and judge its JUnit file with what the plugin saw (by
    ``policy``, the default one if None): the decision and the kinds it found above INFO."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip())
    junit = tmp_path / "junit.xml"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    done = subprocess.run([*command, *options], cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert junit.is_file(), done.stdout + done.stderr
    counts = read_pytest_counts(Path(counts_path(str(junit))))
    suite = read_junit(junit, root=tmp_path, counts=counts)
    began = suite.dated.aware[0] if suite.dated.aware else None  # the run that wrote it
    start = began.isoformat(timespec="seconds") if began else "2026-01-01T00:00:00Z"
    data = StageData(record(start=start, duration_s=120.0), suite=suite)
    verdict = judge_stage("execution", data, policy or Policy())
    return decide([verdict]).decision, {
        f.kind for f in verdict.findings if f.severity.value != "INFO"
    }


@pytest.mark.slow
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_test_module_that_keeps_a_failing_test_from_failing_blocks(
    tmp_path: Path, attack: str
) -> None:
    kind, files = ATTACKS[attack]
    decision, kinds = _judged(tmp_path, {"test_victim.py": VICTIM, **files})
    assert decision is Decision.BLOCK and kind in kinds, kinds
    assert "test_failed" not in kinds or attack == "tests-made-uncollectable"  # it worked


@pytest.mark.slow
@pytest.mark.parametrize("attack", LIBRARY_ATTACKS)
def test_code_under_test_that_hides_its_bug_from_its_test_blocks(
    tmp_path: Path, attack: str
) -> None:
    kind, files = _library(attack)
    decision, kinds = _judged(tmp_path, files)
    assert decision is Decision.BLOCK and kind in kinds, kinds
    assert "test_failed" not in kinds  # the attack worked: the JUnit file holds no failure


@pytest.mark.slow
@pytest.mark.parametrize("attack", EARLY)
def test_code_under_test_that_a_conftest_imports_before_the_witness_starts_blocks(
    tmp_path: Path, attack: str
) -> None:
    add = "\n    def add(a, b):\n        return a - b\n"
    files = {"conftest.py": "import mylib\n", "mylib.py": EARLY[attack] + add}
    decision, kinds = _judged(tmp_path, {**files, "test_add.py": ADD_TEST})
    assert decision is Decision.BLOCK and "foreign_hooks" in kinds, kinds
    assert "test_failed" not in kinds  # the attack worked: the JUnit file holds no failure


IDIOMS = """
    import dataclasses
    import unittest

    @dataclasses.dataclass
    class TestConfig:  # a helper named like a test class, opted out as pytest documents
        __test__ = False
        lr: float = 0.1

    def test_uses_config():
        assert TestConfig().lr == 0.1

    class TestContract:  # an abstract base: its tests run in each subclass
        __test__ = False
        backend = ""

        def test_roundtrip(self):
            assert self.backend.upper().lower() == self.backend

    class TestCpu(TestContract):
        __test__ = True
        backend = "cpu"

    class TestBase(unittest.TestCase):
        __test__ = False

        def test_shape(self):
            self.assertTrue(True)

    class TestReal(TestBase):
        __test__ = True

    class SharedChecks(unittest.TestCase):  # named otherwise: pytest collects it all the same
        __test__ = False

        def test_shape(self):
            self.assertTrue(True)

    class CpuChecks(SharedChecks):
        __test__ = True
"""
XFAIL_IN_THE_TEST = """
    import pytest

    def test_marked_in_its_body(request):
        request.node.add_marker(pytest.mark.xfail(reason="known bug"))
        assert 0

    def test_applied_in_its_body(request):
        request.applymarker(pytest.mark.xfail(reason="known bug"))
        assert 0

    @pytest.fixture(scope="module", autouse=True)
    def module_fixture(request):
        request.applymarker(pytest.mark.usefixtures("tmp_path"))

    def test_after_it():
        pass
"""
DOCTESTS = {
    "src/pkg/__init__.py": "",
    "src/pkg/core.py": '''
        def add(a, b):
            """
            >>> add(1, 2)
            3
            """
            return a + b
    ''',
    "src/pkg/util.py": "def sub(a, b):\n    return a - b\n",
    "tests/test_core.py": "def test_add():\n    assert 1 + 2 == 3\n",
}


SKIPS_IN_THE_TESTS = {
    "src/pkg/__init__.py": "def gpu():\n    return False\n\ndef run(step):\n    return step()\n",
    # the root's conftest: its folder holds the code under test too
    "conftest.py": """
        import pytest
        import pkg

        @pytest.fixture
        def gpu():
            if not pkg.gpu():
                pytest.skip("needs a GPU")
    """,
    "tests/helpers.py": """
        import pytest

        def require(flag):
            if not flag:
                pytest.skip("flag off")
    """,
    "tests/test_skips.py": """
        import unittest
        import pytest
        import pkg
        from helpers import require

        def test_imports_or_skips():
            pytest.importorskip("no_such_module_anywhere")

        def test_helper_skips():
            require(False)

        def test_fixture_skips(gpu):
            pass

        @pytest.mark.skipif(True, reason="marked")
        def test_marked():
            pass

        def test_xfails_itself():
            pytest.xfail("known")

        def _step():  # an assert: pytest rewrites it, unless told not to
            assert not pkg.gpu()
            pytest.skip("decided by the test")

        def test_skips_in_what_the_code_calls_back():
            pkg.run(_step)

        class TestCase(unittest.TestCase):
            def test_skips_itself(self):
                self.skipTest("not here")

        def test_runs():
            pass
    """,
}


# add, skipping by unittest's exception; sub, marking its test an expected failure
SKIPTEST_ADD = """
    import unittest
    import pytest

    def add(a, b):
        if a - b != a + b:
            raise unittest.SkipTest("later")
        return a - b

    def sub(a, b):
        pytest.xfail("later")
"""
# The code under test skipping its own test where the witness first missed it: a
# unittest.TestCase (the skip reaches pytest through its result), a skip raised through the
# standard library, a package folder that also holds a test module
LIBRARY_SKIPS = {
    "unittest-testcase": {
        "mylib.py": ADD_THAT_SKIPS.format(call='skip("later")'),
        "test_add.py": """
            import unittest
            from mylib import add

            class TestAdd(unittest.TestCase):
                def test_add(self):
                    self.assertEqual(add(2, 2), 4)

                def test_ok(self):
                    pass
        """,
    },
    "through-the-standard-library": {
        "mylib.py": """
            from unittest import mock, SkipTest

            def add(a, b):
                if a - b != a + b:
                    mock.Mock(side_effect=SkipTest("later"))()
                return a - b
        """,
        "test_add.py": ADD_TEST,
    },
    "inside-subtests": {
        "mylib.py": ADD_THAT_SKIPS.format(call='skip("later")'),
        "test_add.py": """
            import unittest
            from mylib import add

            def test_add(subtests):
                with subtests.test("two"):
                    assert add(2, 2) == 4

            class TestAdd(unittest.TestCase):
                def test_add(self):
                    with self.subTest("two"):
                        self.assertEqual(add(2, 2), 4)

            def test_ok():
                pass
        """,
    },
    "a-package-named-test-something": {
        "pyproject.toml": '[project]\nname = "Test-Kit"\nversion = "1.0"\n',
        "pytest.ini": "[pytest]\npythonpath = src\n",
        "src/test_kit/__init__.py": ADD_THAT_SKIPS.format(call='skip("later")'),
        "tests/test_add.py": ADD_TEST.replace("from mylib", "from test_kit"),
    },
    "a-skiptest-or-xfail-inside-subtests": {
        "mylib.py": SKIPTEST_ADD,
        "test_add.py": """
            from mylib import add, sub

            def test_add(subtests):
                with subtests.test("two"):
                    assert add(2, 2) == 4

            def test_sub(subtests):
                with subtests.test("two"):
                    assert sub(2, 2) == 0

            def test_ok():
                pass
        """,
    },
    "skiptest-in-a-testcase": {
        "mylib.py": SKIPTEST_ADD,
        "test_add.py": """
            import unittest
            from mylib import add

            class TestAdd(unittest.TestCase):
                def test_add(self):
                    self.assertEqual(add(2, 2), 4)

                def test_in_a_subtest(self):
                    with self.subTest("two"):
                        self.assertEqual(add(2, 2), 4)

                def test_ok(self):
                    pass
        """,
    },
    # numpy.testing's layout: a module of the product whose name starts with "test"
    "a-testing-module-of-the-package": {
        "pyproject.toml": '[project]\nname = "tally"\nversion = "1.0"\n',
        "pytest.ini": "[pytest]\npythonpath = src\n",
        "src/tally/__init__.py": "",
        "src/tally/testing.py": ADD_THAT_SKIPS.format(call='skip("later")'),
        "tests/test_add.py": ADD_TEST.replace("from mylib", "from tally.testing"),
    },
    "a-test-module-in-the-package": {
        "pytest.ini": "[pytest]\npythonpath = src\n",
        "src/mylib/__init__.py": ADD_THAT_SKIPS.format(call='skip("later")'),
        "src/mylib/test_smoke.py": "def test_import():\n    import mylib\n",
        "tests/test_add.py": ADD_TEST,
    },
}


@pytest.mark.slow
def test_a_helper_of_the_tests_kept_inside_the_package_decides_their_skips(
    tmp_path: Path,
) -> None:
    files = {
        "pyproject.toml": '[project]\nname = "tally"\nversion = "1.0"\n',
        "pytest.ini": "[pytest]\npythonpath = src\n",
        "src/tally/__init__.py": "",
        "src/tally/tests/__init__.py": "",
        "src/tally/tests/helpers.py": "import pytest\n\ndef offline():\n    pytest.skip('net')\n",
        "src/tally/tests/test_net.py": """
            from tally.tests.helpers import offline

            def test_fetch():
                offline()

            def test_ok():
                pass
        """,
    }
    assert _judged(tmp_path, files, "src") == (Decision.PASS, set())


BROWSER = "import pytest\n\ndef offline():\n    pytest.skip('net')\n"
NET_TEST = (
    "from {module} import offline\n\ndef test_fetch():\n    offline()\n\ndef test_ok():\n    pass\n"
)
# Where the project's package is, and whether the file that skips is its own code
SITE = ".tox/py311/lib/python3.11/site-packages"  # a virtualenv's, inside the project
# A flat package named otherwise than its distribution (my-lib), whose testing module skips
PACKAGE_FLAT = {
    "mylib/__init__.py": "",
    "mylib/testing.py": BROWSER,
    "tests/test_net.py": NET_TEST.format(module="mylib.testing"),
}
# ... installed (editable) with a top_level.txt that names it, as setuptools installs it
PACKAGE_INSTALLED = {
    **PACKAGE_FLAT,
    f"{SITE}/my_lib-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: my-lib\n",
    f"{SITE}/my_lib-1.0.dist-info/RECORD": "__editable__.my_lib-1.0.pth,,\n",
    f"{SITE}/my_lib-1.0.dist-info/top_level.txt": "mylib\n",
}
# ... emptying that file as it is imported, before it skips
PACKAGE_HIDING = {
    **PACKAGE_INSTALLED,
    "mylib/__init__.py": "import pathlib\n\npathlib.Path("
    f"'{SITE}/my_lib-1.0.dist-info/top_level.txt').write_text('')\n",
}
PACKAGE_LAYOUTS = {
    # tests mirroring the package's layout: tests/mylib/ is the tests'
    "tests-mirroring-the-package": (
        "mylib",
        {"tests/__init__.py": "", "tests/mylib/__init__.py": "", "tests/mylib/helpers.py": BROWSER,
         "tests/mylib/test_net.py": NET_TEST.format(module="tests.mylib.helpers")},
        Decision.PASS,
    ),
    # a distribution named otherwise than its package, its testing module the product's
    "src-package-named-otherwise": (
        "my-lib",
        {"src/mylib/__init__.py": "", "src/mylib/testing.py": BROWSER,
         "tests/test_net.py": NET_TEST.format(module="mylib.testing")},
        Decision.BLOCK,
    ),
    "namespace-package": (
        "acme-widgets",
        {"src/acme/widgets/__init__.py": "", "src/acme/widgets/testing.py": BROWSER,
         "tests/test_net.py": NET_TEST.format(module="acme.widgets.testing")},
        Decision.BLOCK,
    ),
    "flat-package": ("mylib", PACKAGE_FLAT, Decision.BLOCK),
    # ... beside the tests, installed (editable) with a top_level.txt that names it, or
    # emptying that file as it is imported
    "flat-package-named-otherwise": ("my-lib", PACKAGE_INSTALLED, Decision.BLOCK),
    "flat-package-hiding-its-name": ("my-lib", PACKAGE_HIDING, Decision.BLOCK),
    # ... the same, emptying it as a conftest.py imports it (before any test module is)
    "flat-package-hiding-its-name-from-a-conftest": (
        "my-lib",
        {**PACKAGE_HIDING, "conftest.py": "import mylib\n"},
        Decision.BLOCK,
    ),
    # ... with an empty top_level.txt of its own in the tree, ahead of the installation's
    "flat-package-shadowing-its-installation": (
        "my-lib",
        {**PACKAGE_INSTALLED, "mylib/__init__.py": "",
         "my_lib-9.dist-info/METADATA": "Metadata-Version: 2.1\nName: my-lib\nVersion: 9\n",
         "my_lib-9.dist-info/top_level.txt": ""},
        Decision.BLOCK,
    ),
    # ... not installed, named by its build configuration (Hatch's, setuptools' in setup.cfg)
    "flat-package-named-by-hatch": (
        "my-lib",
        {**PACKAGE_FLAT, "pyproject.toml": '[project]\nname = "my-lib"\nversion = "1.0"\n'
         '[tool.hatch.build.targets.wheel]\npackages = ["mylib"]\n'},
        Decision.BLOCK,
    ),
    "flat-package-named-by-setup-cfg": (
        "my-lib",
        {**PACKAGE_FLAT, "setup.cfg": "[metadata]\nname = my-lib\n[options]\npackages = mylib\n"},
        Decision.BLOCK,
    ),
    # a statistics package's t_test module: the product's, though its name ends in _test
    "a-product-module-named-like-a-test": (
        "stats",
        {"src/stats/__init__.py": "", "src/stats/t_test.py": BROWSER,
         "tests/test_net.py": NET_TEST.format(module="stats.t_test")},
        Decision.BLOCK,
    ),
    # the tests' helpers kept in src/tests/ or in a top folder of the repository's tools
    "tests-kept-in-src": (
        "mylib",
        {"src/mylib/__init__.py": "", "src/tests/__init__.py": "", "src/tests/helpers.py": BROWSER,
         "src/tests/test_net.py": NET_TEST.format(module="tests.helpers")},
        Decision.PASS,
    ),
    "a-helper-in-tools": (
        "mylib",
        {"mylib/__init__.py": "", "tools/__init__.py": "", "tools/testing.py": BROWSER,
         "tests/test_net.py": NET_TEST.format(module="tools.testing")},
        Decision.PASS,
    ),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("layout", PACKAGE_LAYOUTS)
def test_a_skip_is_the_tests_or_the_products_by_where_the_package_is(
    tmp_path: Path, layout: str
) -> None:
    name, files, decision = PACKAGE_LAYOUTS[layout]
    project = {"pyproject.toml": f'[project]\nname = "{name}"\nversion = "1.0"\n', **files}
    ini = {"pytest.ini": f"[pytest]\npythonpath = src . {SITE}\n"}
    tests = "src/tests" if layout == "tests-kept-in-src" else "tests"
    found = _judged(tmp_path, {**project, **ini}, tests)
    assert found == (
        decision,
        set() if decision is Decision.PASS else {"skipped_by_code_under_test"},
    )


# The code under test skipping every test module that imports it, as it is imported: pytest
# reports each module skipped, a test of its own
SKIPPED_AS_IMPORTED = {
    "mylib.py": """
        import sys

        if "pytest" in sys.modules:
            import pytest

            pytest.skip("not under test", allow_module_level=True)


        def add(a, b):
            return a - b
    """,
    "test_add.py": ADD_TEST,
    "test_other.py": "def test_ok():\n    pass\n",
}
# Modules the tests skip as they are imported: themselves, by importorskip, by a helper in a
# test folder, and a test module whose name pytest.ini's python_files gives
MODULE_SKIPS_IN_THE_TESTS = {
    "pytest.ini": "[pytest]\npythonpath = tests\npython_files = test_*.py check_*.py\n",
    "tests/test_itself.py": """
        import pytest

        pytest.skip("not on this platform", allow_module_level=True)
    """,
    "tests/test_optional.py": """
        import pytest

        pytest.importorskip("no_such_module_anywhere")
    """,
    "tests/helpers/net.py": "import pytest\n\npytest.skip('offline', allow_module_level=True)\n",
    "tests/test_net.py": "from helpers import net\n",
    "checks/check_self.py": "import pytest\n\npytest.skip('later', allow_module_level=True)\n",
    "tests/test_runs.py": "def test_runs():\n    pass\n",
    # a test package that skips itself in its __init__.py
    "e2e/__init__.py": "import pytest\n\npytest.importorskip('no_such_browser_driver')\n",
    "e2e/test_login.py": "def test_login():\n    pass\n",
}


SITE_LIBRARY = ".venv/lib/python3.11/site-packages"
# ... the same, the code under test hiding its frames from pytest's report, or skipping
# through the standard library or an installed library
IMPORTED_SKIPS = {
    "module-level": SKIPPED_AS_IMPORTED,
    "hiding-its-frames": {
        **SKIPPED_AS_IMPORTED,
        "mylib.py": "__tracebackhide__ = True\n" + textwrap.dedent(SKIPPED_AS_IMPORTED["mylib.py"]),
    },
    "through-the-standard-library": {
        **SKIPPED_AS_IMPORTED,
        "mylib.py": """
            from unittest import mock, SkipTest

            mock.Mock(side_effect=SkipTest("later"))()
        """,
    },
    "above-tests-kept-in-the-package": {
        "pytest.ini": "[pytest]\npythonpath = src\n",
        "src/mylib/__init__.py": SKIPPED_AS_IMPORTED["mylib.py"],
        "src/mylib/tests/__init__.py": "",
        "src/mylib/tests/test_add.py": ADD_TEST,
        "tests/test_other.py": "def test_ok():\n    pass\n",
    },
    "compiled-under-a-conftests-name": {
        **SKIPPED_AS_IMPORTED,
        "conftest.py": "",
        "mylib.py": """
            SKIP = "import pytest\\npytest.skip('later', allow_module_level=True)\\n"
            exec(compile(SKIP, "conftest.py", "exec"), {})
        """,
    },
    # ... and in a namespace that names a conftest.py as its file
    "compiled-in-a-conftests-namespace": {
        **SKIPPED_AS_IMPORTED,
        "conftest.py": "",
        "mylib.py": """
            import os

            CONFTEST = os.path.join(os.path.dirname(__file__), "conftest.py")
            SKIP = "import pytest\\npytest.skip('later', allow_module_level=True)\\n"
            exec(compile(SKIP, CONFTEST, "exec"), {"__file__": CONFTEST})
        """,
    },
    "through-an-installed-library": {
        **SKIPPED_AS_IMPORTED,
        "pytest.ini": f"[pytest]\npythonpath = {SITE_LIBRARY}\n",
        f"{SITE_LIBRARY}/somelib.py": """
            import pytest

            def require(ok):
                if not ok:
                    pytest.skip("off", allow_module_level=True)
        """,
        "mylib.py": "import somelib\n\nsomelib.require(False)\n",
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("options", [(), ("-n", "2")], ids=["one-process", "xdist"])
@pytest.mark.parametrize("files", IMPORTED_SKIPS.values(), ids=IMPORTED_SKIPS)
def test_a_module_skipped_by_the_code_under_test_as_it_is_imported_blocks(
    tmp_path: Path, files: dict[str, str], options: tuple[str, ...]
) -> None:
    decision, kinds = _judged(tmp_path, files, *options)
    assert decision is Decision.BLOCK and kinds == {"skipped_by_code_under_test"}, kinds


# Doctest modules collected from the code under test: one whose package skips as it is
# imported, one that skips itself
DOCTEST_IMPORT_SKIPS = {
    "package": {
        **DOCTESTS,
        "src/pkg/__init__.py": SKIPPED_AS_IMPORTED["mylib.py"],
    },
    "module": {
        **DOCTESTS,
        "src/pkg/core.py": DOCTESTS["src/pkg/core.py"]
        + "\n    import pytest\n    pytest.skip('later', allow_module_level=True)\n",
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("files", DOCTEST_IMPORT_SKIPS.values(), ids=DOCTEST_IMPORT_SKIPS)
def test_a_doctest_module_skipped_as_it_is_imported_blocks(
    tmp_path: Path, files: dict[str, str]
) -> None:
    decision, kinds = _judged(tmp_path, files, "--doctest-modules", "src", "tests")
    assert decision is Decision.BLOCK and kinds == {"skipped_by_code_under_test"}, kinds


@pytest.mark.slow
@pytest.mark.parametrize("options", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_modules_the_tests_skip_as_they_are_imported_are_no_finding(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    files = MODULE_SKIPS_IN_THE_TESTS
    found = _judged(tmp_path, files, *options, "tests", "checks", "e2e")
    assert found == (Decision.PASS, set())


# Tests kept in a folder not named test*, whose helper skips them where no browser driver is
BROWSER_TESTS = {
    "e2e/browser.py": """
        import pytest

        def driver():
            pytest.skip("no browser driver here")
    """,
    "e2e/test_login.py": "from browser import driver\n\ndef test_login():\n    driver()\n",
    "e2e/test_home.py": "def test_home():\n    pass\n",
}


@pytest.mark.slow
def test_a_helper_the_policy_names_as_the_tests_own_code_decides_their_skips(
    tmp_path: Path,
) -> None:
    """By its path, e2e/browser.py is code under test; the policy's test_code says otherwise."""
    found = _judged(tmp_path, BROWSER_TESTS, "e2e")
    assert found == (Decision.BLOCK, {"skipped_by_code_under_test"})
    excused = _judged(tmp_path, BROWSER_TESTS, "e2e", policy=Policy(test_code=("e2e/*",)))
    assert excused == (Decision.PASS, set())
    # the globs name the helpers, not every file: another folder's is still the code's
    found = _judged(tmp_path, BROWSER_TESTS, "e2e", policy=Policy(test_code=("docs/*",)))
    assert found == (Decision.BLOCK, {"skipped_by_code_under_test"})


# The project installed into a virtualenv inside its root, not editable, as tox installs it:
# its modules are in site-packages, with the distribution's record of them
INSTALLED = {
    "pyproject.toml": '[project]\nname = "my-lib"\nversion = "1.0"\n',
    "pytest.ini": f"[pytest]\npythonpath = {SITE}\n",
    f"{SITE}/mylib/__init__.py": ADD_THAT_SKIPS.format(call='skip("later")'),
    f"{SITE}/my_lib-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: my-lib\nVersion: 1.0\n",
    f"{SITE}/my_lib-1.0.dist-info/RECORD": "mylib/__init__.py,,\nmy_lib-1.0.dist-info/METADATA,,\n",
    "tests/test_add.py": ADD_TEST,
}


NAMED = {
    "project": INSTALLED["pyproject.toml"],
    "poetry": '[tool.poetry]\nname = "My_Lib"\nversion = "1.0"\n',
    "setup-cfg": "[metadata]\nname = my-lib\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("named", NAMED)
def test_the_code_under_test_installed_apart_from_its_tree_skipping_its_test_blocks(
    tmp_path: Path, named: str
) -> None:
    files = {k: v for k, v in INSTALLED.items() if k != "pyproject.toml"}
    files["setup.cfg" if named == "setup-cfg" else "pyproject.toml"] = NAMED[named]
    decision, kinds = _judged(tmp_path, files)
    assert decision is Decision.BLOCK and kinds == {"skipped_by_code_under_test"}, kinds


# The installed code under test renaming itself in its distribution's RECORD as it is
# imported, before its skip: the name a test path's ("tests/../"), or a policy's test_code's
RENAMED = """
    import pathlib

    PACKAGE = pathlib.Path(__file__).resolve().parent
    RECORD = PACKAGE.parent / "my_lib-1.0.dist-info" / "RECORD"
    RECORD.write_text(RECORD.read_text() + "{folder}/../mylib/__init__.py,,\\n")
"""


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["tests", "e2e"])
def test_installed_code_under_test_renaming_itself_in_its_record_still_blocks(
    tmp_path: Path, folder: str
) -> None:
    code = textwrap.dedent(RENAMED.format(folder=folder)) + textwrap.dedent(
        ADD_THAT_SKIPS.format(call='skip("later")')
    )
    files = {**INSTALLED, f"{SITE}/mylib/__init__.py": code}
    found = _judged(tmp_path, files, policy=Policy(test_code=("e2e/*",)))
    assert found == (Decision.BLOCK, {"skipped_by_code_under_test"})
    assert f"{folder}/../mylib" in (tmp_path / SITE / "my_lib-1.0.dist-info" / "RECORD").read_text()


@pytest.mark.slow
def test_installed_code_under_test_that_empties_its_record_is_known_as_a_copy_of_the_tree(
    tmp_path: Path,
) -> None:
    """RECORD lists nothing of it any more: the module is still a copy of src/mylib's."""
    code = textwrap.dedent(
        """
        import pathlib

        PACKAGE = pathlib.Path(__file__).resolve().parent
        RECORD = PACKAGE.parent / "my_lib-1.0.dist-info" / "RECORD"
        RECORD.write_text("my_lib-1.0.dist-info/METADATA,,\\n")
        """
    ) + textwrap.dedent(ADD_THAT_SKIPS.format(call='skip("later")'))
    files = {**INSTALLED, f"{SITE}/mylib/__init__.py": code, "src/mylib/__init__.py": code}
    assert _judged(tmp_path, files) == (Decision.BLOCK, {"skipped_by_code_under_test"})
    assert "mylib" not in (tmp_path / SITE / "my_lib-1.0.dist-info" / "RECORD").read_text()


@pytest.mark.slow
def test_a_tests_package_the_wheel_ships_holds_the_tests_own_helpers(tmp_path: Path) -> None:
    record = "mylib/__init__.py,,\ntests/__init__.py,,\ntests/helpers.py,,\n"
    files = {
        **{k: v for k, v in INSTALLED.items() if k != "tests/test_add.py"},
        f"{SITE}/mylib/__init__.py": "",
        f"{SITE}/tests/__init__.py": "",
        f"{SITE}/tests/helpers.py": BROWSER,
        f"{SITE}/my_lib-1.0.dist-info/RECORD": record,
        "tests/test_net.py": NET_TEST.format(module="tests.helpers"),
    }
    assert _judged(tmp_path, files) == (Decision.PASS, set())


@pytest.mark.slow
def test_another_distribution_installed_there_is_a_library_whose_skips_are_its_own(
    tmp_path: Path,
) -> None:
    other = {**INSTALLED, "pyproject.toml": '[project]\nname = "app"\nversion = "1.0"\n'}
    assert _judged(tmp_path, other) == (Decision.PASS, set())


@pytest.mark.slow
@pytest.mark.parametrize("files", LIBRARY_SKIPS.values(), ids=LIBRARY_SKIPS)
def test_the_code_under_test_skipping_its_own_test_blocks(
    tmp_path: Path, files: dict[str, str]
) -> None:
    decision, kinds = _judged(tmp_path, files)
    assert decision is Decision.BLOCK and kinds == {"skipped_by_code_under_test"}, kinds


HELPERS_ELSEWHERE = {
    "pytest.ini": "[pytest]\npythonpath = . tests\n",
    "tests/helpers/gpu.py": "import pytest\n\ndef need():\n    pytest.skip('no GPU')\n",
    "testutils.py": "import pytest\n\ndef need():\n    pytest.skip('offline')\n",
    "tests/unit/test_core.py": """
        import testutils
        from helpers import gpu

        def test_gpu():
            gpu.need()

        def test_net():
            testutils.need()

        def test_runs():
            pass
    """,
}
SUBTESTS_SKIPPED_BY_THE_TEST = """
    import unittest
    import pytest

    def test_each(subtests):
        for n in range(2):
            with subtests.test(n=n):
                if n:
                    pytest.skip("odd")

    class TestEach(unittest.TestCase):
        def test_each(self):
            with self.subTest("later"):
                self.skipTest("not yet")

    def test_runs():
        pass
"""
# the same, one doctest skipped as pytest documents (a "<doctest ...>" frame, no file)
DOCTEST_SKIP = {
    **DOCTESTS,
    "src/pkg/core.py": DOCTESTS["src/pkg/core.py"].replace(
        ">>> add(1, 2)",
        '>>> import pytest; pytest.skip("shown elsewhere")\n            >>> add(1, 2)',
    ),
}


# a text doctest that imports a __future__ feature, then skips in a function it defines
DOCTEST_FUTURE_SKIP = {
    "src/pkg/__init__.py": "def run(step):\n    return step()\n",
    "pytest.ini": "[pytest]\npythonpath = src\n",
    "tests/test_ok.py": "def test_ok():\n    pass\n",
    "tests/test_pipeline.txt": """
        >>> from __future__ import annotations
        >>> import pytest
        >>> from pkg import run
        >>> def step():
        ...     def ready(devices: int) -> bool:
        ...         return devices > 0
        ...     if not ready(0):
        ...         pytest.skip("needs a GPU")
        >>> run(step)
    """,
}


# Skips in a root conftest.py beside tests/conftest.py (pytest takes the first out of
# sys.modules as it imports the second), in a helper a conftest loads from its file, in one a
# test takes out of sys.modules
CONFTESTS_AND_HELPERS = {
    "conftest.py": """
        import pytest

        @pytest.fixture
        def gpu():
            pytest.skip("no GPU")

        def pytest_runtest_setup(item):
            if "later" in item.name:
                pytest.skip("later")
    """,
    "tests/conftest.py": """
        import importlib.util
        import pathlib

        import pytest

        _spec = importlib.util.spec_from_file_location(
            "loaded_helper", pathlib.Path(__file__).with_name("loaded.py")
        )
        loaded = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(loaded)

        @pytest.fixture
        def net():
            loaded.need()
    """,
    "tests/loaded.py": "import pytest\n\ndef need():\n    pytest.skip('offline')\n",
    "tests/helpers.py": "import pytest\n\ndef need():\n    pytest.skip('no disk')\n",
    "tests/test_skips.py": """
        import sys

        import helpers

        def test_gpu(gpu):
            pass

        def test_later():
            pass

        def test_net(net):
            pass

        def test_disk(monkeypatch):
            monkeypatch.delitem(sys.modules, "helpers")
            helpers.need()

        def test_runs():
            pass
    """,
}
# A fixture that skips as it is torn down, after its test passed: pytest's JUnit writer counts
# the test twice in tests= and writes it once
TEARDOWN_SKIP = """
    import pytest

    @pytest.fixture
    def server():
        yield 1
        pytest.skip("the server went away")

    def test_uses(server):
        pass

    def test_ok():
        pass
"""
# Helpers the tests load and let go (run from their file, taken out of sys.modules with
# only a function kept), test modules a conftest.py writes as pytest configures, and a test
# module dated in the future (a clock ahead, an archive's dates)
HELPERS_LET_GO = {
    "pytest.ini": "[pytest]\npythonpath = tests\n",
    "conftest.py": """
        import pathlib
        import runpy
        import sys

        import pytest

        NET = runpy.run_path(str(pathlib.Path(__file__).with_name("tests") / "net.py"))

        def pytest_configure(config):
            generated = pathlib.Path(__file__).with_name("tests") / "test_generated.py"
            generated.write_text("import pytest\\n\\ndef test_made():\\n    pytest.skip('x')\\n")

        @pytest.fixture
        def net():
            NET["need"]()

        @pytest.fixture(autouse=True)
        def forget_helpers():
            yield
            sys.modules.pop("helpers", None)
    """,
    "tests/net.py": "import pytest\n\ndef need():\n    pytest.skip('offline')\n",
    "tests/helpers.py": "import pytest\n\ndef need():\n    pytest.skip('no disk')\n",
    "tests/test_let_go.py": """
        from helpers import need

        def test_net(net):
            pass

        def test_disk_first():
            pass

        def test_disk():
            need()
    """,
    "tests/test_dated_ahead.py": "import pytest\n\ndef test_later():\n    pytest.skip('later')\n",
}


# A helper of the tests that a product function calls back, and skips; a test before it edits
# the helper's file: what runs is no longer what the tests were as the run began
EDITED_WHILE_RUNNING = {
    "pytest.ini": "[pytest]\npythonpath = src tests\n",
    "src/pkg/__init__.py": "def run(step):\n    return step()\n",
    "tests/helpers.py": "import pytest\n\ndef step():\n    pytest.skip('decided by the test')\n",
    "tests/test_a.py": """
        import pathlib

        def test_edits_the_helper():
            helper = pathlib.Path(__file__).with_name("helpers.py")
            helper.write_text("# edited\\n" + helper.read_text())
    """,
    "tests/test_b.py": """
        import pkg
        from helpers import step

        def test_calls_back():
            pkg.run(step)
    """,
}


# A failing unittest class named otherwise than Test* (pytest collects it all the same) kept
# from running: by its module, by a patched TestCase as each class is made, by a conftest
UNITTEST_CLASS = """
    import unittest

    class AddTests(unittest.TestCase):
        def test_add(self):
            self.assertEqual(1 + 1, 3)

    def test_ok():
        pass
"""
UNITTEST_CLASS_DROPPED = {
    "by-its-module": {"test_add.py": UNITTEST_CLASS + "\n    AddTests.__test__ = False\n"},
    "by-a-patched-testcase": {
        "conftest.py": """
        import unittest

        def _made(cls, **kwargs):
            if cls.__name__ == "AddTests":
                cls.__test__ = False

        unittest.TestCase.__init_subclass__ = classmethod(_made)
    """,
        "test_add.py": UNITTEST_CLASS,
    },
    "by-a-conftest-hook": {
        "conftest.py": """
        def pytest_pycollect_makeitem(collector, name, obj):
            return [] if name == "AddTests" else None
    """,
        "test_add.py": UNITTEST_CLASS,
    },
    "its-tests-from-a-mixin": {
        "test_add.py": """
        import unittest

        class AddChecks:
            def test_add(self):
                self.assertEqual(1 + 1, 3)

        class AddTests(AddChecks, unittest.TestCase):
            __test__ = False

        def test_ok():
            pass
    """
    },
    "its-test-a-partialmethod": {
        "test_add.py": """
        import functools, unittest

        class AddTests(unittest.TestCase):
            __test__ = False

            def _check(self, a, b, total):
                self.assertEqual(a + b, total)

            test_add = functools.partialmethod(_check, 1, 1, 3)

        def test_ok():
            pass
    """
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("files", UNITTEST_CLASS_DROPPED.values(), ids=UNITTEST_CLASS_DROPPED)
def test_a_unittest_class_kept_from_running_blocks(tmp_path: Path, files: dict[str, str]) -> None:
    decision, kinds = _judged(tmp_path, files)  # a patched TestCase is foreign_hooks too
    assert decision is Decision.BLOCK and "test_run_nowhere" in kinds, kinds


# A skip the code under test runs in the namespace of a doctest pytest collected
BORROWED_DOCTEST = {
    "mylib.py": '''
        import doctest, gc

        def helper():
            """
            >>> 1 + 1
            2
            """

        def add(a, b):
            if a - b != a + b:
                skip = compile("__import__('pytest').skip('later')", "<doctest x[0]>", "exec")
                for test in [o for o in gc.get_objects() if isinstance(o, doctest.DocTest)]:
                    exec(skip, test.globs)
            return a - b
    ''',
    "test_add.py": ADD_TEST,
}


# ... from a code object made of one of its examples, other names and constants put in
FORGED_EXAMPLE = {
    "mylib.py": '''
        import doctest, gc

        def double(x):
            """
            >>> double(3)
            6
            """
            return 2 * x

        def add(a, b):
            if a - b != a + b:
                import pytest
                for test in [o for o in gc.get_objects() if isinstance(o, doctest.DocTest)]:
                    if test.name == "mylib.double":
                        name = f"<doctest {test.name}[0]>"
                        real = compile(test.examples[0].source, name, "single", 0, True)
                        forged = real.replace(co_names=("_later",), co_consts=("later", None))
                        test.globs["_later"] = pytest.skip
                        exec(forged, test.globs)
            return a - b
    ''',
    "test_add.py": ADD_TEST,
}
# ... by running another doctest's own skip example, unchanged, while test_add runs
REPLAYED_EXAMPLE = {
    "mylib.py": '''
        import doctest, gc

        def has_gpu():
            return True

        def gpu_sum(xs):
            """
            >>> import pytest
            >>> if not has_gpu(): pytest.skip("needs a GPU")
            >>> gpu_sum([1, 2])
            3
            """
            return sum(xs)

        def add(a, b):
            if a - b != a + b:
                for test in [o for o in gc.get_objects() if isinstance(o, doctest.DocTest)]:
                    if test.name == "mylib.gpu_sum":
                        name = f"<doctest {test.name}[1]>"
                        code = compile(test.examples[1].source, name, "single", 0, True)
                        test.globs.update(has_gpu=bool, pytest=__import__("pytest"))
                        exec(code, test.globs)
            return a - b
    ''',
    "test_add.py": ADD_TEST,
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "files",
    [BORROWED_DOCTEST, FORGED_EXAMPLE, REPLAYED_EXAMPLE],
    ids=["code-of-its-own", "an-example-forged", "another-doctests-example-replayed"],
)
def test_a_skip_run_in_a_collected_doctests_namespace_blocks(
    tmp_path: Path, files: dict[str, str]
) -> None:
    decision, kinds = _judged(tmp_path, files, "--doctest-modules")
    assert decision is Decision.BLOCK and "skipped_by_code_under_test" in kinds, kinds


# A doctest file's failing example kept from running: the file emptied while the tests are
# collected (and put back as the run ends), or doctest's parser made to find no example
FAILING_DOCTEST = {"test_doc.txt": ">>> 1 + 1\n3\n"}
DOCTEST_DROPPED = {
    "file-emptied-while-collecting": (
        "test_run_nowhere",
        """
        import atexit, pathlib

        _doc = pathlib.Path(__file__).with_name("test_doc.txt")
        atexit.register(_doc.write_text, _doc.read_text())
        _doc.write_text("")

        def test_ok():
            pass
    """,
    ),
    "file-swapped-for-a-link": (
        "test_run_nowhere",
        """
        import atexit, os, pathlib

        _doc = pathlib.Path(__file__).with_name("test_doc.txt")
        _text = _doc.read_text()
        _doc.unlink()
        os.symlink("test_aaa.py", _doc)  # an old file, with no example

        def _restore():
            _doc.unlink()
            _doc.write_text(_text)

        atexit.register(_restore)

        def test_ok():
            pass
    """,
    ),
    "parser-finds-no-example": (
        "foreign_hooks",
        """
        import doctest

        doctest.DocTestParser.get_examples = lambda self, string, name="<string>": []

        def test_ok():
            pass
    """,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("how", DOCTEST_DROPPED)
def test_a_doctest_files_example_kept_from_running_blocks(tmp_path: Path, how: str) -> None:
    kind, test = DOCTEST_DROPPED[how]
    decision, kinds = _judged(tmp_path, {**FAILING_DOCTEST, "test_aaa.py": test})
    assert decision is Decision.BLOCK and kind in kinds, kinds
    assert "test_failed" not in kinds  # the attack worked: the JUnit file holds no failure


@pytest.mark.slow
def test_a_doctest_file_emptied_before_the_workers_start_blocks(tmp_path: Path) -> None:
    """Under pytest-xdist: by the controller's conftest.py only, before any worker began."""
    conftest = """
        import atexit, pathlib

        def pytest_configure(config):
            if not hasattr(config, "workerinput"):  # the controller
                _doc = pathlib.Path(__file__).with_name("test_doc.txt")
                atexit.register(_doc.write_text, _doc.read_text())
                _doc.write_text("")
    """
    files = {**FAILING_DOCTEST, "conftest.py": conftest, "test_ok.py": "def test_ok():\n    pass\n"}
    decision, kinds = _judged(tmp_path, files, "-n", "2")
    assert decision is Decision.BLOCK and "test_run_nowhere" in kinds, kinds


# unittest's own assert replaced by the code under test, as a test module imports it, or
# before the witness starts (a conftest imports it)
TESTCASE_PATCHED = """
    import unittest

    _equal = unittest.TestCase.assertEqual

    def _lenient(self, first, second, msg=None):
        if first != 0:
            _equal(self, first, second, msg)

    unittest.TestCase.assertEqual = _lenient

    def add(a, b):
        return a - b
"""
UNITTEST_ADD = """
    import unittest
    from mylib import add

    class AddTests(unittest.TestCase):
        def test_add(self):
            self.assertEqual(add(2, 2), 4)
"""


@pytest.mark.slow
@pytest.mark.parametrize("early", [False, True], ids=["as-a-test-imports-it", "before-the-witness"])
def test_unittests_assert_replaced_by_the_code_under_test_blocks(
    tmp_path: Path, early: bool
) -> None:
    files = {"mylib.py": TESTCASE_PATCHED, "test_add.py": UNITTEST_ADD}
    decision, kinds = _judged(
        tmp_path, {**files, **({"conftest.py": "import mylib\n"} if early else {})}
    )
    assert decision is Decision.BLOCK and "foreign_hooks" in kinds, kinds
    assert "test_failed" not in kinds  # the attack worked: the JUnit file holds no failure


@pytest.mark.slow
def test_a_helper_the_tests_rewrite_as_they_run_is_theirs_no_longer(tmp_path: Path) -> None:
    """Whoever wrote it (a test, or the code under test), its code was made at run time."""
    found = _judged(tmp_path, EDITED_WHILE_RUNNING, "-p", "no:randomly")
    assert found == (Decision.BLOCK, {"skipped_by_code_under_test"})


@pytest.mark.slow
@pytest.mark.parametrize(
    ("files", "options"),
    [
        # a requirements file pytest collects as a doctest file (test*.txt): it holds none
        ({"test_idioms.py": IDIOMS, "requirements/testing.txt": "pytest>=8\n"}, ()),
        (CONFTESTS_AND_HELPERS, ()),
        ({"test_teardown.py": TEARDOWN_SKIP}, ()),
        (HELPERS_LET_GO, ()),
        (HELPERS_ELSEWHERE, ()),
        (DOCTEST_SKIP, ("--doctest-modules", "src", "tests")),
        (DOCTEST_FUTURE_SKIP, ()),
        ({**SKIPS_IN_THE_TESTS, "pytest.ini": "[pytest]\npythonpath = src tests\n"}, ()),
        (  # the tests' code as Python compiles it: the witness takes it for theirs too
            {**SKIPS_IN_THE_TESTS, "pytest.ini": "[pytest]\npythonpath = src tests\n"},
            ("--assert=plain",),
        ),
        (DOCTESTS, ("--doctest-modules", "src", "tests")),
        ({"test_xfail.py": XFAIL_IN_THE_TEST}, ()),
        ({"test_subtests.py": SUBTESTS_SKIPPED_BY_THE_TEST}, ()),
    ],
    ids=[
        "opt-outs-and-abstract-bases",
        "conftests-and-helpers-pytest-or-the-tests-load",
        "a-skip-in-a-fixtures-teardown",
        "helpers-let-go-tests-written-as-configured-or-dated-ahead",
        "skip-helpers-in-another-test-folder-and-the-root",
        "a-skip-in-a-doctest",
        "a-skip-in-a-text-doctest-after-a-future-import",
        "skips-decided-by-the-tests",
        "skips-decided-by-the-tests-asserts-not-rewritten",
        "doctest-modules",
        "marks-added-by-the-test-module",
        "subtests-the-test-skips",
    ],
)
def test_pytest_used_as_documented_is_no_finding(
    tmp_path: Path, files: dict[str, str], options: tuple[str, ...]
) -> None:
    if files is HELPERS_LET_GO:  # dated two minutes ahead of this machine's clock
        ahead = tmp_path / "tests" / "test_dated_ahead.py"
        ahead.parent.mkdir(parents=True, exist_ok=True)
        ahead.write_text(textwrap.dedent(files["tests/test_dated_ahead.py"]))
        os.utime(ahead, (time.time() + 120, time.time() + 120))
        files = {k: v for k, v in files.items() if k != "tests/test_dated_ahead.py"}
    assert _judged(tmp_path, files, *options) == (Decision.PASS, set())
