"""What stagegate says, pinned: every finding, stage verdict and error a test makes, in words.

The tests assert behaviour (the kind, the field, the status, the decision) and leave the words
free; but the words are what a reader of a blocked report acts on. So each test's findings,
verdict notes and the messages of the errors stagegate raises (each a ``StagegateError``: a bad
policy value, an unreadable file) are recorded and compared with ``fixtures/said/<test
module>.json``, one entry per test, the way the gold reports pin whole reports: a change of
wording shows as a diff there.

    STAGEGATE_UPDATE_GOLD=1 python -m pytest stagegate/tests   # rewrite, then read the diff

An entry is keyed by the test's name within its module (with its parameters); a test that makes
no finding, verdict or error has none. Paths under pytest's temporary directory are written as
``<tmp>`` (the test's own folder included), this folder as ``<tests>``, the interpreter as
``<python>`` and times of the run itself as ``<now>``, so the entries do not depend on where or
when they ran; property tests (hypothesis) draw their inputs at random and are not pinned.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from stagegate.model import BaselineComparison, Finding, StageVerdict

HERE = Path(__file__).resolve().parent  # stagegate/tests, or the copy mutmut tests
SAID, TESTS = HERE / "fixtures" / "said", str(HERE)
UPDATE = "STAGEGATE_UPDATE_GOLD"


def _number(value: float) -> str:
    return f"{value:.6g}"


def finding_entry(x: Finding) -> dict[str, Any]:
    """A finding as the report shows it: severity, kind, words and where."""
    where = None if x.location is None else str(x.location)
    return {
        "severity": x.severity.value,
        "stage": x.stage,
        "kind": x.kind,
        "title": x.title,
        "detail": x.detail,
        "fix": x.fix,
        "location": where,
    }


def _row(*values: Any) -> list[Any]:
    return [_number(v) if isinstance(v, float) else v for v in values]


def verdict_entry(v: StageVerdict) -> dict[str, Any]:
    """A stage verdict's own words and figures (its findings are recorded as they are made)."""
    checks = [
        _row(c.comparison.precision, c.comparison.baseline, c.metric, c.value, c.target)
        + _row(c.outcome.value, c.why)
        for c in v.checks
    ]
    ab = [
        _row(c.metric, c.ratio, c.low, c.high, c.limit, c.outcome.value, c.windows)
        + _row(c.base_sha, c.head_sha)
        for c in v.ab
    ]
    entry: dict[str, Any] = {"stage": v.name, "status": v.status.value, "score": v.score}
    entry |= {"required": v.required, "skippable": v.skippable, "note": v.note}
    entry |= {"checks": checks, "ab": ab, "history": [b.commit for b in v.history]}
    if v.baseline is not None:
        entry["baseline"] = _baseline(v.baseline)
    return entry


def _baseline(b: BaselineComparison) -> dict[str, Any]:
    changes = [
        _row(c.precision, c.metric, c.baseline, c.current, c.verdict, c.change_pct, c.margin_pct)
        for c in b.changes
    ]
    return {
        "comparable": b.comparable,
        "unusable": b.unusable,
        "of": [b.baseline_commit, b.baseline_datetime],
        "reason": b.reason,
        "not_verified": b.not_verified,
        "changes": changes,
    }


@dataclass
class Said:
    """What one test made the judge say."""

    key: str
    tmp: str
    entries: list[dict[str, Any]] = field(default_factory=list)

    def add(self, kind: str, entry: dict[str, Any]) -> None:
        self.entries.append({kind: _scrub(entry, self.tmp)})

    def check(self, module: str) -> None:
        """Compare with the module's gold entry, or rewrite it under STAGEGATE_UPDATE_GOLD=1."""
        path = SAID / f"{module}.json"
        if os.environ.get(UPDATE) == "1":
            _update(path, self.key, self.entries)
            return
        gold = _gold(path).get(self.key)
        if gold is None and not self.entries:
            return
        assert gold is not None, (
            f"{self.key} makes findings with no entry in {path.name}: run {UPDATE}=1 python -m "
            "pytest stagegate/tests and read the diff"
        )
        assert self.entries == gold, (
            f"the judge's words for {self.key} differ from {path.name} "
            f"({_first_difference(gold, self.entries)}): if the change is meant, run "
            f"{UPDATE}=1 python -m pytest stagegate/tests and read the diff"
        )


@functools.cache
def _gold(path: Path) -> dict[str, Any]:
    """A module's entries, read once per process."""
    return json.loads(path.read_text()) if path.exists() else {}


def _first_difference(gold: list[dict[str, Any]], said: list[dict[str, Any]]) -> str:
    for i, (was, now) in enumerate(zip(gold, said, strict=False)):
        if was != now:
            return f"entry {i}: gold {was!r}, now {now!r}"
    return f"gold has {len(gold)} entries, now {len(said)}"


# A time of this run (a stage's start and end, between the test process's start and now, a
# minute either side): written as <now>; fixed times in fixtures stay.
TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")
STARTED = datetime.now(UTC)
SLACK = timedelta(minutes=1)
# A test's own temporary directory, numbered in the order a worker made them: the number goes.
TMP = re.compile(r"<tmp>/[^/\s'\"]*")


def _now(match: re.Match[str]) -> str:
    text = match.group()
    try:
        when = datetime.fromisoformat(text.replace(" ", "T").replace("Z", "+00:00"))
    except ValueError:  # not a date at all (month 13): a test's impossible input
        return text
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return "<now>" if STARTED - SLACK <= when <= datetime.now(UTC) + SLACK else text


def _scrub(value: Any, tmp: str) -> Any:
    if isinstance(value, str):
        for path, name in ((tmp, "<tmp>"), (sys.executable, "<python>"), (TESTS, "<tests>")):
            value = value.replace(path, name)
        return TIME.sub(_now, TMP.sub("<tmp>", value))
    if isinstance(value, dict):
        return {k: _scrub(v, tmp) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, tmp) for v in value]
    return value


def _update(path: Path, key: str, entries: list[dict[str, Any]]) -> None:
    """Write one test's entry into its module's file (tests of a module may run in several
    workers at once: the file is locked while it is read and written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        text = handle.read()
        table = json.loads(text) if text else {}
        if entries:
            table[key] = entries
        else:
            table.pop(key, None)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(dict(sorted(table.items())), indent=1, ensure_ascii=False) + "\n")
