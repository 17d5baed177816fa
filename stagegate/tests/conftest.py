"""Shared fixtures: where the fixture files are, the policy the gold reports were rendered
under, and real pytest runs on a small project (for the readers and the report)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stagegate.errors import StagegateError
from stagegate.model import StageVerdict

from .said import Said, finding_entry, verdict_entry

FIXTURES = Path(__file__).resolve().parent / "fixtures"

PROJECT = {
    "pytest.ini": """
        [pytest]
        filterwarnings = default
        junit_family = {family}
    """,
    "helper.py": """
        def lookup(env):
            return env["train_data"]
    """,
    "test_sample.py": """
        import warnings
        import pytest
        import helper

        def test_passes():
            assert 1 + 1 == 2

        def test_fails():
            assert [1, 2] == [1, 3]

        @pytest.mark.skip(reason="needs CUDA")
        def test_skipped():
            pass

        def test_raises_in_library():
            helper.lookup({"train_loader": []})

        def test_warns():
            warnings.warn("torch.cuda.amp.autocast(args...) is deprecated", FutureWarning)

        class TestGroup:
            def test_method(self):
                assert True

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_fixture_error(broken):
            pass
    """,
    "test_broken_import.py": """
        import not_a_module_anywhere
    """,
}


def run_sample_project(root: Path, family: str = "xunit2") -> dict[str, Path]:
    """Write the sample project into ``root``, run pytest on it for real, return its outputs."""
    for name, text in PROJECT.items():
        (root / name).write_text(textwrap.dedent(text).replace("{family}", family).lstrip())
    out = {
        "junit": root / "junit.xml",
        "warnings": root / "warnings.json",
        "coverage": root / "coverage.json",
    }
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            f"--junitxml={out['junit']}",
            f"--stagegate-warnings={out['warnings']}",
            "--cov=helper",
            f"--cov-report=json:{out['coverage']}",
            ".",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return out


@pytest.fixture
def sample_project() -> object:
    """The function that writes and runs the sample project (for a given junit_family)."""
    return run_sample_project


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return run_sample_project(tmp_path_factory.mktemp("sample"))


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """The folder of fixture files: ``junit/`` (a corpus) and ``stagegate/`` (raw stage
    directories, gold reports, a baseline and the policy)."""
    return FIXTURES


@pytest.fixture(scope="session")
def policy_file() -> Path:
    """A pyproject holding this repository's ``[tool.stagegate]`` policy, the one the gold
    reports were rendered under."""
    return FIXTURES / "stagegate" / "policy.toml"


@pytest.fixture(autouse=True)
def _every_finding_says_what_and_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    """Every finding any test makes has a title and, when it blocks, a fix: a report that
    blocks a merge says why and what to do. Its words, each stage verdict's and each error's
    stagegate raises are compared with the test's entry in ``fixtures/said/`` (tests/said.py):
    the tests check behaviour, that file pins the words."""
    from stagegate.judge import verdict
    from stagegate.judge.findings import Findings

    key = request.node.nodeid.partition("::")[2]
    said = Said(key, str(tmp_path_factory.getbasetemp()))
    add, make_verdict, init = Findings.add, verdict.StageVerdict, StagegateError.__init__

    def checked(self: Findings, kind: str, title: str, **kw: object) -> None:
        add(self, kind, title, **kw)  # type: ignore[arg-type]
        made = self.items[-1]
        assert isinstance(made.title, str) and made.title.strip(), f"{kind}: no title"
        if made.severity.blocks:
            assert isinstance(made.fix, str) and made.fix.strip(), f"{kind}: no fix"
        said.add("finding", finding_entry(made))

    def recorded(**kw: Any) -> StageVerdict:
        made = make_verdict(**kw)
        said.add("verdict", verdict_entry(made))
        return made

    def raised(self: StagegateError, *args: object) -> None:
        init(self, *args)
        said.add("error", {"type": type(self).__name__, "message": str(self)})

    monkeypatch.setattr(Findings, "add", checked)
    monkeypatch.setattr(verdict, "StageVerdict", recorded)
    monkeypatch.setattr(StagegateError, "__init__", raised)
    yield
    random = getattr(request.function, "is_hypothesis_test", False)
    if getattr(request.node, "rep_call_passed", False) and not random:
        said.check(request.module.__name__.rpartition(".")[2])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Tell the fixture above whether the test itself passed (a failed test's words are not
    compared: its failure says more)."""
    report = yield
    if report.when == "call":
        item.rep_call_passed = report.passed  # type: ignore[attr-defined]
    return report
