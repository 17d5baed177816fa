"""Coverage, warnings and curves files, malformed in each way a crashed or half-written stage
leaves them; and which traceback frame a failure is placed at."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect import read_coverage, read_curves, read_warnings
from stagegate.collect.junit import innermost_frame, last_frame
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
    assert str(caught.value) == f"{what} {path} is empty"


def test_coverage_figures_must_be_numbers(tmp_path: Path) -> None:
    good = {"summary": {"percent_covered": 50}}
    doc = {"totals": {"percent_covered": True}, "files": {"a.py": good}}
    path = _write(tmp_path, doc)
    with pytest.raises(InputError) as caught:
        read_coverage(path)
    assert str(caught.value) == f"{path}: totals.percent_covered should be a number, got True"
    doc = {
        "totals": {"percent_covered": 50},
        "files": {"b.py": {"summary": {"percent_covered": "x"}}},
    }
    path = _write(tmp_path, doc)
    with pytest.raises(InputError) as caught:
        read_coverage(path)
    assert str(caught.value) == f"{path}: b.py percent_covered should be a number, got 'x'"


def test_coverage_without_missing_lines_has_none(tmp_path: Path) -> None:
    doc = {
        "totals": {"percent_covered": 100},
        "files": {"a.py": {"summary": {"percent_covered": 100}}},
    }
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
        assert str(caught.value) == f"metrics file {path} has no 'curves' object"
    path = _write(tmp_path, {"curves": {"loss": 3}})
    with pytest.raises(InputError) as caught:
        read_curves(path)
    assert str(caught.value) == f"metrics file {path}: curve 'loss' is not a list"
    curves = read_curves(_write(tmp_path, '{"curves": {"loss": [2, 1.5, null, "x", NaN]}}'))
    loss = curves.series["loss"]
    assert loss[:2] == (2.0, 1.5) and all(math.isnan(v) for v in loss[2:])


FRAMES = """
tests/test_a.py:10: in test_a
    run()
src/pkg/core.py:20: in run
    step()
{root}/src/pkg/inner.py:30: in step
    lib()
.venv/lib/python3.11/site-packages/lib/x.py:40: in lib
    raise ValueError
/usr/lib/python3.11/other.py:50: ValueError
"""


def test_the_innermost_frame_in_the_checkout(tmp_path: Path) -> None:
    text = FRAMES.format(root=tmp_path)
    assert innermost_frame(text, root=tmp_path) == Location("src/pkg/inner.py", 30)
    # Frames outside the checkout only: the innermost of them all.
    deps = ".venv/lib/site-packages/a/b.py:5: in f\n/usr/lib/c.py:7: Error\n"
    assert innermost_frame(deps, root=tmp_path) == Location("/usr/lib/c.py", 7)
    assert innermost_frame("", root=tmp_path) is None


def test_the_last_frame_wherever_it_is(tmp_path: Path) -> None:
    assert last_frame(FRAMES.format(root=tmp_path)) == Location("/usr/lib/python3.11/other.py", 50)
