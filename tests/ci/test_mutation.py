"""tools/mutation.py: globs sent to the package they name, and a real mutmut run whose
timed-out mutants are run again alone before the results are written."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import mutation  # noqa: E402
import mutation_report  # noqa: E402


def test_globs_go_to_the_package_they_name() -> None:
    assert mutation.split_globs(
        ["stagegate.judge.policy*", "amptrain.data*", "stagegate.judge*"]
    ) == {
        "stagegate": ["stagegate.judge.policy*", "stagegate.judge*"],
        "amptrain": ["amptrain.data*"],
    }
    assert mutation.split_globs([]) == {"amptrain": [], "stagegate": []}  # every mutant
    with pytest.raises(ValueError, match="tinylib"):
        mutation.split_globs(["tinylib.calc*"])


def test_each_package_runs_where_its_mutmut_settings_are() -> None:
    for package, where in mutation.PACKAGES.items():
        text = (where / "pyproject.toml").read_text()
        assert "[tool.mutmut]" in text and f'source_paths = ["src/{package}/"]' in text


def test_the_timed_out_mutants_are_read_from_the_results() -> None:
    results = (
        "    a.b.x_f__mutmut_1: killed\n    a.b.x_f__mutmut_2: timeout\n"
        "    a.c.x_g__mutmut_1: timeout\n"
    )
    assert mutation.timed_out(results) == ["a.b.x_f__mutmut_2", "a.c.x_g__mutmut_1"]
    assert mutation.timed_out("") == []


PROJECT = {
    "pyproject.toml": """
        [tool.mutmut]
        source_paths = ["src/looplib/"]
        pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]
        timeout_multiplier = 1.0
    """,
    "src/looplib/__init__.py": "",
    "src/looplib/count.py": """
        def countdown(n: int) -> int:
            while n > 0:
                n -= 1
            return n
    """,
    "tests/test_count.py": """
        from looplib.count import countdown


        def test_countdown() -> None:
            assert countdown(3) == 0
    """,
}


@pytest.mark.slow
def test_a_real_run_writes_its_results_after_running_timeouts_again_alone(tmp_path: Path) -> None:
    for name, text in PROJECT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip())
    results = tmp_path / "out" / "results.txt"
    again = mutation.run_package(tmp_path, [], results, children=2)
    statuses = mutation_report.parse_results(results.read_text())
    # `n -= 1` made `n += 1` or `n = 1` never ends: those time out, and only those run again
    assert again and sorted(again) == sorted(n for n, s in statuses.items() if s == "timeout")
    assert set(statuses.values()) == {"killed", "timeout"}
