"""The run's commit, and a record of another one: a blocking finding naming both."""

from __future__ import annotations

from stagegate.judge import decide, judge_stage
from stagegate.judge.commits import run_changes, run_commit
from stagegate.judge.policy import Policy, policy_from_mapping
from stagegate.model import Decision, StageData, StageStatus
from stagegate.view.parts import Context
from stagegate.view.summary import summary_view

from ..builders import case, record, suite

A, B = "a" * 40, "b" * 40
CTX = Context("2026-01-01 00:00:00 UTC", A[:12], "main", (), "reports/raw")


def _records(*commits: str | None) -> dict:
    return {f"s{i}": record(f"s{i}", commit=c) for i, c in enumerate(commits)}


def test_the_run_commit_is_the_one_most_records_name() -> None:
    assert run_commit(_records(B, A, A)) == A
    assert run_commit(_records(A, B)) == A  # a tie: the first named
    assert run_commit(_records(None, A)) == A  # a tie: one that names a commit
    assert run_commit(_records(None, None, A)) == ""
    assert run_commit({}) == ""


def test_each_stage_is_held_to_the_changes_the_stage_before_it_left() -> None:
    """By start: each record of the commit that says what it saw, against the one before it
    (what its command left; what it began on, where it does not say)."""
    one, two = {"a.py": "1" * 64}, {"a.py": "2" * 64}
    records = {
        "c": record("c", commit=A, start="2026-01-01T00:00:03Z", changed_sha256=two),
        "a": record("a", commit=A, start="2026-01-01T00:00:01Z", changed_sha256={},
                    changed_sha256_end=one),
        "b": record("b", commit=A, start="2026-01-01T00:00:02Z", changed_sha256=one),
        "x": record("x", commit=B, start="2026-01-01T00:00:04Z", changed_sha256=one),
        "n": record("n", commit=A, start="2026-01-01T00:00:05Z"),  # does not say
    }  # fmt: skip
    assert run_changes(records, A) == {"b": ("a", one), "c": ("b", one)}


def test_a_stage_that_began_on_other_changes_than_the_one_before_left_blocks() -> None:
    left = {"src/a.py": "1" * 64, "src/b.py": ""}
    began = {"src/a.py": "2" * 64, "src/b.py": "", "src/c.py": "3" * 64}
    data = StageData(record(commit=A, changed_sha256=began), suite=suite(case("a")))
    v = judge_stage("execution", data, Policy(), commit=A, left=("static", left))
    assert decide([v]).decision is Decision.BLOCK
    (f,) = [f for f in v.findings if f.kind == "tree_mismatch"]
    assert f.severity.value == "CRITICAL" and f.detail == "src/a.py, src/c.py"
    assert "static" in f.title
    for same in (left, None):  # what it left, or a record that does not say
        data = StageData(record(commit=A, changed_sha256=same), suite=suite(case("a")))
        v = judge_stage("execution", data, Policy(), commit=A, left=("static", left))
        assert "tree_mismatch" not in [f.kind for f in v.findings]


def test_a_record_of_another_commit_blocks_naming_both() -> None:
    data = StageData(record(commit=B), suite=suite(case("a")))
    v = judge_stage("execution", data, Policy(), commit=A)
    assert v.status is StageStatus.FAIL and decide([v]).decision is Decision.BLOCK
    (f,) = v.findings
    assert f.kind == "commit_mismatch" and f.severity.blocks
    assert A[:12] in f.title and B[:12] in f.title and A in f.detail and B in f.detail


def test_no_commit_beside_a_commit_is_a_mismatch_both_ways() -> None:
    data = StageData(record(commit=None), suite=suite(case("a")))
    v = judge_stage("execution", data, Policy(), commit=A)
    assert [f.kind for f in v.findings] == ["commit_mismatch"] and "no commit" in v.findings[
        0
    ].title
    v = judge_stage(
        "execution", StageData(record(commit=A), suite=suite(case("a"))), Policy(), commit=""
    )
    assert [f.kind for f in v.findings] == ["commit_mismatch"]


def test_the_same_commit_or_none_checked_is_no_finding() -> None:
    data = StageData(record(commit=A), suite=suite(case("a")))
    assert judge_stage("execution", data, Policy(), commit=A).findings == ()
    assert judge_stage("execution", data, Policy()).findings == ()
    none = StageData(record(commit=None), suite=suite(case("a")))
    assert judge_stage("execution", none, Policy(), commit="").findings == ()


def test_uncommitted_changes_are_said_and_block_only_where_the_policy_asks() -> None:
    data = StageData(record(commit=A, uncommitted=["src/a.py", "new.py"]), suite=suite(case("a")))
    v = judge_stage("execution", data, Policy(), commit=A)
    assert v.status is StageStatus.PASS and [(f.kind, f.severity.value) for f in v.findings] == [
        ("uncommitted_changes", "INFO")
    ]
    assert "src/a.py" in v.findings[0].detail
    banners = summary_view(decide([v]), CTX).banners
    assert len(banners) == 1 and "execution" in banners[0]
    strict = policy_from_mapping({"severity": {"uncommitted_changes": "HIGH"}})
    assert decide([judge_stage("execution", data, strict, commit=A)]).decision is Decision.BLOCK
    clean = StageData(record(commit=A, uncommitted=[]), suite=suite(case("a")))
    assert judge_stage("execution", clean, Policy(), commit=A).findings == ()
    unknown = StageData(record(commit=A, uncommitted=None), suite=suite(case("a")))  # no git
    (said,) = judge_stage("execution", unknown, Policy(), commit=A).findings
    assert (said.kind, said.severity.value) == ("uncommitted_changes", "INFO")
    assert decide([judge_stage("execution", unknown, strict, commit=A)]).decision is Decision.BLOCK


def test_a_command_that_changed_another_stages_results_blocks() -> None:
    altered = ["reports/raw/static.json", "reports/raw/ruff.json"]
    data = StageData(record(commit=A, altered=altered), suite=suite(case("a")))
    v = judge_stage("execution", data, Policy(), commit=A)
    assert [(f.kind, f.severity.value) for f in v.findings] == [("results_altered", "CRITICAL")]
    assert "static.json" in v.findings[0].detail and decide([v]).decision is Decision.BLOCK
