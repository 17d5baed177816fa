"""read_benchmark on a real cpu-smoke result, altered one key at a time: every missing key is
an InputError naming the file and the place, and every optional key has its stated default."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect.benchmark import read_benchmark
from stagegate.errors import InputError

from ..builders import FIXTURES_ROOT

SOURCE = FIXTURES_ROOT / "stagegate" / "pass-cpu"
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
    (lambda d: _bf16(d).pop("steps_per_window"), "precisions.bf16-mixed has no 'steps_per"),
    (lambda d: _bf16(d).pop("steps_per_window"), "precisions.bf16-mixed has no 'steps_per_window'"),
    (lambda d: _bf16(d).pop("health"), "precisions.bf16-mixed has no 'health'"),
    (lambda d: _bf16(d).pop("window_s"), "precisions.bf16-mixed has no 'window_s'"),
    (lambda d: d["precisions"].update(x=["status"]), "precisions.x has no 'status'"),
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
    path = _write(tmp_path, _altered(lambda d: d.update(format_version=3)))
    with pytest.raises(InputError) as caught:
        read_benchmark(path)
    assert str(path) in str(caught.value) and "format_version 3" in str(caught.value)
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
    assert REAL["format_version"] == 2 and "comparisons" not in REAL
    assert bf16.window_s == tuple(raw["window_s"])
    assert bf16.steps_per_window == raw["steps_per_window"]
    assert bf16.step_time_ms is None and bf16.iqr_ms is None  # the judge derives them
    fp8 = {p.name: p for p in bench.precisions}["fp8"]
    raw_fp8 = REAL["precisions"]["fp8"]
    assert (fp8.fp8_layers, fp8.fp8_emulated) == (raw_fp8["fp8_layers"], True)
    assert fp8.fp8_layers > 0 and bf16.fp8_layers is None and bf16.fp8_emulated is None


def test_optional_keys_take_their_defaults(tmp_path: Path) -> None:
    def strip(d: dict) -> None:
        d.pop("device")
        d["preset"].pop("name")
        _bf16(d).pop("precision_used")
        _bf16(d)["window_s"] = [0.5, None, "slow", 0, 0.25]

    bench = read_benchmark(_write(tmp_path, _altered(strip)))
    assert (bench.preset, bench.device) == ("?", "?")
    bf16 = {p.name: p for p in bench.precisions}["bf16-mixed"]
    assert bf16.precision_used is None  # never filled in from the name
    # every window keeps its place: what is not a finite number reads as None, for the judge
    assert bf16.window_s == (0.5, None, None, 0.0, 0.25)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('"window_s": [0.5, NaN]', "NaN, which is not JSON (write null) at $.precisions["),
        ('"window_s": [0.5, 1], "window_s": [0.5]', "key 'window_s' twice"),
        ('"window_s": [' + "9" * 5000 + "]", "an integer of 5000 digits"),
    ],
    ids=["nan", "duplicate-key", "huge-integer"],
)
def test_what_no_producer_writes_is_refused_naming_where(
    tmp_path: Path, text: str, said: str
) -> None:
    """A later duplicate key would win in one parser and lose in another; NaN is not JSON; a
    5,000-digit integer costs seconds to convert: each is refused, naming its place."""
    path = _write(tmp_path, REAL)
    raw = path.read_text()
    window = re.search(r'"window_s": \[[^\]]*\]', raw)
    assert window is not None
    path.write_text(raw[: window.start()] + text + raw[window.end() :])
    with pytest.raises(InputError) as caught:
        read_benchmark(path)
    assert said in str(caught.value) and "benchmark.json" in str(caught.value)


def test_a_failed_precision_keeps_its_error_and_a_nonfinite_one_its_figures(
    tmp_path: Path,
) -> None:
    def change(d: dict) -> None:
        d["precisions"]["16-mixed"] = {"status": "error", "error": "boom"}
        _bf16(d)["status"] = "nonfinite"
        _bf16(d)["val_loss"] = True  # a bool is not a figure

    bench = read_benchmark(_write(tmp_path, _altered(change)))
    by_name = {p.name: p for p in bench.precisions}
    failed = by_name["16-mixed"]
    assert (failed.status, failed.error, failed.precision_used) == ("error", "boom", None)
    assert failed.window_s == () and failed.peak_mb is None
    nonfinite = by_name["bf16-mixed"]
    assert nonfinite.status == "nonfinite" and nonfinite.val_loss is None
    assert nonfinite.window_s == tuple(_bf16(REAL)["window_s"])


def test_a_missing_key_is_named_in_its_place(tmp_path: Path) -> None:
    """The place and the key together, as one phrase: "precisions.bf16-mixed has no 'status'"."""
    for change, message in MISSING:
        with pytest.raises(InputError) as caught:
            read_benchmark(_write(tmp_path, _altered(change)))
        assert message in str(caught.value)


WRONG_SHAPE = [
    (lambda d: _bf16(d)["health"].update(syncs_in_step="x"), "health.syncs_in_step"),
    (lambda d: _bf16(d)["health"].update(matmul_dtypes=3), "health.matmul_dtypes"),
    (lambda d: _bf16(d)["health"]["matmul_dtypes"].update(observed=[]), "matmul_dtypes.observed"),
    (
        lambda d: _bf16(d)["health"]["matmul_dtypes"].update(observed={"float32": 1.5}),
        "matmul_dtypes.observed",
    ),
    (lambda d: _bf16(d)["health"].update(live_tensors=[]), "health.live_tensors"),
    (lambda d: _bf16(d)["health"].update(inference_latency_ms="x"), "inference_latency_ms"),
    (lambda d: _bf16(d)["health"]["syncs_in_step"].update(locations={}), "syncs_in_step.locations"),
    (
        lambda d: _bf16(d)["health"]["syncs_in_step"].update(locations=["x"]),
        "syncs_in_step.locations",
    ),
    (
        lambda d: _bf16(d)["health"]["syncs_in_step"].update(locations=[{"location": "a.py:1"}]),
        "syncs_in_step.locations",
    ),
    (
        lambda d: _bf16(d)["health"]["syncs_in_step"].update(locations=[{"count": 1}]),
        "syncs_in_step.locations",
    ),
    (lambda d: _bf16(d).update(health=None), "precisions.bf16-mixed.health"),
    (lambda d: _bf16(d).update(memory=[]), "precisions.bf16-mixed.memory"),
    (lambda d: _bf16(d).update(window_s=None), "precisions.bf16-mixed.window_s"),
    (lambda d: _bf16(d).update(loss_curve={}), "precisions.bf16-mixed.loss_curve"),
    (lambda d: d.update(settings=[]), "the document.settings"),
    (lambda d: d.update(commit_info="abc"), "the document.commit_info"),
    (lambda d: d.update(machine_info=None), "the document.machine_info"),
    (lambda d: d.update(preset="gpu"), "the document.preset"),
]


@pytest.mark.parametrize(("change", "place"), WRONG_SHAPE)
def test_a_value_of_the_wrong_shape_names_the_file_and_its_place(
    tmp_path: Path, change, place: str
) -> None:
    path = _write(tmp_path, _altered(change))
    with pytest.raises(InputError) as caught:
        read_benchmark(path)
    assert str(path) in str(caught.value) and place in str(caught.value)


def test_an_absent_or_null_optional_part_reads_as_empty(tmp_path: Path) -> None:
    def strip(d: dict) -> None:
        for key in ("settings", "commit_info", "datetime"):
            d.pop(key)
        _bf16(d).pop("memory")
        _bf16(d).pop("loss_curve")
        _bf16(d)["health"].pop("syncs_in_step")
        for name in d["precisions"]:
            if name != "bf16-mixed":
                d["precisions"][name].update(memory=None, loss_curve=None)

    bench = read_benchmark(_write(tmp_path, _altered(strip)))
    assert bench.settings == {} and bench.commit is None
    assert bench.datetime == ""
    for p in bench.precisions:
        assert p.loss_curve == () and not p.memory_measured and p.peak_mb is None
    assert not {p.name: p for p in bench.precisions}["bf16-mixed"].syncs_measured


def test_what_a_precision_ran_as_is_read_as_written() -> None:
    path = SOURCE.parent / "benchmark-h100-80gb-hbm3.json"
    h100 = read_benchmark(path)
    by_name = {p.name: p for p in h100.precisions}
    assert by_name["32-tf32"].precision_used == "32-true"  # TF32 is fp32 with tensor cores
    assert by_name["bf16-mixed"].precision_used == "bf16-mixed"
    assert h100.commit == json.loads(path.read_text())["commit_info"]["id"]


def test_a_file_that_is_not_json_is_named_a_benchmark_file(tmp_path: Path) -> None:
    path = tmp_path / "benchmark.json"
    path.write_text("{")
    with pytest.raises(InputError, match="benchmark file"):
        read_benchmark(path)
