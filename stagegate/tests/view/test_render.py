"""Rendering: templates substitute what views built; verdict.json carries the judge's typed
decision as words a machine reads."""

from __future__ import annotations

import json

import jinja2
import pytest

from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import Location, StageData
from stagegate.view.render import render, verdict_json

from ..builders import case, record, suite


def test_verdict_json_holds_the_decision_each_stage_and_its_findings() -> None:
    failed = case("b", "failed", location=Location("t.py", 2))
    stages = [
        judge_stage("execution", StageData(record(exit_code=1), suite=suite(failed)), Policy()),
        judge_stage("static", StageData(record("static")), Policy()),
    ]
    doc = json.loads(verdict_json(decide(stages), "now", "abc"))
    assert doc["decision"] == "BLOCK" and doc["score"] == 60 and doc["commit"] == "abc"
    execution, static = doc["stages"]
    assert (execution["status"], execution["exit_code"]) == ("FAIL", 1)
    (finding,) = execution["findings"]
    assert finding["kind"] == "test_failed" and finding["location"] == "t.py:2"
    assert static["status"] == "PASS" and static["findings"] == []


def test_a_template_value_that_is_missing_is_an_error_never_a_blank() -> None:
    with pytest.raises(jinja2.UndefinedError):
        render("comment.md.j2", marker="<!-- m -->", summary="s")  # no "truncated"
