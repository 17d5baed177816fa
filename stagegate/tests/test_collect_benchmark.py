"""read_benchmark on a real cpu-smoke result, altered one key at a time: every missing key is
an InputError naming the file and the place, and every optional key has its stated default."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect.benchmark import read_benchmark
from stagegate.errors import InputError

SOURCE = Path(__file__).resolve().parent / "fixtures" / "stagegate" / "pass-cpu"
REAL = json.loads((SOURCE / "benchmark.json").read_text())


def _write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps(doc))
    return path


def _altered(change: Any) -> dict:
    doc = copy.deepcopy(REAL)
    change(doc)
    return doc


def _bf16(doc: dict) -> dict:
    return doc["precisions"]["bf16-mixed"]


MISSING = [
    (lambda d: d.pop("machine_info"), "the document has no 'machine_info'"),
    (lambda d: d.pop("precisions"), "the document has no 'precisions'"),
    (lambda d: d.pop("preset"), "the document has no 'preset'"),
    (lambda d: _bf16(d).pop("status"), "precisions.bf16-mixed has no 'status'"),
    (lambda d: _bf16(d).pop("stats"), "precisions.bf16-mixed has no 'stats'"),
    (lambda d: _bf16(d).pop("steps_per_window"), "precisions.bf16-mixed has no 'steps_per_window'"),
    (lambda d: _bf16(d).pop("health"), "precisions.bf16-mixed has no 'health'"),
    (lambda d: _bf16(d).pop("window_s"), "precisions.bf16-mixed has no 'window_s'"),
    (lambda d: d["precisions"].update(x=["status"]), "precisions.x has no 'status'"),
    (lambda d: d["comparisons"][0].pop("speedup"), "comparisons[0] has no 'speedup'"),
    (lambda d: d["comparisons"][0].pop("precision"), "comparisons[0] has no 'precision'"),
    (lambda d: d["comparisons"][0].pop("baseline"), "comparisons[0] has no 'baseline'"),
]


@pytest.mark.parametrize(("change", "message"), MISSING)
def test_a_missing_key_names_the_file_and_the_place(tmp_path: Path, change, message: str) -> None:
    path = _write(tmp_path, _altered(change))
    with pytest.raises(InputError) as caught:
        read_benchmark(path)
    place, key = message.split(" has no ")
    assert str(path) in str(caught.value) and all(w in str(caught.value) for w in (place, key))


@pytest.mark.parametrize("precisions", [{}, ["32-true"]])
def test_no_precision_measured(tmp_path: Path, precisions: Any) -> None:
    path = _write(tmp_path, _altered(lambda d: d.update(precisions=precisions)))
    with pytest.raises(InputError) as caught:
        read_benchmark(path)
    assert str(path) in str(caught.value) and "no precision" in str(caught.value)


def test_wrong_format_version_and_bad_json_say_so(tmp_path: Path) -> None:
    path = _write(tmp_path, _altered(lambda d: d.update(format_version=2)))
    with pytest.raises(InputError) as caught:
        read_benchmark(path)
    assert str(path) in str(caught.value) and "format_version 2" in str(caught.value)
    path.write_text("{")
    with pytest.raises(InputError, match="not valid JSON") as caught:
        read_benchmark(path)
    assert str(path) in str(caught.value)


def test_the_real_result_reads_whole(tmp_path: Path) -> None:
    bench = read_benchmark(_write(tmp_path, REAL))
    assert (bench.preset, bench.device) == (REAL["preset"]["name"], REAL["device"])
    bf16 = {p.name: p for p in bench.precisions}["bf16-mixed"]
    raw = _bf16(REAL)
    assert bf16.precision_used == raw["precision_used"] and bf16.error == raw["error"]
    steps = raw["steps_per_window"]
    assert bf16.iqr_ms == pytest.approx(raw["stats"]["iqr"] / steps * 1e3)
    assert bf16.window_s == tuple(raw["window_s"])
    (comparison,) = bench.comparisons
    raw_c = REAL["comparisons"][0]
    assert (comparison.precision, comparison.baseline) == ("bf16-mixed", "32-true")
    assert comparison.speedup == raw_c["speedup"]
    assert comparison.val_loss_diff == raw_c["val_loss_diff"]


def test_optional_keys_take_their_defaults(tmp_path: Path) -> None:
    def strip(d: dict) -> None:
        d.pop("device")
        d["preset"].pop("name")
        _bf16(d).pop("precision_used")
        _bf16(d)["stats"]["iqr"] = None
        _bf16(d)["window_s"] = [0.5, None, math.inf, 0, 0.25]
        d["comparisons"][0]["speedup"] = None

    bench = read_benchmark(_write(tmp_path, _altered(strip)))
    assert (bench.preset, bench.device) == ("?", "?")
    bf16 = {p.name: p for p in bench.precisions}["bf16-mixed"]
    assert bf16.precision_used == "bf16-mixed" and bf16.iqr_ms is None
    # every window keeps its place: what is not a finite number reads as None, for the judge
    assert bf16.window_s == (0.5, None, None, 0.0, 0.25)
    assert math.isnan(bench.comparisons[0].speedup)


def test_iqr_needs_steps_per_window(tmp_path: Path) -> None:
    path = _write(tmp_path, _altered(lambda d: _bf16(d).update(steps_per_window=0)))
    bf16 = {p.name: p for p in read_benchmark(path).precisions}["bf16-mixed"]
    assert bf16.iqr_ms is None


def test_a_failed_precision_keeps_its_error_and_a_nonfinite_one_its_figures(
    tmp_path: Path,
) -> None:
    def change(d: dict) -> None:
        d["precisions"]["16-mixed"] = {"status": "error", "error": "boom"}
        _bf16(d)["status"] = "nonfinite"
        _bf16(d)["step_time_ms"] = math.nan
        _bf16(d)["mfu"] = True  # a bool is not a figure

    bench = read_benchmark(_write(tmp_path, _altered(change)))
    by_name = {p.name: p for p in bench.precisions}
    failed = by_name["16-mixed"]
    assert (failed.status, failed.error, failed.precision_used) == ("error", "boom", "16-mixed")
    assert failed.step_time_ms is None
    nonfinite = by_name["bf16-mixed"]
    assert nonfinite.status == "nonfinite" and nonfinite.step_time_ms is None  # NaN: not measured
    assert nonfinite.mfu is None
    assert nonfinite.tokens_per_second == _bf16(REAL)["tokens_per_second"]
