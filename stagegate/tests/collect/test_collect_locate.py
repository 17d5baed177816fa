"""Where a named file is read from: under the raw directory, as the record's hash says it was
when the stage ended, or not at all (and why)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import pytest

from stagegate.collect.locate import locate

from ..builders import record


def _sealed(raw: Path, name: str, text: str, **kw: object):
    """A record written to ``reports/raw`` naming ``reports/raw/NAME``, hashed as ``text``."""
    (raw / name).write_text(text)
    path = f"reports/raw/{name}"
    digest = hashlib.sha256(text.encode()).hexdigest()
    return record(files={"junit": path}, out_dir="reports/raw", sha256={path: digest}, **kw), path


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    """A raw directory moved somewhere else than where its stage ran."""
    (tmp_path / "moved" / "raw").mkdir(parents=True)
    return tmp_path / "moved" / "raw"


def test_a_file_under_the_out_dir_is_read_from_the_same_place_under_raw(raw: Path) -> None:
    (raw / "lint").mkdir()
    rec, path = _sealed(raw, "lint/ruff.json", "[]")
    found = locate(rec, raw, path)
    assert found.path == raw / "lint" / "ruff.json" and not found.refused and not found.missing


@pytest.mark.parametrize(
    "named",
    [
        "reports/raw/../secret.json",
        "reports/secret.json",
        "/etc/passwd",
        "reports/raw/../../../../../../etc/passwd",
    ],
)
def test_a_path_out_of_raw_is_refused(raw: Path, named: str) -> None:
    (raw.parent / "secret.json").write_text("{}")
    rec = record(files={"junit": named}, out_dir="reports/raw", sha256={named: "0" * 64})
    found = locate(rec, raw, named)
    assert "outside the raw directory" in found.refused


def test_a_link_out_of_raw_is_refused_after_following_it(raw: Path) -> None:
    (raw.parent / "secret.xml").write_text("<testsuites/>")
    (raw / "junit.xml").symlink_to(raw.parent / "secret.xml")
    digest = hashlib.sha256(b"<testsuites/>").hexdigest()
    rec = record(
        files={"junit": "reports/raw/junit.xml"},
        out_dir="reports/raw",
        sha256={"reports/raw/junit.xml": digest},
    )
    assert "outside the raw directory" in locate(rec, raw, "reports/raw/junit.xml").refused


def test_a_file_changed_after_the_stage_is_refused(raw: Path) -> None:
    rec, path = _sealed(raw, "junit.xml", "<testsuites/>")
    assert not locate(rec, raw, path).refused
    (raw / "junit.xml").write_text("<testsuites><testsuite/></testsuites>")
    assert "changed after the stage ended" in locate(rec, raw, path).refused


def test_a_file_without_a_hash_or_written_after_the_stage_is_refused(raw: Path) -> None:
    rec, path = _sealed(raw, "junit.xml", "<testsuites/>")
    assert "holds no sha256" in locate(replace(rec, sha256={}), raw, path).refused
    appeared = replace(rec, sha256={path: None})  # the stage ended without it
    assert "something wrote it afterwards" in locate(appeared, raw, path).refused


def test_a_file_gone_since_the_stage_is_told_from_one_never_written(raw: Path) -> None:
    rec, path = _sealed(raw, "junit.xml", "<testsuites/>")
    os.remove(raw / "junit.xml")
    gone = locate(rec, raw, path)
    assert gone.missing and gone.disappeared and not gone.refused
    never = locate(replace(rec, sha256={path: None}), raw, path)
    assert never.missing and not never.disappeared


def test_a_folder_in_place_of_a_file_is_refused(raw: Path) -> None:
    rec, path = _sealed(raw, "junit.xml", "x")
    os.remove(raw / "junit.xml")
    (raw / "junit.xml").mkdir()
    assert "not a plain file" in locate(rec, raw, path).refused
