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


def test_the_run_changes_are_the_state_its_records_saw_most() -> None:
    """As each stage of the commit began and ended; a record that does not say is left out."""
    one, two = {"a.py": "1" * 64}, {"a.py": "2" * 64}
    records = {
        "a": record("a", commit=A, changed_sha256={}, changed_sha256_end=one),
        "b": record("b", commit=A, changed_sha256=one, changed_sha256_end=one),
        "c": record("c", commit=A, changed_sha256=two),
        "x": record("x", commit=B, changed_sha256=two, changed_sha256_end=two),
        "n": record("n", commit=A),
    }
    assert run_changes(records, A) == one and run_changes(records, B) == two
    assert run_changes({"n": records["n"]}, A) is None


def test_a_stage_that_began_or_ended_on_other_changes_than_the_run_blocks() -> None:
    run = {"src/a.py": "1" * 64, "src/b.py": ""}
    other = {"src/a.py": "2" * 64, "src/b.py": "", "src/c.py": "3" * 64}
    for seen in ({"changed_sha256": other}, {"changed_sha256": run, "changed_sha256_end": other}):
        data = StageData(record(commit=A, **seen), suite=suite(case("a")))
        v = judge_stage("execution", data, Policy(), commit=A, changes=run)
        assert decide([v]).decision is Decision.BLOCK
        (f,) = [f for f in v.findings if f.kind == "tree_mismatch"]
        assert f.severity.value == "CRITICAL" and f.detail == "src/a.py, src/c.py"
    for same in (run, None):  # the run's changes, or a record that does not say
        data = StageData(record(commit=A, changed_sha256=same), suite=suite(case("a")))
        v = judge_stage("execution", data, Policy(), commit=A, changes=run)
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
