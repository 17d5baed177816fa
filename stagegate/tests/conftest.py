"""Shared fixtures: where the fixture files are, the policy the gold reports were rendered
under, and real pytest runs on a small project (for the readers and the report)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# The pytest runs these tests start load no hypothesis: its plugin imports all of hypothesis,
# half a second of every run's start (most of it), and no project they run uses it.
NO_HYPOTHESIS = "-p no:hypothesispytest"


def pytest_configure(config: pytest.Config) -> None:
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    if NO_HYPOTHESIS not in addopts:
        os.environ["PYTEST_ADDOPTS"] = f"{addopts} {NO_HYPOTHESIS}".strip()


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
def _every_finding_says_what_and_what_to_do(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every finding any test makes has a title and, when it blocks, a fix: a report that
    blocks a merge says why and what to do."""
    from stagegate.judge.findings import Findings

    add = Findings.add

    def checked(self: Findings, kind: str, title: str, **kw: object) -> None:
        add(self, kind, title, **kw)  # type: ignore[arg-type]
        made = self.items[-1]
        assert isinstance(made.title, str) and made.title.strip(), f"{kind}: no title"
        if made.severity.blocks:
            assert isinstance(made.fix, str) and made.fix.strip(), f"{kind}: no fix"

    monkeypatch.setattr(Findings, "add", checked)
    yield
