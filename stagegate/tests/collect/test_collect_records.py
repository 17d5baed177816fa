"""Stage records: read with their format checked, found one per stage in a raw directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stagegate.collect import find_records, load_record
from stagegate.errors import InputError
from stagegate.model import StageRecord

from ..builders import CORE_STAGES, record


@pytest.fixture
def raw(tmp_path: Path, fixtures: Path) -> Path:
    shutil.copytree(fixtures / "stagegate" / "pass-cpu", tmp_path / "raw")
    return tmp_path / "raw"


def test_every_stage_record_is_found_and_other_outputs_are_left_alone(raw: Path) -> None:
    records = find_records(raw).records
    assert sorted(records) == sorted(CORE_STAGES)
    assert all(isinstance(r, StageRecord) and r.stage == s for s, r in records.items())
    (raw / "nightly.json").write_text(record("nightly").to_json())
    assert "nightly" in find_records(raw).records  # a stage this gate does not know is a record


def test_a_record_written_is_the_record_read(tmp_path: Path) -> None:
    path = tmp_path / "execution.json"
    written = record(files={"junit": "j.xml"}, environment={"python": "3.11"})
    path.write_text(written.to_json())
    assert load_record(path) == written


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"format_version": 1, "kind": "stagegate-rec', "not valid JSON"),
        ("[1]", "not a JSON object"),
        ('{"format_version": 9, "kind": "stagegate-record"}', "format_version 9"),
        ('{"format_version": 2, "kind": "stagegate-record", "stage": "x"}', "missing fields"),
        ('{"format_version": 1, "kind": "stagegate-record", "stage": "x"}', "format_version 1"),
    ],
)
def test_a_broken_record_says_what_is_wrong(raw: Path, content: str, said: str) -> None:
    (raw / "static.json").write_text(content)
    with pytest.raises(InputError, match=said) as caught:
        load_record(raw / "static.json")
    assert "static.json" in str(caught.value)
    if said == "not valid JSON":  # named after a declared stage: a broken record, not some file
        scan = find_records(raw, ("static",))
        assert "static" not in scan.records and said in scan.problems["static"]


def test_two_records_for_one_stage_are_its_problem_and_no_directory_an_input_error(
    raw: Path,
) -> None:
    shutil.copy(raw / "execution.json", raw / "execution-copy.json")
    scan = find_records(raw)
    assert "execution" not in scan.records and "execution-copy.json" in scan.problems["execution"]
    assert set(scan.records) == set(CORE_STAGES) - {"execution"}
    with pytest.raises(InputError, match="not a directory") as caught:
        find_records(raw / "absent")
    assert "nox" not in str(caught.value)


def test_a_json_file_that_is_no_record_is_not_one(raw: Path) -> None:
    (raw / "other.json").write_text(json.dumps({"kind": "something-else"}))
    (raw / "garbage.json").write_text("{")  # named after no stage: some other stage's output
    scan = find_records(raw)
    assert sorted(scan.records) == sorted(CORE_STAGES) and not scan.problems
