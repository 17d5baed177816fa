"""The A/B file read as it is written (amptrain.benchmark.ab's output): every field the judge
and the A/B view use, and each malformed shape an InputError naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect.ab import read_ab
from stagegate.errors import InputError

from ..builders import FIXTURES

REAL = json.loads((FIXTURES / "ab-cpu-self.json").read_text())


def written(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_real_file_reads_as_written(tmp_path: Path) -> None:
    run = read_ab(written(tmp_path, REAL))
    assert (run.status, run.preset, run.precision, run.device) == (
        "ok",
        REAL["preset"],
        "bf16-mixed",
        REAL["device"],
    )
    assert run.order == tuple(REAL["order"]) and run.windows == REAL["windows"]
    assert run.head.window_s == tuple(REAL["head"]["window_s"])
    assert run.base.peak_mb == tuple(REAL["base"]["peak_mb"])
    assert run.head.dirty is False and run.head.sha == REAL["head"]["sha"]


@pytest.mark.parametrize(
    ("change", "field", "read"),
    [
        (lambda d: d["head"].update(dirty=True), "dirty", True),
        (lambda d: d["head"].update(dirty="yes"), "dirty", None),  # not a bool: unknown
        (lambda d: d["head"].pop("dirty"), "dirty", None),
        (lambda d: d["head"].update(preset=[1]), "preset", {}),
    ],
)
def test_a_sides_own_fields(tmp_path: Path, change: Any, field: str, read: object) -> None:
    doc = copy.deepcopy(REAL)
    change(doc)
    assert getattr(read_ab(written(tmp_path, doc)).head, field) == read


def test_version_1_and_2_read_alike_and_a_summary_is_never_read(tmp_path: Path) -> None:
    """The committed A/B files are format 1, with a summary; format 2 holds none. Either way
    the run read is the windows: a summary, however wrong or malformed, changes nothing."""
    v2 = copy.deepcopy(REAL)
    v2["format_version"] = 2
    del v2["summary"]
    assert REAL["format_version"] == 1 and "summary" in REAL
    plain = read_ab(written(tmp_path, v2))
    assert read_ab(written(tmp_path, REAL)) == plain
    for summary in ({"step_time_ratio": 9.0, "step_time_ratio_ci95": [9, 10]}, [1], "x"):
        assert read_ab(written(tmp_path, {**v2, "summary": summary})) == plain
    for version in (0, 3, True, "2"):
        with pytest.raises(InputError, match="format_version"):
            read_ab(written(tmp_path, {**v2, "format_version": version}))


def test_an_order_of_the_wrong_shape_reads_as_none(tmp_path: Path) -> None:
    doc = copy.deepcopy(REAL)
    doc["order"] = "base,head"
    assert read_ab(written(tmp_path, doc)).order == ()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.pop("head"), "'head'"),
        (lambda d: d.update(base=[1]), "'base'"),
        (lambda d: d["head"].update(window_s=3.0), "head.window_s"),
        (lambda d: d["base"].update(peak_mb="1,2"), "base.peak_mb"),
    ],
)
def test_a_side_of_the_wrong_shape_is_an_input_error_naming_it(
    tmp_path: Path, change: Any, words: str
) -> None:
    doc = copy.deepcopy(REAL)
    change(doc)
    with pytest.raises(InputError) as raised:
        read_ab(written(tmp_path, doc))
    assert words in str(raised.value) and "ab.json" in str(raised.value)
