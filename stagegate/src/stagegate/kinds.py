"""The catalogue of finding kinds: every finding the judge makes is one of these, with its
default severity (a policy may change it, within :attr:`Kind.floor`) and what it means. The
judge, the policy, the views and the generated docs all read this one table."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from stagegate.model import Severity

C, H, M, L, INFO = (
    Severity.CRITICAL,
    Severity.HIGH,
    Severity.MEDIUM,
    Severity.LOW,
    Severity.INFO,
)


@dataclass(frozen=True)
class About:
    """A kind's default severity, the least severe a policy may make it, and its meaning."""

    severity: Severity
    meaning: str
    floor: Severity = INFO  # a policy may not set it below this
    fixed: bool = False  # a policy may not change it at all


class Kind(StrEnum):
    """A finding's kind: also its key in ``[tool.stagegate.severity]``."""

    # a stage and its tests
    TEST_FAILED = "test_failed"
    STAGE_FAILED = "stage_failed"
    INTEGRATION_RAISED = "integration_raised"
    FLAKY_TEST = "flaky_test"
    COUNT_MISMATCH = "count_mismatch"
    OUTCOME_CONTRADICTED = "outcome_contradicted"
    OUTCOMES_UNWITNESSED = "outcomes_unwitnessed"
    FOREIGN_HOOKS = "foreign_hooks"
    REQUIRED_TEST_MISSING = "required_test_missing"
    REQUIRED_TEST_SKIPPED = "required_test_skipped"
    SKIPPED_SHARE_ROSE = "skipped_share_rose"
    TEST_NEWLY_SKIPPED = "test_newly_skipped"
    SKIPPED_BY_CODE_UNDER_TEST = "skipped_by_code_under_test"
    TEST_GONE = "test_gone"
    TEST_RUN_NOWHERE = "test_run_nowhere"
    TEST_NOT_RUN_BY_POLICY = "test_not_run_by_policy"
    TEST_LEFT_TO_STAGE = "test_left_to_stage"
    SKIPPED_TEST = "skipped_test"
    SLOW_TEST = "slow_test"
    COVERAGE_BELOW_FLOOR = "coverage_below_floor"
    COVERAGE_NARROWED = "coverage_narrowed"
    # linters and warnings
    LINT_ERROR = "lint_error"
    LINT_WARNING = "lint_warning"
    LINT_STYLE = "lint_style"
    DEPRECATION_WARNING = "deprecation_warning"
    OTHER_WARNING = "other_warning"
    # the stage's files and record
    OUTPUT_MISSING = "output_missing"
    OUTPUT_REFUSED = "output_refused"
    SIDE_FILE_MISSING = "side_file_missing"
    COMMIT_MISMATCH = "commit_mismatch"
    TREE_MISMATCH = "tree_mismatch"
    UNCOMMITTED_CHANGES = "uncommitted_changes"
    RESULTS_ALTERED = "results_altered"
    RECORD_UNUSABLE = "record_unusable"
    INPUT_MALFORMED = "input_malformed"
    MACHINE_UNOBSERVED = "machine_unobserved"
    MACHINE_MISMATCH = "machine_mismatch"
    CLOCK_FUTURE = "clock_future"
    # benchmarks
    BENCHMARK_FAILED = "benchmark_failed"
    EVIDENCE_MISSING = "evidence_missing"
    EVIDENCE_IMPOSSIBLE = "evidence_impossible"
    EVIDENCE_INCONSISTENT = "evidence_inconsistent"
    EVIDENCE_UNCHECKED = "evidence_unchecked"
    THRESHOLD_MISSED = "threshold_missed"
    TARGET_UNDECIDED = "target_undecided"
    REGRESSION = "regression"
    REGRESSION_UNVERIFIED = "regression_unverified"
    IMPROVEMENT = "improvement"
    MEMORY_GROWTH = "memory_growth"
    HOST_SYNC = "host_sync"
    NOT_LEARNING = "not_learning"
    AUTOCAST_MISMATCH = "autocast_mismatch"
    AB_REGRESSION = "ab_regression"
    AB_UNDECIDED = "ab_undecided"

    @property
    def about(self) -> About:
        """This kind's entry in the catalogue."""
        return CATALOGUE[self]


CATALOGUE: dict[Kind, About] = {
    Kind.TEST_FAILED: About(C, "a test failed or erred"),
    Kind.STAGE_FAILED: About(C, "the stage's command failed, crashed, timed out or ran no test"),
    Kind.INTEGRATION_RAISED: About(C, "the end-to-end run raised"),
    Kind.FLAKY_TEST: About(M, "a test failed, then passed on a re-run its producer documents"),
    Kind.COUNT_MISMATCH: About(H, "a JUnit total claims more tests, failures or errors than held"),
    Kind.OUTCOME_CONTRADICTED: About(
        C, "a test raised, and its JUnit file says it passed, skipped or does not hold it", floor=H
    ),
    Kind.OUTCOMES_UNWITNESSED: About(
        H, "pytest ran without stagegate's plugin seeing which tests raised"
    ),
    Kind.FOREIGN_HOOKS: About(
        C, "code outside conftest files hooks into how pytest runs or reports tests", floor=H
    ),
    Kind.REQUIRED_TEST_MISSING: About(H, "a test the policy names did not run"),
    Kind.REQUIRED_TEST_SKIPPED: About(H, "a test the policy names was skipped"),
    Kind.SKIPPED_SHARE_ROSE: About(M, "more of the tests skip than on the base branch"),
    Kind.TEST_NEWLY_SKIPPED: About(H, "a test that ran on the base branch skips here"),
    Kind.SKIPPED_BY_CODE_UNDER_TEST: About(
        H, "the code under test, not a test or a conftest.py, skipped or xfailed a test"
    ),
    Kind.TEST_GONE: About(M, "a test that ran on the base branch did not run here"),
    Kind.TEST_RUN_NOWHERE: About(H, "a test a stage collected and dropped ran in no stage"),
    Kind.TEST_NOT_RUN_BY_POLICY: About(INFO, "dropped tests the policy's not_run excuses"),
    Kind.TEST_LEFT_TO_STAGE: About(
        INFO, "dropped tests that carry the mark of a declared stage that did not run here"
    ),
    Kind.SKIPPED_TEST: About(INFO, "a test was skipped, with its reason"),
    Kind.SLOW_TEST: About(INFO, "a test took longer than slow_test_s", fixed=True),
    Kind.COVERAGE_BELOW_FLOOR: About(H, "line coverage is under its threshold"),
    Kind.COVERAGE_NARROWED: About(H, "coverage measures less of a file the change leaves as it is"),
    Kind.LINT_ERROR: About(H, "a linter reports an error (a syntax error included)"),
    Kind.LINT_WARNING: About(M, "a linter reports a warning"),
    Kind.LINT_STYLE: About(L, "a linter reports a matter of style"),
    Kind.DEPRECATION_WARNING: About(L, "the tests raised a deprecation warning"),
    Kind.OTHER_WARNING: About(INFO, "the tests raised another warning"),
    Kind.OUTPUT_MISSING: About(H, "a file the stage must produce was not produced, or is gone"),
    Kind.OUTPUT_REFUSED: About(C, "a file lies outside the raw folder or changed after the stage"),
    Kind.SIDE_FILE_MISSING: About(L, "an optional file of a stage that is not required is missing"),
    Kind.COMMIT_MISMATCH: About(C, "a record names another commit than the other records"),
    Kind.TREE_MISMATCH: About(C, "a stage began or ended on other changes than the others"),
    Kind.UNCOMMITTED_CHANGES: About(INFO, "the stage ran on changes its commit does not hold"),
    Kind.RESULTS_ALTERED: About(C, "a stage's command changed another stage's results", floor=H),
    Kind.RECORD_UNUSABLE: About(C, "a stage's record cannot be read, or it has two", floor=H),
    Kind.INPUT_MALFORMED: About(C, "a file is over its reader's bounds or not valid", floor=H),
    Kind.MACHINE_UNOBSERVED: About(C, "a record holds no observation of its machine", floor=H),
    Kind.MACHINE_MISMATCH: About(C, "a file claims a machine the record did not see", floor=H),
    Kind.CLOCK_FUTURE: About(
        C, "a record or file is dated after the report or outside its run", floor=H
    ),
    Kind.BENCHMARK_FAILED: About(C, "a precision of the benchmark failed or did not finish"),
    Kind.EVIDENCE_MISSING: About(C, "a benchmark figure is absent or not finite", floor=H),
    Kind.EVIDENCE_IMPOSSIBLE: About(C, "a figure no run can produce", floor=H),
    Kind.EVIDENCE_INCONSISTENT: About(
        H, "benchmark figures contradict each other or the policy", floor=H
    ),
    Kind.EVIDENCE_UNCHECKED: About(H, "a figure the policy gives no way to check", floor=H),
    Kind.THRESHOLD_MISSED: About(H, "a measured figure misses its threshold"),
    Kind.TARGET_UNDECIDED: About(H, "a speedup's interval straddles its target", floor=H),
    Kind.REGRESSION: About(H, "slower or larger than the stored baseline beyond the margin"),
    Kind.REGRESSION_UNVERIFIED: About(H, "the baseline comparison could not be made", floor=H),
    Kind.IMPROVEMENT: About(INFO, "faster or smaller than the stored baseline"),
    Kind.MEMORY_GROWTH: About(H, "memory or live tensors grow from window to window"),
    Kind.HOST_SYNC: About(H, "the training step waits on the host"),
    Kind.NOT_LEARNING: About(H, "the training loss does not fall over the timed steps"),
    Kind.AUTOCAST_MISMATCH: About(H, "matrix multiplies compute in another dtype than planned"),
    Kind.AB_REGRESSION: About(H, "the head's step is slower than the base's beyond the limit"),
    Kind.AB_UNDECIDED: About(H, "the A/B interval straddles the limit", floor=H),
}

DEFAULT_SEVERITY: dict[str, Severity] = {str(k): a.severity for k, a in CATALOGUE.items()}
