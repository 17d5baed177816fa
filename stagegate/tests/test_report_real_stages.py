"""Real pytest runs through ``stagegate run``, judged by ``stagegate report`` under the
repository's policy: a skip marker on a required test module, a declared output the stage did
not write, a suite most of whose tests fail through a deprecation the suite turns into
errors, and a test a stage drops that no stage runs; each is reported as what it is."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from stagegate.cli import main
from stagegate.record.runner import run_stage

from .builders import POLICY_FILE

# A project laid out like this repository: a library, its unit tests, and the integration
# modules the policy's required_tests name.
PROJECT = {
    "pytest.ini": """
        [pytest]
        filterwarnings = error
        markers = integration
    """,
    "lib/trainlib.py": """
        import warnings

        def step(x):
            return x + 1
    """,
    "tests/unit/test_lib.py": """
        import sys
        sys.path.insert(0, "lib")
        import pytest
        import trainlib

        @pytest.mark.parametrize("x", range(40))
        def test_step(x):
            assert trainlib.step(x) == x + 1

        def test_other():
            assert True
    """,
    "tests/integration/conftest.py": """
        import json
        import os

        def pytest_sessionfinish(session):
            path = os.environ.get("PROJECT_METRICS")  # set where the stage writes its curves
            if path:
                with open(path, "w", encoding="utf-8") as f:
                    json.dump({"curves": {"loss": [3.0, 2.0, 1.5]}}, f)
    """,
    "tests/integration/test_fine_tuning_cpu.py": """
        import pytest
        pytestmark = pytest.mark.integration

        def test_fine_tuning_fp32():
            assert True

        def test_fine_tune_bf16_autocast_on_cpu():
            assert True
    """,
    "tests/integration/test_fine_tuning_combinations.py": """
        import pytest
        pytestmark = pytest.mark.integration

        class TestEveryArgumentCombination:
            def test_trains_and_returns_every_documented_key(self):
                assert True
    """,
    "tests/integration/test_readme_examples.py": """
        import pytest
        pytestmark = pytest.mark.integration

        def test_the_library_examples_run_in_order():
            assert True
    """,
    "tests/integration/test_fsdp.py": """
        import pytest
        pytestmark = pytest.mark.integration

        def test_fsdp_trains_as_one_process_does():
            assert True
    """,
}
# The deprecation planted where every step goes: the suite's filterwarnings turns it into errors.
DEPRECATED = """
        def step(x):
            warnings.warn("torch.cuda.amp.GradScaler(args...) is deprecated", FutureWarning)
            return x + 1
"""
SKIP = 'pytestmark = [pytest.mark.integration, pytest.mark.skip(reason="flaky on shared runners")]'


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in PROJECT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _stage(
    name: str, files: dict[str, str], *pytest_args: str, env: dict[str, str] | None = None
) -> int:
    """One stage, as the noxfile runs it: pytest through stagegate run into reports/raw."""
    _, code = run_stage(
        name,
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *pytest_args],
        out_dir=Path("reports/raw"),
        files=files,
        env={**os.environ, **(env or {})},
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    return code


def _unit(*selection: str) -> int:
    """The unit stage over ``selection`` (its folder by default)."""
    return _stage(
        "execution",
        {
            "junit": "reports/raw/junit-unit.xml",
            "coverage": "reports/raw/coverage.json",
            "warnings": "reports/raw/warnings-unit.json",
        },
        *(selection or ["tests/unit"]),
        "--junitxml=reports/raw/junit-unit.xml",
        "--cov=lib",
        "--cov-report=json:reports/raw/coverage.json",
        "--stagegate-warnings=reports/raw/warnings-unit.json",
    )


INTEGRATION_FILES = {
    "junit": "reports/raw/junit-integration.xml",
    "metrics": "reports/raw/integration-metrics.json",
}


def _integration(*, write_metrics: bool = True) -> int:
    """The integration stage, declaring its curves; written unless ``write_metrics`` is False."""
    return _stage(
        "integration",
        INTEGRATION_FILES,
        "tests/integration",
        "--junitxml=reports/raw/junit-integration.xml",
        env={"PROJECT_METRICS": INTEGRATION_FILES["metrics"]} if write_metrics else {},
    )


def _report(*extra: str) -> tuple[int, str]:
    code = main(
        [
            "report",
            "reports/raw",
            "--out",
            "reports",
            "--pyproject",
            str(POLICY_FILE),
            *extra,
            "--only",
            "execution",
            "--only",
            "integration",
        ]
    )
    return code, Path("reports/summary.md").read_text()


@pytest.mark.slow
def test_the_clean_project_passes(project: Path) -> None:
    assert _unit() == 0 and _integration() == 0
    code, summary = _report()
    assert code == 0, summary


@pytest.mark.slow
def test_a_skip_marker_on_a_required_test_module_blocks_naming_its_tests(project: Path) -> None:
    module = project / "tests/integration/test_fine_tuning_cpu.py"
    module.write_text(module.read_text().replace("pytestmark = pytest.mark.integration", SKIP))
    assert _unit() == 0 and _integration() == 0  # pytest itself is content: 2 skipped
    code, summary = _report()
    assert code == 1
    shown = summary.replace("\\_", "_")  # as the reader sees it
    for test in ("test_fine_tuning_fp32", "test_fine_tune_bf16_autocast_on_cpu"):
        assert f"required test tests/integration/test_fine_tuning_cpu.py::{test} was" in shown
    assert "flaky on shared runners" in Path("reports/integration.md").read_text()


@pytest.mark.slow
def test_a_deselected_required_module_blocks_naming_its_pattern(project: Path) -> None:
    assert _unit() == 0
    assert _stage(
        "integration",
        {"junit": "reports/raw/junit-integration.xml"},
        "tests/integration",
        "--deselect=tests/integration/test_readme_examples.py::test_the_library_examples_run_in_order",
        "--junitxml=reports/raw/junit-integration.xml",
    ) == 0  # fmt: skip
    code, summary = _report()
    assert code == 1 and "test\\_readme\\_examples.py::\\*" in summary


@pytest.mark.slow
def test_a_declared_output_the_stage_did_not_produce_blocks(project: Path) -> None:
    assert _unit() == 0 and _integration(write_metrics=False) == 0
    code, summary = _report()
    assert code == 1 and "integration-metrics.json was not produced" in summary


@pytest.mark.slow
@pytest.mark.parametrize(
    "again",
    [
        # the command runs no test at all: both files are the earlier run's
        lambda: _stage("integration", INTEGRATION_FILES, "--version"),
        # the tests run again, and the curves are the earlier run's
        lambda: _integration(write_metrics=False),
    ],
    ids=["no-test-ran", "old-curves"],
)
def test_a_declared_file_left_from_an_earlier_run_is_not_this_runs(
    project: Path, again: Callable[[], int]
) -> None:
    assert _unit() == 0 and _integration() == 0 and _report()[0] == 0
    metrics = Path("reports/raw/integration-metrics.json")
    assert again() == 0 and metrics.is_file()
    code, summary = _report()
    assert code == 1 and "| [integration](integration.md) | **PASS** |" not in summary
    assert "integration-metrics.json was not written by this run" in summary
    record = json.loads(Path("reports/raw/integration.json").read_text())
    assert str(metrics) in record["stale"]


@pytest.mark.slow
def test_a_stage_that_declares_none_of_its_outputs_blocks_naming_each(project: Path) -> None:
    assert _unit() == 0 and _integration() == 0
    assert _stage("execution", {}, "tests/unit") == 0  # the same tests, no evidence declared
    code, summary = _report()
    assert code == 1 and "| [execution](execution.md) | **FAIL** |" in summary
    for kind in ("junit", "coverage", "warnings"):
        assert f"execution produced no {kind} file" in summary


@pytest.mark.slow
def test_a_suite_failing_through_a_deprecation_is_failed_with_its_failures_not_missing(
    project: Path,
) -> None:
    library = project / "lib/trainlib.py"
    library.write_text(library.read_text().replace(
        "\ndef step(x):\n    return x + 1\n", textwrap.dedent(DEPRECATED)))  # fmt: skip
    assert _unit() == 1 and _integration() == 0
    code, summary = _report()
    assert code == 1
    execution = Path("reports/execution.md").read_text()
    assert "| [execution](execution.md) | **FAIL** |" in summary
    assert "MISSING" not in summary and "did not run" not in summary
    assert "1 passed, 40 failed" in summary
    assert execution.count("FutureWarning") >= 40  # every failure is listed with its message
    assert "lib/trainlib.py:4" in execution  # where the warning was raised


@pytest.mark.slow
def test_a_record_removed_after_its_stage_is_said_to_be_gone(project: Path) -> None:
    assert _unit() == 0 and _integration() == 0
    Path("reports/raw/execution.json").unlink()
    code, summary = _report()
    assert code == 1
    assert "execution" in summary and "was removed" in summary and "did not run" not in summary
    shutil.rmtree("reports/raw")
    assert main(["report", "reports/raw", "--out", "reports"]) == 2  # no records at all


# Four ways to keep a failing test out of every stage without skipping it: a mark that the
# unit stage deselects (-m) and the integration stage, which runs its own folder, never
# collects; a conftest hook that drops it from the session without saying so; a module, or
# the test itself, that says it is no test.
DROPS = {
    "marked": (
        "tests/unit/test_lib.py",
        "def test_other",
        "@pytest.mark.integration\ndef test_other",
    ),
    "dropped-by-a-hook": (
        "tests/unit/conftest.py",
        "",
        "def pytest_collection_modifyitems(items):\n"
        "    items[:] = [i for i in items if i.name != 'test_other']\n",
    ),
    "module-says-no-tests": (
        "tests/unit/test_lib.py",
        "import trainlib",
        "import trainlib\n__test__ = False",
    ),
    "test-says-no-test": (
        "tests/unit/test_lib.py",
        "def test_other():\n    assert False",
        "def test_other():\n    assert False\n\n\ntest_other.__test__ = False",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("how", DROPS)
def test_a_failing_test_dropped_from_every_stage_blocks_naming_it(project: Path, how: str) -> None:
    assert _unit("tests", "-m", "not integration") == 0 and _integration() == 0
    code, summary = _report()
    assert code == 0, summary  # the integration tests it dropped ran in their own stage
    lib = project / "tests/unit/test_lib.py"
    lib.write_text(lib.read_text().replace("assert True", "assert False"))  # test_other fails
    name, old, new = DROPS[how]
    path = project / name
    path.write_text(path.read_text().replace(old, new, 1) if old else new)
    assert _unit("tests", "-m", "not integration") in (0, 5) and _integration() == 0  # 5: no test
    code, summary = _report()
    assert code == 1
    verdict = json.loads(Path("reports/verdict.json").read_text())
    (execution,) = (s for s in verdict["stages"] if s["name"] == "execution")
    dropped = [f for f in execution["findings"] if f["kind"] == "test_run_nowhere"]
    assert [f["severity"] for f in dropped] == ["HIGH"]
    named = "tests/unit/test_lib.py" + ("" if how == "module-says-no-tests" else "::test_other")
    assert named in dropped[0]["detail"]
