"""The pinned words of the judge (tests/said.py): a change of wording fails, and the gold files
name only tests that exist."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest

from . import said
from .said import SAID, Said

HERE = Path(__file__).resolve().parent


@pytest.fixture
def gold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(said, "SAID", tmp_path)
    monkeypatch.delenv(said.UPDATE, raising=False)
    entry = [{"finding": {"title": "stage timed out after 3 s", "fix": "raise --timeout"}}]
    (tmp_path / "test_mod.json").write_text(json.dumps({"test_x": entry}))
    return tmp_path


def test_the_same_words_pass(gold: Path) -> None:
    s = Said("test_x", "/tmp/base")
    s.add("finding", {"title": "stage timed out after 3 s", "fix": "raise --timeout"})
    s.check("test_mod")


def test_changed_words_fail_and_name_the_entry(gold: Path) -> None:
    s = Said("test_x", "/tmp/base")
    s.add("finding", {"title": "stage timed out after 4 s", "fix": "raise --timeout"})
    with pytest.raises(AssertionError, match="entry 0") as raised:
        s.check("test_mod")
    assert "after 4 s" in str(raised.value) and said.UPDATE in str(raised.value)


@pytest.mark.parametrize("key", ["test_x", "test_y"])
def test_words_gone_or_new_fail(gold: Path, key: str) -> None:
    s = Said(key, "/tmp/base")
    if key == "test_y":  # new: no entry in the gold file
        s.add("finding", {"title": "t"})
    with pytest.raises(AssertionError):
        s.check("test_mod")


def test_a_test_that_says_nothing_needs_no_entry(gold: Path) -> None:
    Said("test_z", "/tmp/base").check("test_mod")


def test_update_writes_the_entry_and_drops_an_emptied_one(
    gold: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(said.UPDATE, "1")
    s = Said("test_w", "/tmp/base")
    s.add("finding", {"title": "read /tmp/base/test_w0/junit.xml", "detail": "at 2026-01-02"})
    s.check("test_mod")
    Said("test_x", "/tmp/base").check("test_mod")
    table = json.loads((gold / "test_mod.json").read_text())
    assert table == {
        "test_w": [{"finding": {"title": "read <tmp>/junit.xml", "detail": "at 2026-01-02"}}]
    }


def test_times_of_this_run_are_scrubbed_and_older_ones_kept() -> None:
    now = said.STARTED.strftime("%Y-%m-%dT%H:%M:%SZ")
    s = Said("k", "/nowhere")
    s.add("verdict", {"note": f"ran {now}; baseline of 2026-01-02T03:04:05Z"})
    assert s.entries == [{"verdict": {"note": "ran <now>; baseline of 2026-01-02T03:04:05Z"}}]


def test_every_entry_names_a_test_of_its_module() -> None:
    stale = []
    for path in sorted(SAID.glob("*.json")):
        source = (
            (HERE / f"{path.stem}.py").read_text() if (HERE / f"{path.stem}.py").exists() else ""
        )
        defined = set(re.findall(r"^\s*(?:def|class) (\w+)", source, re.M))
        for key in json.loads(path.read_text()):
            names = re.sub(r"\[.*", "", key).split("::")
            if not set(names) <= defined:
                stale.append(f"{path.name}: {key}")
    assert not stale, f"entries of tests that are gone (delete them): {stale[:10]}"


def test_a_time_that_is_no_date_is_kept_as_it_is() -> None:
    s = Said("k", "/nowhere")
    s.add("error", {"message": "start 2026-13-40T00:00:00Z is not a time"})
    assert s.entries == [{"error": {"message": "start 2026-13-40T00:00:00Z is not a time"}}]


def test_a_fixed_time_an_hour_from_the_run_is_kept() -> None:
    hour_ago = (said.STARTED - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    s = Said("k", "/nowhere")
    s.add("verdict", {"note": f"baseline of {hour_ago}"})
    assert s.entries == [{"verdict": {"note": f"baseline of {hour_ago}"}}]
