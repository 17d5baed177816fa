"""The files each declared stage must produce (``[tool.stagegate.stages.NAME] outputs``): a
stage whose record declares none of them verified nothing, and blocks naming each one it left
out."""

from __future__ import annotations

import pytest

from stagegate.errors import ConfigError
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy, policy_from_mapping
from stagegate.model import Decision, StageData, StageStatus

from ..builders import REPO_POLICY, bench, case, performance, record, suite

REPO = policy_from_mapping(
    {
        "stages": {
            "static": {"outputs": ["lint:ruff", "lint:zizmor"]},
            "execution": {"outputs": ["junit", "coverage", "warnings"]},
            "integration": {"outputs": ["junit", "metrics"]},
        }
    }
)


def _missing(verdict) -> list[str]:
    return [f.title for f in verdict.findings if f.kind == "output_missing"]


@pytest.mark.parametrize(
    "stage", ["static", "execution", "integration", "performance", "cuda", "regression"]
)
def test_a_stage_that_declares_nothing_blocks_naming_the_first_output(stage: str) -> None:
    v = judge_stage(stage, StageData(record(stage, files={})), REPO_POLICY)
    assert v.status is StageStatus.FAIL and decide([v]).decision is Decision.BLOCK
    first = REPO_POLICY.outputs[stage][0].partition(":")[0]
    missing = [f for f in v.findings if f.kind == "output_missing"]
    assert stage in missing[0].title and first in missing[0].title
    assert f"--{first}" in missing[0].fix


def test_a_performance_stage_without_a_benchmark_is_not_read_as_skipped() -> None:
    v = judge_stage("performance", StageData(record("performance", files={})), REPO_POLICY)
    assert v.status is StageStatus.FAIL and "NOT VERIFIED" not in v.note


def test_every_kind_the_policy_names_and_the_record_lacks_is_named() -> None:
    data = StageData(record("execution", files={"junit": "j.xml"}), suite=suite(case("a")))
    v = judge_stage("execution", data, REPO)
    assert sorted(_missing(v)) == [
        "execution produced no coverage file: the policy requires one",
        "execution produced no warnings file: the policy requires one",
    ]
    assert "junit" in v.findings[0].detail  # what the record did declare


def test_a_named_linter_must_have_its_own_file() -> None:
    only_ruff = record("static", files={"lint": {"ruff": "r.json"}})
    v = judge_stage("static", StageData(only_ruff), REPO)
    assert [t for t in _missing(v)] == [
        "static produced no lint:zizmor file: the policy requires one"
    ]
    assert "--lint=zizmor=FILE" in v.findings[0].fix
    both = record("static", files={"lint": {"ruff": "r.json", "zizmor": "z.json"}})
    assert judge_stage("static", StageData(both), REPO).status is StageStatus.PASS


def test_an_empty_lint_table_is_no_lint_file() -> None:
    v = judge_stage("static", StageData(record("static", files={"lint": {}})), Policy())
    assert _missing(v) == ["static produced no lint file: the policy requires one"]


def test_a_stage_that_declares_what_the_policy_requires_passes() -> None:
    declared = {"junit": "j.xml", "metrics": "m.json"}
    data = StageData(record("integration", files=declared), suite=suite(case("a")))
    assert judge_stage("integration", data, REPO).status is StageStatus.PASS
    clean = performance(bench(gpu=True))
    assert judge_stage("performance", clean, REPO_POLICY).status is StageStatus.PASS


def test_a_stage_the_policy_names_no_outputs_for_needs_none() -> None:
    v = judge_stage("docs", StageData(record("docs", files={})), Policy())
    assert _missing(v) == [] and v.status is StageStatus.PASS


@pytest.mark.parametrize(
    "stage",
    [
        {"outputs": ["lint:"]},
        {"outputs": ["sarif"]},
        {"outputs": ["junit:ruff"]},
        {"outputs": "lint"},
        {"skippable": "always"},
        {"colour": "blue"},
    ],
)
def test_a_bad_stage_declaration_names_its_key(stage: dict) -> None:
    with pytest.raises(ConfigError, match=r"stages\.static"):
        policy_from_mapping({"stages": {"static": stage}})


def test_a_stage_name_that_is_no_identifier_is_refused() -> None:
    with pytest.raises(ConfigError, match="Static Checks"):
        policy_from_mapping({"stages": {"Static Checks": {"outputs": ["lint"]}}})


def test_declared_stages_replace_the_default_ones_in_their_order() -> None:
    p = policy_from_mapping({"stages": {"docs": {"title": "Docs", "outputs": ["junit"]},
                                        "tests": {"order": 0}}})  # fmt: skip
    assert list(p.stages) == ["tests", "docs"] and p.required == ("tests", "docs")
    assert p.outputs == {"docs": ("junit",), "tests": ()} and p.title("docs") == "Docs"
    assert Policy().outputs == {"static": ("lint",), "execution": ("junit",)}
