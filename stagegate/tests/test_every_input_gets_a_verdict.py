"""No input in the raw folder ends the report without a verdict: whatever a stage's command
leaves in any of its files (random JSON, a subtree of the real file replaced, deep nesting,
huge integers, bytes that are no text), ``stagegate report`` judges it. Exit 2 is for the
report's own arguments, exit 3 for stagegate's own bugs, and a planted bug still reaches it.

The property tests are derandomized with a fixed number of examples: the same inputs every run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stagegate.cli import main
from stagegate.model import Decision
from stagegate.report import ReportOptions, build_report

from .builders import FIXTURES, POLICY_FILE, reseal

SCENARIO = FIXTURES / "pass-cpu"
JSON_FILES = sorted(p.name for p in SCENARIO.glob("*.json"))
EXAMPLES = settings(
    derandomize=True,
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
# What no JSON library writes, but a hostile command can
raw_texts = st.one_of(
    st.just("[" * 5000 + "]" * 5000),
    st.just('{"n": ' + "9" * 5000 + "}"),
    st.just('{"a": 1, "a": 2}'),
    st.just('{"x": NaN}'),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.text(max_size=200),
)


def _judged(raw: Path) -> Decision:
    options = ReportOptions(raw_dir=raw, out_dir=raw.parent / "out", pyproject=POLICY_FILE)
    verdict, files = build_report(options, {})
    assert "verdict.json" in files and "summary.md" in files
    return verdict.decision


def _fresh(tmp_path: Path) -> Path:
    raw = tmp_path / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    shutil.copytree(SCENARIO, raw)
    return raw


def _replace_somewhere(doc: Any, path: list[int], value: Any) -> Any:
    """``doc`` with the value that ``path`` picks (each index taken modulo the width of the
    container there) replaced by ``value``."""
    if not path or not isinstance(doc, dict | list) or not doc:
        return value
    keys = list(doc) if isinstance(doc, dict) else list(range(len(doc)))
    key = keys[path[0] % len(keys)]
    doc[key] = _replace_somewhere(doc[key], path[1:], value)
    return doc


@pytest.mark.slow
@pytest.mark.parametrize("name", JSON_FILES)
@EXAMPLES
@given(path=st.lists(st.integers(min_value=0), max_size=6), value=values)
def test_any_value_anywhere_in_a_json_file_gets_a_verdict(
    tmp_path: Path, name: str, path: list[int], value: Any
) -> None:
    raw = _fresh(tmp_path)
    doc = json.loads((raw / name).read_text())
    (raw / name).write_text(json.dumps(_replace_somewhere(doc, path, value)))
    reseal(raw)
    assert _judged(raw) in (Decision.PASS, Decision.BLOCK)


@pytest.mark.slow
@pytest.mark.parametrize("name", [*JSON_FILES, "junit-execution.xml", "stagegate-runs.jsonl"])
@EXAMPLES
@given(text=raw_texts)
def test_any_text_in_place_of_a_file_gets_a_verdict(tmp_path: Path, name: str, text: str) -> None:
    raw = _fresh(tmp_path)
    (raw / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    reseal(raw)
    assert _judged(raw) in (Decision.PASS, Decision.BLOCK)


@pytest.mark.slow
@EXAMPLES
@given(
    tags=st.lists(
        st.sampled_from(["testsuites", "testsuite", "testcase", "failure", "x"]), max_size=8
    ),
    attrs=st.dictionaries(
        st.sampled_from(["name", "tests", "failures", "errors", "time", "status", "file", "line"]),
        st.text(max_size=20),
        max_size=4,
    ),
)
def test_any_shape_of_junit_gets_a_verdict(
    tmp_path: Path, tags: list[str], attrs: dict[str, str]
) -> None:
    from xml.sax.saxutils import quoteattr

    raw = _fresh(tmp_path)
    shown = " ".join(f"{k}={quoteattr(v)}" for k, v in attrs.items())
    xml = "".join(f"<{t} {shown}>" for t in tags) + "".join(f"</{t}>" for t in reversed(tags))
    (raw / "junit-execution.xml").write_text(xml or "<testsuites/>")
    reseal(raw)
    assert _judged(raw) in (Decision.PASS, Decision.BLOCK)


def test_a_planted_bug_still_ends_in_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = _fresh(tmp_path)

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a bug in the judge")

    monkeypatch.setattr("stagegate.judge.stage.machine_findings", broken)
    code = main(
        ["report", str(raw), "--out", str(tmp_path / "out"), "--pyproject", str(POLICY_FILE)]
    )
    assert code == 3 and "internal error" in capsys.readouterr().err
