"""The tests the policy requires, and the tests the base branch ran that are skipped or gone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stagegate.errors import ConfigError
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy, policy_from_mapping
from stagegate.judge.required import canonical, matches
from stagegate.model import Decision, Location, Severity, StageData, StageStatus, TestCase

from ..builders import case, record, suite

REQUIRED = Policy(required_tests={"integration": ("tests/t.py::test_fine_*",)})


def _judge(data: StageData, policy: Policy = REQUIRED):
    return judge_stage("integration", data, policy)


def _kinds(verdict) -> list[tuple[str, str]]:
    return [(f.severity.value, f.kind) for f in verdict.findings]


def test_a_required_test_that_ran_and_passed_is_no_finding() -> None:
    v = _judge(StageData(record(), suite=suite(case("test_fine_tuning_fp32"), case("other"))))
    assert v.status is StageStatus.PASS and v.findings == ()


def test_a_skipped_required_test_blocks_naming_it_and_its_reason() -> None:
    skipped = case("test_fine_tuning_fp32", "skipped", message="flaky on shared runners")
    v = _judge(StageData(record(), suite=suite(skipped, case("test_fine_tune_bf16"))))
    assert ("HIGH", "required_test_skipped") in _kinds(v)
    (finding,) = [f for f in v.findings if f.kind == "required_test_skipped"]
    assert "tests/t.py::test_fine_tuning_fp32" in finding.title
    assert finding.detail == "flaky on shared runners"
    assert v.status is StageStatus.FAIL and decide([v]).decision is Decision.BLOCK


def test_a_pattern_no_test_matches_blocks_naming_it() -> None:
    v = _judge(StageData(record(), suite=suite(case("test_other"))))
    (finding,) = [f for f in v.findings if f.kind == "required_test_missing"]
    assert "tests/t.py::test_fine_*" in finding.title and finding.severity.value == "HIGH"
    assert decide([v]).decision is Decision.BLOCK


def test_a_stage_that_left_no_tests_cannot_show_its_required_ones() -> None:
    v = _judge(StageData(record()))
    (finding,) = [f for f in v.findings if f.kind == "required_test_missing"]
    assert "tests/t.py::test_fine_*" in finding.detail


def test_every_stage_without_required_tests_is_left_alone() -> None:
    v = judge_stage("execution", StageData(record(), suite=suite(case("a"))), REQUIRED)
    assert v.findings == ()


def _named(nodeid: str, outcome: str = "passed") -> TestCase:
    return replace(case("x", outcome), nodeid=nodeid)


def test_a_dotted_classname_is_matched_by_the_file_pattern() -> None:
    # Where the report runs without the checkout, pytest's classname stays dotted.
    dotted = _named("tests.integration.test_fine_tuning_cpu::test_fine_tuning_fp32")
    assert canonical(dotted) == "tests/integration/test_fine_tuning_cpu.py::test_fine_tuning_fp32"
    klass = _named("tests.integration.test_combos.TestAll::test_keys[a-b]")
    assert canonical(klass) == "tests/integration/test_combos.py::TestAll::test_keys[a-b]"
    assert matches("tests/integration/test_combos.py::*", klass)
    assert not matches("tests/integration/test_fine_tuning_cpu.py::*", klass)
    assert canonical(_named("com.example.NetTest::timesOut")) != "com/example/NetTest.py"


def test_brackets_in_a_pattern_are_literal_and_only_star_is_a_wildcard() -> None:
    param = _named("tests/t.py::test_x[a]")
    assert matches("tests/t.py::test_x[a]", param)
    assert not matches("tests/t.py::test_x[ab]", _named("tests/t.py::test_xa"))
    assert not matches("tests/t.py::test_x?", _named("tests/t.py::test_xy"))
    assert matches("tests/*::test_x[*]", param)


def test_a_required_test_the_base_ran_and_that_is_gone_here_blocks() -> None:
    base = suite(case("test_fine_tuning_fp32"), case("test_fine_tune_bf16"))
    here = suite(case("test_fine_tuning_fp32"))  # the other one deselected, removed or renamed
    v = _judge(StageData(record(), suite=here, base_suite=base))
    (gone,) = [f for f in v.findings if f.kind == "required_test_missing"]
    assert "tests/t.py::test_fine_tune_bf16" in gone.title and decide([v]).decision.value == "BLOCK"


def test_newly_skipped_tests_are_named_with_their_reasons_when_the_share_rises() -> None:
    base = suite(case("a"), case("b"), case("c"), case("d", "skipped", message="needs CUDA"))
    here = suite(
        case("a", "skipped", message="flaky on shared runners"),
        case("b", "skipped", message="slow"),
        case("c"),
        case("d", "skipped", message="needs CUDA"),
    )
    v = judge_stage("execution", StageData(record(), suite=here, base_suite=base), Policy())
    (rose,) = [f for f in v.findings if f.kind == "skipped_share_rose"]
    assert rose.severity.value == "MEDIUM" and "25.0% to 75.0%" in rose.title
    assert "tests/t.py::a (flaky on shared runners)" in rose.detail
    assert "tests/t.py::b (slow)" in rose.detail and "::d" not in rose.detail


def test_newly_skipped_tests_are_named_when_the_share_does_not_rise_beyond_the_allowance() -> None:
    base = suite(case("a", "skipped", message="x"), case("b"))
    swapped = suite(case("a"), case("b", "skipped", message="y"))  # the share did not rise
    v = judge_stage("execution", StageData(record(), suite=swapped, base_suite=base), Policy())
    (named,) = [f for f in v.findings if f.kind == "test_newly_skipped"]
    assert "tests/t.py::b (y)" in named.detail and "::a" not in named.detail
    rose = suite(case("a", "skipped", message="x"), case("b", "skipped", message="y"))
    lenient = Policy(skip_jump_pct=60.0)  # 50% -> 100% is 50 points
    v = judge_stage("execution", StageData(record(), suite=rose, base_suite=base), lenient)
    assert {"test_newly_skipped"} == {
        f.kind for f in v.findings if "newly" in f.kind or "rose" in f.kind
    }
    v = judge_stage("execution", StageData(record(), suite=rose, base_suite=base), Policy())
    assert "skipped_share_rose" in {f.kind for f in v.findings}


def test_tests_added_to_hold_the_skipped_share_down_cannot_hide_a_new_skip() -> None:
    base = suite(*(case(f"t{i}") for i in range(4)), case("s", "skipped", message="old"))
    padded = suite(
        case("t0", "skipped", message="quietly off"),
        *(case(f"t{i}") for i in range(1, 4)),
        case("s", "skipped", message="old"),
        *(case(f"pad{i}") for i in range(6)),  # 20% skipped before, 2 of 11 (18%) now
    )
    v = judge_stage("execution", StageData(record(), suite=padded, base_suite=base), Policy())
    (named,) = [f for f in v.findings if f.kind in ("test_newly_skipped", "skipped_share_rose")]
    assert named.kind == "test_newly_skipped" and "tests/t.py::t0 (quietly off)" in named.detail
    assert "20.0% to 18.2%" in named.title


def test_a_test_that_ran_on_the_base_and_skips_here_blocks_and_a_new_skipping_test_does_not() -> (
    None
):
    base = suite(case("a"), case("b"))
    added = suite(case("a"), case("b"), case("cuda_only", "skipped", message="needs CUDA"))
    v = judge_stage("execution", StageData(record(), suite=added, base_suite=base), Policy())
    assert "test_newly_skipped" not in {f.kind for f in v.findings}
    assert decide([v]).decision is not Decision.BLOCK
    stopped = suite(case("a", "skipped", message="later"), case("b"))
    v = judge_stage("execution", StageData(record(), suite=stopped, base_suite=base), Policy())
    (newly,) = [f for f in v.findings if f.kind == "test_newly_skipped"]
    assert newly.severity.value == "HIGH" and "tests/t.py::a (later)" in newly.detail
    assert decide([v]).decision is Decision.BLOCK


def test_tests_that_ran_on_the_base_and_are_gone_here_are_named() -> None:
    base = suite(case("a"), case("b"), case("c"), case("s", "skipped", message="off"))
    here = suite(case("a"), case("new"))  # b and c deselected; s never ran on the base
    v = judge_stage("execution", StageData(record(), suite=here, base_suite=base), Policy())
    (gone,) = [f for f in v.findings if f.kind == "test_gone"]
    assert gone.severity.value == "MEDIUM" and "2 test(s)" in gone.title
    assert "tests/t.py::b" in gone.detail and "tests/t.py::c" in gone.detail
    assert "::s" not in gone.detail and "::new" not in gone.detail
    blocking = Policy(severity={**Policy().severity, "test_gone": Policy().severity["test_failed"]})
    v = judge_stage("execution", StageData(record(), suite=here, base_suite=base), blocking)
    assert decide([v]).decision is Decision.BLOCK


def test_a_required_test_gone_is_named_once_as_required() -> None:
    base = suite(case("test_fine_tuning_fp32"), case("test_fine_tune_bf16"), case("other"))
    here = suite(case("test_fine_tuning_fp32"))
    v = _judge(StageData(record("integration"), suite=here, base_suite=base))
    (gone,) = [f for f in v.findings if f.kind == "test_gone"]
    assert "::other" in gone.detail and "bf16" not in gone.detail
    assert [f.kind for f in v.findings if "bf16" in f.title] == ["required_test_missing"]


def test_a_test_moved_to_another_stage_where_it_ran_is_not_gone() -> None:
    base = suite(case("test_fine_tuning_fp32"), case("test_fine_tune_bf16"), case("other"))
    here = suite(case("test_fine_tuning_fp32"))
    moved = frozenset({"tests/t.py::test_fine_tune_bf16", "tests/t.py::other"})  # in slow
    data = StageData(record("integration"), suite=here, base_suite=base, executed_elsewhere=moved)
    assert _judge(data).findings == ()
    half = frozenset({"tests/t.py::other"})  # the required one ran nowhere
    v = _judge(replace(data, executed_elsewhere=half))
    assert _kinds(v) == [("HIGH", "required_test_missing")]
    # held elsewhere but skipped there: it ran nowhere
    v = _judge(replace(data, executed_elsewhere=frozenset(), ran_elsewhere=moved))
    assert ("HIGH", "required_test_missing") in _kinds(v) and ("MEDIUM", "test_gone") in _kinds(v)


@pytest.mark.parametrize("base_here", [True, False], ids=["stage-on-base", "new-stage"])
def test_a_test_that_ran_in_another_stage_on_the_base_and_skips_here_blocks(
    base_here: bool,
) -> None:
    """Moved to this stage (marked for it) and skipped here: newly skipped, as if it had not
    moved; a stage that had no results on the base is held to the other stages' results."""
    here = suite(case("a"), case("b", "skipped", message="later"))
    base = suite(case("a")) if base_here else None
    data = StageData(
        record("slow"), suite=here, base_suite=base, base_ran_elsewhere=frozenset({"tests/t.py::b"})
    )
    v = judge_stage("slow", data, Policy())
    assert ("HIGH", "test_newly_skipped") in _kinds(v)
    assert decide([v]).decision is Decision.BLOCK
    alone = judge_stage("slow", replace(data, base_ran_elsewhere=frozenset()), Policy())
    assert ("HIGH", "test_newly_skipped") not in _kinds(alone)
    # a stage that re-runs others' tests, or may skip what needs a GPU, skips them by design
    for spec in ({"subset": True}, {"skippable": "no-cuda"}):
        policy = policy_from_mapping({"stages": {"slow": spec}})
        kinds = _kinds(judge_stage("slow", replace(data, base_suite=None), policy))
        assert ("HIGH", "test_newly_skipped") not in kinds


def test_without_base_results_nothing_is_said_gone() -> None:
    v = judge_stage("execution", StageData(record(), suite=suite(case("a"))), Policy())
    assert v.findings == ()


def _dropped(dropped: str = "tests/t.py::slow", **kw: object) -> list[tuple[str, str]]:
    """The kinds of a unit stage that dropped ``dropped`` and ran tests/t.py::a."""
    here = suite(case("a"), deselected=(dropped,))
    return _kinds(judge_stage("execution", StageData(record(), suite=here, **kw), Policy()))


def test_a_dropped_test_blocks_unless_another_stage_ran_it_in_either_name_form() -> None:
    assert _dropped() == [("HIGH", "test_run_nowhere")]
    ran = frozenset({"tests/t.py::slow"})  # as :func:`canonical` names the other stages' tests
    assert _dropped(ran_elsewhere=ran) == []
    assert _dropped("tests.t::slow", ran_elsewhere=ran) == []  # its file not in the checkout
    other = frozenset({"tests/t.py::other"})
    assert _dropped(ran_elsewhere=other) == [("HIGH", "test_run_nowhere")]


def test_an_empty_test_file_blocks_unless_another_stage_ran_a_test_of_it() -> None:
    here = suite(case("a"), empty_files=("tests/hidden.py",))
    kinds = _kinds(judge_stage("execution", StageData(record(), suite=here), Policy()))
    assert kinds == [("HIGH", "test_run_nowhere")]
    elsewhere = frozenset({"tests/hidden.py::test_x"})
    data = StageData(record(), suite=here, ran_elsewhere=elsewhere)
    assert judge_stage("execution", data, Policy()).findings == ()


@pytest.mark.parametrize(
    ("ran", "finding"),
    [
        ("tests/t.py::test_h[1]", False),
        ("tests/t.py::test_h", False),
        ("tests/t.py::test_hx", True),
    ],
)
def test_a_test_that_says_it_is_none_is_looked_for_under_its_own_name(
    ran: str, finding: bool
) -> None:
    here = suite(case("a"), empty_files=("tests/t.py::test_h",))
    data = StageData(record(), suite=here, ran_elsewhere=frozenset({ran}))
    kinds = _kinds(judge_stage("execution", data, Policy()))
    assert kinds == ([("HIGH", "test_run_nowhere")] if finding else [])


def test_tests_the_policy_says_no_stage_runs_are_excused_and_no_others() -> None:
    policy = policy_from_mapping({"not_run": ["tests/property/*"]})
    dropped = ("tests/property/test_p.py::test_any", "tests/t.py::slow")
    here = suite(case("a"), deselected=dropped, empty_files=("tests.property.test_q::test_h",))
    found, shown = judge_stage("execution", StageData(record(), suite=here), policy).findings
    assert found.kind == "test_run_nowhere" and found.detail == "tests/t.py::slow"
    assert (shown.kind, shown.severity) == ("test_not_run_by_policy", Severity.INFO)
    assert shown.detail == "tests/property/test_p.py::test_any; tests.property.test_q::test_h"
    excused = suite(case("a"), deselected=dropped[:1])
    (shown,) = judge_stage("execution", StageData(record(), suite=excused), policy).findings
    assert shown.kind == "test_not_run_by_policy" and not shown.severity.blocks


def test_a_stage_declared_a_subset_drops_tests_without_a_finding() -> None:
    policy = policy_from_mapping({"stages": {"cuda": {"subset": True}}})
    here = suite(case("a"), deselected=("tests/t.py::slow",))
    assert judge_stage("cuda", StageData(record("cuda"), suite=here), policy).findings == ()


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"stages": {"cuda": {"subset": "yes"}}}, "cuda.subset"),
        ({"stages": {"slow": {"marker": ["slow"]}}}, "slow.marker"),
        ({"stages": {"slow": {"marker": "not slow"}}}, "slow.marker"),
        ({"required_tests": {"integration": []}}, "required_tests.integration"),
        ({"required_tests": {"integration": "tests/x.py"}}, "required_tests.integration"),
        ({"required_tests": {"Bad Stage": ["x"]}}, "required_tests"),
        ({"required_tests": ["x"]}, "required_tests"),
        ({"not_run": "tests/property/*"}, "not_run"),
        ({"gate_files": "pyproject.toml"}, "gate_files"),
        ({"gate_files": [""]}, "gate_files"),
        ({"skip_jump_pct": -1}, "skip_jump_pct"),
    ],
)
def test_the_new_policy_keys_refuse_bad_values_by_name(table: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        policy_from_mapping(table)


def test_the_new_policy_keys_are_read() -> None:
    policy = policy_from_mapping(
        {
            "required_tests": {"execution": ["tests/a.py::*"]},
            "gate_files": ["noxfile.py", ".github/*"],
            "skip_jump_pct": 5,
        }
    )
    assert policy.required_tests == {"execution": ("tests/a.py::*",)}
    assert (
        policy_from_mapping({"stages": {"slow": {"marker": "slow"}}}).stages["slow"].marker
        == "slow"
    )
    assert policy.gate_files == ("noxfile.py", ".github/*") and policy.skip_jump_pct == 5.0


@pytest.mark.parametrize("count", [20, 21])
def test_twenty_tests_are_named_in_a_finding_and_the_rest_counted(count: int) -> None:
    """A finding names at most 20 tests; past that it says how many more (the stage report
    lists every one)."""
    names = [f"t{i:02}" for i in range(count)]
    base = suite(*(case(n) for n in names), case("keep"))
    newly = suite(*(case(n, "skipped") for n in names), case("keep"))
    gone = suite(case("keep"))
    for here, kind in ((newly, "skipped_share_rose"), (gone, "test_gone")):
        v = judge_stage("execution", StageData(record(), suite=here, base_suite=base), Policy())
        (named,) = [f for f in v.findings if f.kind == kind]
        assert "::t19" in named.detail and "::t20" not in named.detail
        assert ("; and 1 more" in named.detail) is (count == 21), named.detail
    (rose,) = [
        f
        for f in judge_stage(
            "execution", StageData(record(), suite=newly, base_suite=base), Policy()
        ).findings
        if f.kind == "skipped_share_rose"
    ]
    assert "(no reason given)" in rose.detail  # a skip without a message says so


def test_a_skipped_required_test_points_at_its_place() -> None:
    where = Location("tests/t.py", 12)
    skipped = case("test_fine_tuning_fp32", "skipped", location=where)
    v = _judge(StageData(record(), suite=suite(skipped)))
    (finding,) = [f for f in v.findings if f.kind == "required_test_skipped"]
    assert finding.location == where and finding.detail == "no reason given"


@pytest.mark.parametrize(
    ("nodeid", "form"),
    [
        ("test_x.py::test_a", "test_x.py::test_a"),  # a file already
        ("TestOnly::test_a", "TestOnly.py::test_a"),  # one part: the module itself
        ("tests.test_m::test_d[a::b]", "tests/test_m.py::test_d[a::b]"),  # "::" in a parameter
        ("tests.test_m.TestC.TestInner::test_d", "tests/test_m.py::TestC::TestInner::test_d"),
    ],
)
def test_the_file_form_of_a_dotted_classname(nodeid: str, form: str) -> None:
    assert canonical(replace(case("x"), nodeid=nodeid)) == form
