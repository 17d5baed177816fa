"""Frozen dataclasses: the contract between collectors, the judge and the renderers."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Severity(Enum):
    """Finding severity, most severe first."""

    CRITICAL = "CRITICAL"
    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"
    INFO = "INFO"

    @property
    def rank(self) -> int:
        """0 for CRITICAL ... 4 for INFO (sorting key)."""
        return list(Severity).index(self)

    @property
    def blocks(self) -> bool:
        """CRITICAL and HIGH findings block a merge."""
        return self in (Severity.CRITICAL, Severity.HIGH)


class StageStatus(Enum):
    """A stage's outcome; the verdict is a reduction over these and the findings."""

    PASS = "PASS"
    FAIL = "FAIL"  # the command failed, or its findings block
    ERROR = "ERROR"  # crashed, timed out, or its output could not be read
    MISSING = "MISSING"  # no record at all
    NOT_VERIFIED = "NOT VERIFIED"  # allowed to be skipped here, and it was


@dataclass(frozen=True)
class Location:
    """A place in the source tree (line may be unknown)."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class Finding:
    """One measured problem: what, where, how bad, and how to fix it."""

    severity: Severity
    stage: str
    kind: str  # the policy key that set the severity, e.g. "test_failed"
    title: str
    detail: str = ""
    location: Location | None = None
    fix: str = ""


OUTCOMES = ("passed", "flaky", "failed", "error", "skipped")


@dataclass(frozen=True)
class Failure:
    """One ``<failure>`` or ``<error>`` of a test (a test may hold several)."""

    kind: str  # "failure" or "error"
    message: str
    text: str = ""
    location: Location | None = None


@dataclass(frozen=True)
class TestCase:
    """One test from a JUnit file; repeated attempts of one test are merged into one case,
    whose outcome is its worst attempt's."""

    __test__ = False  # a record of a test, not a test for pytest to collect

    nodeid: str
    file: str
    name: str
    outcome: str  # one of OUTCOMES; flaky: failed, then passed on a documented re-run
    duration_s: float
    message: str = ""  # the first failure's message, or the skip reason
    text: str = ""
    location: Location | None = None
    failures: tuple[Failure, ...] = ()
    attempts: int = 1
    suite: str = ""  # the <testsuite> it was read from

    @property
    def executed(self) -> bool:
        """The test ran (skipped and disabled tests did not)."""
        return self.outcome != "skipped"


@dataclass(frozen=True)
class TestSuite:
    """Every test case of one or more JUnit files."""

    __test__ = False

    cases: tuple[TestCase, ...]
    source: str
    # "suite NAME declares 250 tests, the file holds 1" for each suite that holds fewer
    count_mismatches: tuple[str, ...] = ()

    def count(self, outcome: str) -> int:
        """Number of cases with ``outcome``."""
        return sum(1 for c in self.cases if c.outcome == outcome)

    @property
    def executed(self) -> int:
        """Number of cases that ran."""
        return sum(1 for c in self.cases if c.executed)

    @property
    def duration_s(self) -> float:
        return sum(c.duration_s for c in self.cases)


@dataclass(frozen=True)
class FileCoverage:
    path: str
    percent: float
    missing_lines: tuple[int, ...]


@dataclass(frozen=True)
class Coverage:
    percent: float
    files: tuple[FileCoverage, ...]


@dataclass(frozen=True)
class WarningEntry:
    category: str
    message: str
    location: Location
    count: int


@dataclass(frozen=True)
class LintFinding:
    tool: str
    code: str
    message: str
    level: str  # error, warning, style
    location: Location


@dataclass(frozen=True)
class PrecisionResult:
    """One precision of a benchmark run, as reported by amptrain.benchmark."""

    name: str
    status: str
    error: str | None
    precision_used: str
    step_time_ms: float | None = None
    iqr_ms: float | None = None
    window_s: tuple[float, ...] = ()
    tokens_per_second: float | None = None
    mfu: float | None = None
    peak_mb: float | None = None
    static_mb: float | None = None
    activation_mb: float | None = None
    val_loss: float | None = None
    val_accuracy: float | None = None
    overflow_steps: int | None = None
    loss_curve: tuple[float | None, ...] = ()
    memory_growth_mb_per_window: float | None = None
    memory_source: str | None = None
    data_wait_share: float | None = None
    syncs_measured: bool = False
    sync_method: str = (
        "cuda"  # "cuda": CUDA's sync debug mode; "dispatch": host reads on any device
    )
    syncs_per_step: float | None = None
    sync_locations: tuple[dict[str, Any], ...] = ()
    matmul_dtypes: dict[str, int] = field(default_factory=dict)  # dtype -> matmuls in a forward
    matmul_dtype_expected: str | None = None
    live_graph_tensors: int | None = None  # most graph-attached tensors a window left behind
    live_growth_pct_per_window: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None


@dataclass(frozen=True)
class Comparison:
    precision: str
    baseline: str
    speedup: float
    speedup_ci95: tuple[float, float]
    peak_memory_reduction_pct: float | None
    activation_memory_reduction_pct: float | None
    accuracy_diff: float | None
    val_loss_diff: float | None


@dataclass(frozen=True)
class Benchmark:
    """A whole amptrain benchmark document."""

    preset: str
    device: str
    gpu_verified: bool
    gpu_name: str | None
    torch: str | None
    cuda: str | None
    driver: str | None
    datetime: str
    commit: str | None
    precisions: tuple[PrecisionResult, ...]
    comparisons: tuple[Comparison, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    def precision(self, name: str) -> PrecisionResult | None:
        """The result for ``name``, if it ran."""
        return next((p for p in self.precisions if p.name == name), None)


@dataclass(frozen=True)
class Curves:
    """Named series from a stage's metrics file (for example the integration loss curves)."""

    series: dict[str, tuple[float, ...]]
