"""tools/mutation_report.py on a real mutmut run of a tiny project: kill rates and survivors for
people to read; an incomplete run fails, a file under a limit fails only where one is given."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import mutation_report  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "mutation"
MUTMUT = [sys.executable, "-m", "mutmut"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny project, mutated and tested by mutmut for real; its results file inside."""
    project = tmp_path_factory.mktemp("mutation") / "tiny"
    shutil.copytree(FIXTURE, project)
    subprocess.run([*MUTMUT, "run", "--max-children", "1"], cwd=project, check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    results = subprocess.run([*MUTMUT, "results", "--all", "true"], cwd=project, check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
    (project / "results.txt").write_text(results)
    return project


def _report(project: Path, *extra: str) -> tuple[int, str]:
    out = project / "report.md"
    code = mutation_report.main([str(project / "results.txt"), "--out", str(out), *extra])
    return code, out.read_text()


@pytest.mark.slow
def test_the_survivors_of_a_weak_test_suite_are_named_and_no_score_is_a_target(
    tiny_run: Path,
) -> None:
    code, report = _report(tiny_run)
    assert code == 0  # the score is for reading
    # 10 mutants, 2 killed: describe's weak test lets 6 live, and 2 change nothing it sees
    assert "| `src/tinylib/calc.py` | 20.0% | 2 | 10 | 8 |" in report
    assert "x_describe__mutmut_1`: survived" in report


@pytest.mark.slow
def test_a_limit_given_fails_a_file_under_it(tiny_run: Path) -> None:
    assert _report(tiny_run, "--min-kill", "20")[0] == 0
    code, report = _report(tiny_run, "--min-kill", "25")
    assert code == 1 and "kill rate 20.0% < 25%" in report


def test_an_unfinished_run_is_never_a_pass(tmp_path: Path) -> None:
    results = tmp_path / "results.txt"
    results.write_text("    a.b.x_f__mutmut_1: killed\n    a.b.x_f__mutmut_2: not checked\n"
                       "    a.c.x_g__mutmut_1: not checked\n")  # fmt: skip
    args = [str(results)]
    assert mutation_report.main(args) == 1
    results.write_text("    a.b.x_f__mutmut_1: killed\n    a.c.x_g__mutmut_1: not checked\n")
    assert mutation_report.main([*args, "--partial"]) == 0  # a.c never ran: left out
    results.write_text("")
    assert mutation_report.main(args) == 1


def test_a_run_of_named_mutants_is_judged_on_those_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results.txt"
    results.write_text("    a.b.x_f__mutmut_1: killed\n    a.b.x_f__mutmut_12: not checked\n"
                       "    a.b.x_g__mutmut_1: survived\n")  # fmt: skip
    out = tmp_path / "report.md"
    args = [str(results), "--out", str(out)]
    assert mutation_report.main(args) == 1  # x_f__mutmut_12 was never tested
    assert mutation_report.main([*args, "--only", "a.b.x_f__mutmut_1"]) == 0
    assert "| `src/a/b.py` | 100.0% | 1 | 1 | 0 |" in out.read_text()
    assert "Only the mutants named by `a.b.x_f__mutmut_1`." in out.read_text()
    assert mutation_report.main([*args, "--only", "a.b.x_f*"]) == 1  # names _12 too
    assert mutation_report.main([*args, "--only", "a.b.x_g*", "--only", "a.b.x_f__mutmut_1"]) == 0
    assert "| 50.0% | 1 | 2 | 1 |" in out.read_text()
    capsys.readouterr()
    assert mutation_report.main([*args, "--only", "a.c.*"]) == 1
    assert "no mutant results matching a.c.* in them" in capsys.readouterr().err


def test_timed_out_mutants_count_as_detected_and_are_named(tmp_path: Path) -> None:
    results = tmp_path / "results.txt"
    results.write_text("    a.b.x_f__mutmut_1: killed\n    a.b.x_f__mutmut_2: timeout\n")
    out = tmp_path / "report.md"
    assert mutation_report.main([str(results), "--out", str(out)]) == 0
    report = out.read_text()
    assert "| `src/a/b.py` | 100.0% | 2 | 2 | 0 | 0 | 1 |" in report
    named = report.split("## Timed out (counted as detected)")[1]
    assert "- `a.b.x_f__mutmut_2`" in named and "x_f__mutmut_1" not in named


@pytest.mark.slow
def test_results_of_several_workspaces_make_one_report(tiny_run: Path, tmp_path: Path) -> None:
    other = tmp_path / "stagegate-results.txt"
    other.write_text("    stagegate.judge.x_f__mutmut_1: killed\n")
    out = tmp_path / "report.md"
    args = [str(tiny_run / "results.txt"), str(other), "--out", str(out)]
    assert mutation_report.main(args) == 0
    report = out.read_text()
    assert "| `stagegate/src/stagegate/judge.py` | 100.0% | 1 | 1 |" in report
    assert "| `src/tinylib/calc.py` |" in report
