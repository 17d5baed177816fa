"""Coverage, warnings and curves files, from real runs and malformed in each way a crashed or
half-written stage leaves them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect import read_coverage, read_curves, read_warnings
from stagegate.errors import InputError
from stagegate.model import Location


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "f.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("reader", "what"),
    [
        (read_coverage, "coverage file"),
        (read_warnings, "warnings file"),
        (read_curves, "metrics file"),
    ],
)
def test_an_empty_file_is_named_for_what_it_should_hold(tmp_path: Path, reader, what) -> None:
    path = _write(tmp_path, "")
    with pytest.raises(InputError) as caught:
        reader(path)
    assert str(path) in str(caught.value) and str(caught.value).startswith(f"{what} ")
    assert "empty" in str(caught.value)


def _file(lines: int, of: int, percent: float) -> dict[str, Any]:
    """A file's entry as coverage json writes it: its summary and its missing lines."""
    return {
        "summary": _summary(lines, of, percent),
        "missing_lines": list(range(1, of - lines + 1)),
    }


@pytest.mark.parametrize(("lines", "of", "percent"), [(0, 4, 0), (1, 200, 0.5), (4, 4, 100)])
def test_any_coverage_from_none_to_all_is_a_figure(
    tmp_path: Path, lines: int, of: int, percent: float
) -> None:
    doc = {"totals": _summary(lines, of, percent), "files": {"a.py": _file(lines, of, percent)}}
    assert read_coverage(_write(tmp_path, doc)).percent == percent


def test_coverage_figures_must_be_numbers(tmp_path: Path) -> None:
    good = _file(1, 2, 50.0)
    doc = {"totals": {**_summary(1, 2, 50.0), "percent_covered": True}, "files": {"a.py": good}}
    path = _write(tmp_path, doc)
    with pytest.raises(InputError) as caught:
        read_coverage(path)
    assert str(path) in str(caught.value) and "totals.percent_covered" in str(caught.value)
    doc = {"totals": _summary(1, 2, 50.0), "files": {"b.py": {"summary": {"percent_covered": "x"}}}}
    path = _write(tmp_path, doc)
    with pytest.raises(InputError) as caught:
        read_coverage(path)
    assert "b.py" in str(caught.value) and "'x'" in str(caught.value)


def test_coverage_without_missing_lines_has_none(tmp_path: Path) -> None:
    doc = {"totals": _summary(3, 3, 100.0), "files": {"a.py": {"summary": _summary(3, 3, 100.0)}}}
    coverage = read_coverage(_write(tmp_path, doc))
    assert coverage.files[0].missing_lines == () and coverage.percent == 100.0


def test_a_warning_without_a_count_was_seen_once(tmp_path: Path) -> None:
    entry = {"category": "UserWarning", "message": "m", "file": "a.py", "line": 3}
    (warning,) = read_warnings(_write(tmp_path, {"warnings": [entry]}))
    assert warning.count == 1 and warning.location == Location("a.py", 3)


def test_curves_malformed_and_not_measured(tmp_path: Path) -> None:
    for doc in ([1, 2], {"curves": [1]}):
        path = _write(tmp_path, doc)
        with pytest.raises(InputError) as caught:
            read_curves(path)
        assert str(path) in str(caught.value) and "'curves'" in str(caught.value)
    path = _write(tmp_path, {"curves": {"loss": 3}})
    with pytest.raises(InputError) as caught:
        read_curves(path)
    assert str(path) in str(caught.value) and "'loss'" in str(caught.value)
    assert read_curves(_write(tmp_path, '{"curves": {"loss": [2, 1.5]}}')).series == {
        "loss": (2.0, 1.5)
    }
    for bad in ("null", '"x"', "true", "1e999"):  # 1e999: inf
        with pytest.raises(InputError, match=r"'loss' holds .* at \[2\] \(1 values"):
            read_curves(_write(tmp_path, f'{{"curves": {{"loss": [2, 1.5, {bad}]}}}}'))
    with pytest.raises(InputError, match=r"literal NaN.* at \$\.curves\.loss\[2\]"):
        read_curves(_write(tmp_path, '{"curves": {"loss": [2, 1.5, NaN]}}'))


@pytest.mark.slow
def test_coverage_json_from_a_real_run(sample_run: dict) -> None:
    cov = read_coverage(sample_run["coverage"])
    (helper,) = cov.files
    assert helper.path == "helper.py" and cov.percent == 100.0 and helper.missing_lines == ()


@pytest.mark.parametrize(
    ("reader", "content", "message"),
    [
        (read_coverage, "{}", "no 'totals'"),
        (read_coverage, "{not json", "not valid JSON"),
        (read_warnings, '{"warnings": [{"message": "m"}]}', "entry 0"),
        (read_warnings, "[]", "no 'warnings' list"),
    ],
)
def test_malformed_json_files_say_what_is_wrong(
    tmp_path: Path, reader, content: str, message: str
) -> None:
    path = tmp_path / "f.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        reader(path)


def _summary(lines: int, of: int, percent: float) -> dict[str, float]:
    return {"covered_lines": lines, "num_statements": of, "percent_covered": percent}


@pytest.mark.parametrize(
    ("totals", "files", "said"),
    [
        # totals claim 99%; the one file counts 1 of 100 lines
        (_summary(99, 100, 99.0), [_summary(1, 100, 1.0)], "do not add up"),
        (_summary(1, 100, 99.0), [_summary(1, 100, 1.0)], "is not the 1 of 100"),
        (
            _summary(2, 100, 2.0),
            [_summary(1, 50, 2.0), _summary(1, 50, 20.0)],
            "is not the 1 of 50",
        ),
        (_summary(101, 100, 100.0), [_summary(101, 100, 100.0)], "more lines"),
        (_summary(5, 10, 50.0), [{"percent_covered": 50.0}], "no covered_lines and num_statements"),
        # a percent alone, over a file that counts 10%; or a total of nothing measured
        ({"percent_covered": 95.0}, [_summary(10, 100, 10.0)], "no covered_lines"),
        (_summary(0, 0, 100.0), [], "measured no line of code"),
        # the summary counts 2 lines not covered and lists 1
        (_summary(3, 5, 60.0), [{**_summary(3, 5, 60.0), "missing_lines": [4]}], "lists 1 missing"),
    ],
)
def test_coverage_counts_that_contradict_each_other_are_refused(
    tmp_path: Path, totals: dict, files: list[dict], said: str
) -> None:
    entries = {f"f{i}.py": _entry(s) for i, s in enumerate(files)}
    with pytest.raises(InputError) as caught:
        read_coverage(_write(tmp_path, {"totals": totals, "files": entries}))
    assert said in str(caught.value)


def _entry(summary: dict[str, Any]) -> dict[str, Any]:
    """A file's entry with the missing lines its summary counts, unless it lists its own."""
    if "missing_lines" in summary:
        return {"summary": summary, "missing_lines": summary["missing_lines"]}
    missing = summary.get("num_statements", 0) - summary.get("covered_lines", 0)
    return {"summary": summary, "missing_lines": list(range(1, missing + 1))}


def test_coverage_counts_of_lines_and_branches_give_its_percent(tmp_path: Path) -> None:
    # as coverage json writes them: (covered lines + branches) / (lines + branches)
    a = {**_summary(8, 10, 75.0), "covered_branches": 1, "num_branches": 2}
    b = {**_summary(10, 10, 100.0), "covered_branches": 0, "num_branches": 0}
    totals = {**_summary(18, 20, 86.36363636), "covered_branches": 1, "num_branches": 2}
    doc = {"totals": totals, "files": {"a.py": _entry(a), "b.py": _entry(b)}}
    assert read_coverage(_write(tmp_path, doc)).percent == pytest.approx(86.36, abs=0.01)
