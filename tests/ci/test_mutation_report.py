"""tools/mutation_report.py on a real mutmut run of a tiny project, and the repository's list
of equivalent mutants."""

from __future__ import annotations

import shlex
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
    code = mutation_report.main(
        [str(project / "results.txt"), "--out", str(out), "--show-command",
         shlex.join([*MUTMUT, "show"]), *extra]
    )  # fmt: skip
    return code, out.read_text()


def test_a_weak_test_suite_fails_the_kill_rate(
    tiny_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tiny_run)
    code, report = _report(tiny_run, "--equivalents", str(tiny_run / "equivalents.toml"))
    assert code == 1
    # 10 mutants, 2 equivalent, 2 killed (describe's weak test lets 6 live)
    assert "| `src/tinylib/calc.py` | 25.0% | 2 | 8 | 2 | 6 |" in report
    assert "kill rate 25.0% < 90%" in report and "x_describe__mutmut_1`: survived" in report


def test_the_limit_and_the_equivalents_decide(
    tiny_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tiny_run)
    code, _ = _report(
        tiny_run, "--equivalents", str(tiny_run / "equivalents.toml"), "--min-kill", "25"
    )
    assert code == 0
    empty = tiny_run / "none.toml"
    empty.write_text("")
    code, report = _report(tiny_run, "--equivalents", str(empty), "--min-kill", "25")
    assert code == 1 and "20.0%" in report  # without the list the equivalents count as misses


def test_a_stale_equivalent_entry_fails(tiny_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tiny_run)
    stale = tiny_run / "stale.toml"
    stale.write_text(
        '[[equivalent]]\nmutant = "tinylib.calc.x_describe__mutmut_7"\nline = "x"\nwhy = "no"\n'
        '[[equivalent]]\nmutant = "tinylib.calc.x_clamp__mutmut_1"\nline = "if value < 0:"\n'
        'why = "renumbered"\n'
    )
    code, report = _report(tiny_run, "--equivalents", str(stale), "--min-kill", "0")
    assert code == 1
    assert "x_describe__mutmut_7: listed as equivalent but it is killed" in report
    assert "x_clamp__mutmut_1: its change is now ['if value <= low:']" in report


def test_an_unfinished_run_is_never_a_pass(tmp_path: Path) -> None:
    results = tmp_path / "results.txt"
    results.write_text("    a.b.x_f__mutmut_1: killed\n    a.b.x_f__mutmut_2: not checked\n"
                       "    a.c.x_g__mutmut_1: not checked\n")  # fmt: skip
    equivalents = tmp_path / "eq.toml"
    equivalents.write_text("")
    args = [str(results), "--equivalents", str(equivalents), "--min-kill", "0"]
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
    equivalents = tmp_path / "eq.toml"
    equivalents.write_text(
        '[[equivalent]]\nmutant = "a.b.x_g__mutmut_1"\nline = "x"\nwhy = "the same"\n'
    )
    out = tmp_path / "report.md"
    args = [str(results), "--equivalents", str(equivalents), "--out", str(out)]
    assert mutation_report.main(args) == 1  # x_f__mutmut_12 was never tested
    assert mutation_report.main([*args, "--only", "a.b.x_f__mutmut_1"]) == 0
    assert "| `src/a/b.py` | 100.0% | 1 | 1 | 0 |" in out.read_text()
    assert "Only the mutants named by `a.b.x_f__mutmut_1`." in out.read_text()
    assert mutation_report.main([*args, "--only", "a.b.x_f*"]) == 1  # names _12 too
    assert mutation_report.main([*args, "--only", "a.b.x_g*", "--only", "a.b.x_f__mutmut_1"]) == 0
    assert "| 100.0% | 1 | 1 | 1 |" in out.read_text()  # the listed mutant left out
    capsys.readouterr()
    assert mutation_report.main([*args, "--only", "a.c.*"]) == 1
    assert "no mutant results matching a.c.* in them" in capsys.readouterr().err


def test_timed_out_mutants_count_as_detected_and_are_named(tmp_path: Path) -> None:
    results = tmp_path / "results.txt"
    results.write_text("    a.b.x_f__mutmut_1: killed\n    a.b.x_f__mutmut_2: timeout\n")
    equivalents = tmp_path / "eq.toml"
    equivalents.write_text("")
    out = tmp_path / "report.md"
    args = [str(results), "--equivalents", str(equivalents), "--out", str(out)]
    assert mutation_report.main(args) == 0
    report = out.read_text()
    assert "| `src/a/b.py` | 100.0% | 2 | 2 | 0 | 0 | 0 | 1 |" in report
    named = report.split("## Timed out (counted as detected)")[1]
    assert "- `a.b.x_f__mutmut_2`" in named and "x_f__mutmut_1" not in named


def test_the_repository_equivalents_all_say_why() -> None:
    entries = mutation_report.load_equivalents(ROOT / "tests" / "mutation_equivalents.toml")
    for entry in entries:
        assert entry.mutant.startswith(("amptrain.", "stagegate.")) and entry.line and entry.why


def test_results_of_several_workspaces_make_one_report(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tiny project's results, plus a stagegate run elsewhere: one table; each listed
    # mutant's change is looked up in the directory its package ran in.
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "stagegate-results.txt"
    other.write_text("    stagegate.judge.x_f__mutmut_1: killed\n")
    listed = tmp_path / "eq.toml"
    listed.write_text(
        '[[equivalent]]\nmutant = "tinylib.calc.x_clamp__mutmut_1"\nline = "x"\nwhy = "-"\n'
    )
    out = tmp_path / "report.md"
    show = shlex.join([*MUTMUT, "show"])
    args = [str(tiny_run / "results.txt"), str(other), "--equivalents", str(listed)]
    args += ["--min-kill", "0", "--out", str(out), "--show-command", show]
    assert mutation_report.main([*args, "--workspace", f"tinylib={tiny_run}"]) == 1
    report = out.read_text()
    assert "| `stagegate/src/stagegate/judge.py` | 100.0% | 1 | 1 |" in report
    assert "| `src/tinylib/calc.py` |" in report
    assert "x_clamp__mutmut_1: its change is now ['if value <= low:']" in report
    with pytest.raises(SystemExit):
        mutation_report.main([*args, "--workspace", "tinylib"])


# `mutmut show` of a mutant that leaves an argument out: it adds no line
DELETION = """# amptrain.trainer.x__build_step__mutmut_44: survived
--- src/amptrain/trainer.py
+++ src/amptrain/trainer.py
@@ -20,6 +20,5 @@
         max_grad_norm=cfg.max_grad_norm,
         loss_fn=parts.loss_fn,
-        reduce=world.sum if world.distributed else None,
         ranks=world.size,
     )
"""


def test_a_listed_mutant_is_named_by_the_line_it_adds_or_else_the_one_it_deletes() -> None:
    assert mutation_report.changed_lines(DELETION) == [
        "-reduce=world.sum if world.distributed else None,"
    ]
    replaced = DELETION.replace("-        reduce=", "+        reduce=None,\n-        reduce=")
    assert mutation_report.changed_lines(replaced) == ["reduce=None,"]  # what it adds, then
