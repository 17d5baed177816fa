"""The data model every step shares: records, what collection read, and what the judge decided.

Frozen dataclasses and enums only. The pipeline reads one way: ``collect`` builds records and
:class:`StageData`; ``judge`` turns them into findings, statuses, a score and a
:class:`Decision`; views only format those.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any

# 2: a record holds the folder it was written to and the sha256 of every file it names.
RECORD_FORMAT_VERSION = 2
RECORD_KIND = "stagegate-record"
RUN_LOG = "stagegate-runs.jsonl"  # in the raw directory: one line per stage run, appended
# A stage's name becomes a file name and a heading: a short identifier and nothing else.
_STAGE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# The report's own files (summary.md, comment.md, verdict.json, an index or readme beside
# them): a stage of one of these names would write its report over them.
RESERVED_STAGE_NAMES = ("summary", "comment", "verdict", "index", "readme")
# Where the report lists records that claim no stage they may name: never a stage's own name.
UNATTRIBUTED = "raw_inputs"


def stage_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a stage, or None: 1-32 of a-z, 0-9, ``_`` and ``-``, starting
    with a letter, and none of the report's own file names."""
    if name == UNATTRIBUTED:
        return f"stage name {name!r} is where the report lists unattributed records: choose another"
    if name in RESERVED_STAGE_NAMES:
        return (
            f"stage name {name!r} is the name of a report file ({name}.md); a stage may not "
            f"be named {', '.join(RESERVED_STAGE_NAMES)}: choose another name"
        )
    if isinstance(name, str) and _STAGE_NAME.fullmatch(name):
        return None
    return (
        f"stage name {str(name)[:80]!r} is not a short identifier: use 1 to 32 characters "
        "of a-z, 0-9, _ and -, starting with a letter"
    )


JUNIT_COUNTS_SUFFIX = ".counts.json"  # what stagegate's pytest plugin writes beside JUnit


def counts_path(junit: str) -> str:
    """Where stagegate's pytest plugin writes its counts for the JUnit file ``junit``."""
    return f"{junit}{JUNIT_COUNTS_SUFFIX}"


def gate_witness_path(junit: str) -> str:
    """Where the gate's own witness (stagegate.record.witness_file) writes for ``junit``."""
    return f"{junit}.witness.json"


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
    """A stage's outcome, as the judge decided it."""

    PASS = "PASS"
    FAIL = "FAIL"  # the command failed, or its findings block
    ERROR = "ERROR"  # crashed, timed out, or its output could not be read
    MISSING = "MISSING"  # no record at all
    NOT_VERIFIED = "NOT VERIFIED"  # allowed to be skipped here, and it was


class Decision(Enum):
    """The verdict over every stage."""

    PASS = "PASS"
    BLOCK = "BLOCK"


class CheckOutcome(Enum):
    """What the judge made of one metric against its target."""

    MET = "PASS"
    MISSED = "MISS"  # always with a blocking finding beside it
    NOT_VERIFIED = "NOT VERIFIED"  # the run could not measure it here (no GPU)
    REPORTED = "reported"  # shown for information: no target applies to it


@dataclass(frozen=True, slots=True)
class Location:
    """A place in the source tree (line may be unknown)."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    @classmethod
    def parse(cls, text: str) -> Location:
        """``file:line`` as a Location (a line that is no number: the text as the file)."""
        file, _, line = text.rpartition(":")
        return cls(file, int(line)) if file and line.isdecimal() else cls(text)


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


def named_files(files: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, path, label) for every file of a stage's ``files`` (kind -> path, or {tool: path}
    for lint); lint files are labelled ``lint:TOOL``, the others by their kind."""
    out: list[tuple[str, str, str]] = []
    for kind, value in files.items():
        if isinstance(value, Mapping):
            out += [(kind, str(path), f"{kind}:{tool}") for tool, path in value.items()]
        else:
            out.append((kind, str(value), kind))
    return out


@dataclass(frozen=True, kw_only=True)
class StageRecord:
    """One run of one stage's command, whatever its outcome (what ``stagegate run`` writes)."""

    format_version: int = RECORD_FORMAT_VERSION
    kind: str = RECORD_KIND
    stage: str
    command: list[str]
    exit_code: int | None  # None when killed by a signal or timed out
    signal: int | None = None
    timed_out: bool = False
    start: str  # ISO 8601, UTC
    duration_s: float
    stdout_tail: str = ""
    stderr_tail: str = ""
    commit: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)  # kind -> path, or {tool: path} for lint
    error: str | None = None  # the command could not be started
    out_dir: str = ""  # the folder the record was written to, as given; files are under it
    # Each path of ``files`` -> the sha256 of that file when the stage ended, None if absent.
    sha256: dict[str, str | None] = field(default_factory=dict)
    runner_error: str | None = None  # stagegate run failed after the command (the record is
    # then a fallback: its file hashes may be missing)
    # What git showed changed or untracked (not ignored) when the command started: the commit
    # does not hold everything that ran. None where it could not look (no git checkout).
    uncommitted: list[str] | None = None
    # Each file git tracks that the checkout had changed then -> the sha256 of its content
    # ("" where it was deleted): a stage that began or ended on other changes than the
    # other stages ran another tree. None where it could not look.
    changed_sha256: dict[str, str] | None = None
    changed_sha256_end: dict[str, str] | None = None  # ... as the command ended
    # Other stages' records (and the files they seal, and the run log) that were changed or
    # removed while this stage's command ran: one stage's command rewrote another's results.
    altered: list[str] = field(default_factory=list)
    # Files of ``sha256`` that were there before the command started and that it did not write
    # (the same inode, size and modification time): an earlier run's, not this one's results.
    stale: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        """The command ran to the end and exited 0."""
        return (
            self.exit_code == 0
            and not self.timed_out
            and self.error is None
            and self.runner_error is None
        )

    def named_files(self) -> list[tuple[str, str, str]]:
        """(kind, path, label) for every file the record names (:func:`named_files`)."""
        return named_files(self.files)

    def to_json(self) -> str:
        """The record as JSON text."""
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"


OUTCOMES = ("passed", "flaky", "failed", "error", "skipped")


@dataclass(frozen=True, slots=True)
class Failure:
    """One ``<failure>`` or ``<error>`` of a test (a test may hold several)."""

    kind: str  # "failure" or "error"
    message: str
    text: str = ""
    location: Location | None = None


@dataclass(frozen=True, slots=True)
class TestCase:
    """One test from a JUnit file; repeated attempts of one test are merged into one case,
    whose outcome is its worst attempt's."""

    __test__ = False  # a record of a test, not a test for pytest to collect

    nodeid: str
    file: str
    outcome: str  # one of OUTCOMES; flaky: failed, then passed on a documented re-run
    duration_s: float
    message: str = ""  # the first failure's message, or the skip reason
    text: str = ""
    location: Location | None = None
    failures: tuple[Failure, ...] = ()
    attempts: int = 1
    suite: str = ""  # the <testsuite> it was read from
    # The test's own name where the node id does not end with it (None: it does; one string
    # less per test, which counts in a file of 700,000)
    own_name: str | None = None

    @property
    def name(self) -> str:
        """The test's name as its producer wrote it."""
        return self.own_name if self.own_name is not None else self.nodeid.rpartition("::")[2]

    @property
    def executed(self) -> bool:
        """The test ran (skipped and disabled tests did not)."""
        return self.outcome != "skipped"


Span = tuple[datetime, datetime]  # the earliest and the latest of some times


def _spanned(span: Span | None, at: datetime) -> Span:
    return (at, at) if span is None else (min(span[0], at), max(span[1], at))


@dataclass(frozen=True)
class Dated:
    """When a JUnit file's suites say they started, and the longest time one says it took: the
    file's claims about the clock, held against its stage's run by the judge. Timestamps with
    an offset are kept in UTC (``aware``); those without one are the producer's local time
    (``naive``). A timestamp that is no ISO 8601 time is no claim, and is passed over."""

    aware: Span | None = None
    naive: Span | None = None
    longest_s: float = 0.0

    def seen(self, timestamp: str | None, time_s: float) -> Dated:
        """These times with one suite's ``timestamp`` and ``time`` added."""
        longest = max(self.longest_s, time_s)
        try:
            at = datetime.fromisoformat((timestamp or "").strip())
        except ValueError:
            return replace(self, longest_s=longest) if longest != self.longest_s else self
        if at.tzinfo is None:
            return replace(self, naive=_spanned(self.naive, at), longest_s=longest)
        return replace(self, aware=_spanned(self.aware, at.astimezone(UTC)), longest_s=longest)


@dataclass(frozen=True)
class TestSuite:
    """Every test case of one or more JUnit files."""

    __test__ = False

    cases: tuple[TestCase, ...]
    source: str
    # "suite NAME declares 250 tests, the file holds 1" for each suite that holds fewer
    count_mismatches: tuple[str, ...] = ()
    dated: Dated = Dated()
    # pytest files only: whether stagegate's plugin witnessed which tests raised (None: not a
    # pytest file, or its record expects no witness), the tests that raised and the file calls
    # passed or skipped, those that raised and the file does not hold, and the plugins and
    # patches it saw that could run or report tests without raising through it
    witnessed: bool | None = None
    contradicted: tuple[str, ...] = ()
    unreported: tuple[str, ...] = ()
    foreign_hooks: tuple[str, ...] = ()  # what could run or report its tests unseen
    deselected: tuple[str, ...] = ()  # node ids collected and dropped from the run
    # (node id, its marks) of those pytest announced as deselected (``-m``)
    deselected_marks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    empty_files: tuple[str, ...] = ()  # test files that yielded no test
    skipped_by_code: tuple[tuple[str, Location], ...] = ()  # skipped by the code under test

    def count(self, outcome: str) -> int:
        """Number of cases with ``outcome``."""
        return sum(1 for c in self.cases if c.outcome == outcome)

    @property
    def executed(self) -> int:
        """Number of cases that ran."""
        return sum(1 for c in self.cases if c.executed)

    @property
    def duration_s(self) -> float:
        """Time spent in all cases, as the file states it."""
        return sum(c.duration_s for c in self.cases)


@dataclass(frozen=True)
class FileCoverage:
    path: str
    percent: float
    missing_lines: tuple[int, ...]
    counts: tuple[int, int] | None = None  # lines and branches covered, and all of them


@dataclass(frozen=True)
class Coverage:
    percent: float
    files: tuple[FileCoverage, ...]
    dated: Dated = Dated()  # when the file says coverage wrote it (its meta.timestamp)


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
    """One precision of a benchmark run: the raw figures as the benchmark file reports them,
    and the figures the judge derives from them (:mod:`stagegate.judge.derive`; None as read:
    no file's summary is ever read into them)."""

    name: str
    status: str
    error: str | None
    precision_used: str | None  # as the file states it: None when absent
    # torch.set_float32_matmul_precision as the run set it: "high" lets fp32 matmuls use TF32
    float32_matmul_precision: str | None = None
    # The raw timed windows, as written: None for an entry that is not a finite number.
    window_s: tuple[float | None, ...] = ()
    steps_per_window: float | None = None
    memory_measured: bool = False
    peak_mb: float | None = None
    static_mb: float | None = None
    val_loss: float | None = None
    val_accuracy: float | None = None
    overflow_steps: int | None = None
    loss_curve: tuple[float | None, ...] = ()
    # Health samples, as written (None for an entry or figure that is not a finite number):
    memory_change_mb: tuple[float | None, ...] = ()  # cumulative, one entry per window
    memory_source: str | None = None
    live_bytes_change: tuple[float | None, ...] = ()  # tensor storage Python holds, cumulative
    live_start_bytes: float | None = None  # what it held when the precision started
    data_wait_s: float | None = None  # host seconds the windows waited for batches
    timed_host_s: float | None = None  # host seconds the windows took
    syncs_measured: bool = False
    sync_method: str = "cuda"  # "cuda": CUDA's sync debug mode; "dispatch": host reads
    sync_count: int | None = None
    sync_steps: int | None = None  # the training steps the syncs were counted over
    sync_locations: tuple[dict[str, Any], ...] = ()
    fp8_layers: int | None = None  # the fp8 arm's layers that trained in float8 (0: fell back)
    fp8_emulated: bool | None = None  # its float8 matmuls emulated in fp32 (a CPU's arm)
    matmul_dtypes: dict[str, int] = field(default_factory=dict)  # dtype -> matmuls in a forward
    matmul_dtype_expected: str | None = None
    live_graph_tensors: int | None = None  # most graph-attached tensors a window left behind
    latency_samples_ms: tuple[float | None, ...] = ()
    # Derived by the judge from the windows, the preset's sizes and the memory figures:
    step_time_ms: float | None = None  # the windows' median over the steps of a window
    iqr_ms: float | None = None
    tokens_per_second: float | None = None
    activation_mb: float | None = None  # peak minus static
    mfu: float | None = None  # share of the GPU's dense peak in the precision's compute dtype
    mfu_bf16: float | None = None  # fp8's arithmetic against the GPU's bf16 peak, for scale
    # Derived by the judge from the health samples (:func:`stagegate.judge.derive.health`):
    memory_growth_mb_per_window: float | None = None  # least-squares slope of memory_change_mb
    live_growth_pct_per_window: float | None = None  # slope of live_bytes_change, % of start
    data_wait_share: float | None = None  # data_wait_s over timed_host_s
    syncs_per_step: float | None = None  # sync_count over sync_steps
    latency_p50_ms: float | None = None  # percentiles, linearly interpolated
    latency_p95_ms: float | None = None


@dataclass(frozen=True)
class Comparison:
    """One precision against a baseline precision, as the judge derived it from both."""

    precision: str
    baseline: str
    speedup: float
    speedup_ci95: tuple[float, float]
    peak_memory_reduction_pct: float | None
    activation_memory_reduction_pct: float | None
    accuracy_diff: float | None
    val_loss_diff: float | None


@dataclass(frozen=True)
class MachineClaim:
    """The machine a stage's output file says it ran on (its ``machine_info``): a claim, held
    against what the stage's record observed. None: the file does not say."""

    gpu_name: str | None = None
    cpu_count: int | None = None
    arch: str | None = None  # platform.machine(): x86_64, aarch64
    driver: str | None = None  # the NVIDIA driver's version, one a GPU where it lists several
    gpu_memory_mb: float | None = None  # the GPU's memory as torch sees it (MiB)
    gpu_capability: str | None = None  # its compute capability, "9.0"


@dataclass(frozen=True)
class Benchmark:
    """A whole benchmark document."""

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
    settings: dict[str, Any] = field(default_factory=dict)
    # The sizes the file says its preset ran with (window_steps, batch_size, seq_len, ...);
    # what the preset must measure comes from the policy, never from here.
    preset_spec: dict[str, Any] = field(default_factory=dict)
    machine: MachineClaim = field(default_factory=MachineClaim)
    flops_per_token: int | None = None  # the file's model facts: training FLOPs a token

    def precision(self, name: str) -> PrecisionResult | None:
        """The result for ``name``, if it ran."""
        return next((p for p in self.precisions if p.name == name), None)


@dataclass(frozen=True)
class ABSide:
    """One side of an A/B benchmark file, as written: None for an entry that is not a finite
    number."""

    sha: str | None
    dirty: bool | None
    preset: dict[str, Any]
    window_s: tuple[float | None, ...]
    peak_mb: tuple[float | None, ...]


@dataclass(frozen=True)
class ABRun:
    """An A/B benchmark file: two commits' raw windows, interleaved (the judge derives every
    ratio from them)."""

    status: str
    error: str | None
    preset: str | None
    precision: str | None
    device: str | None
    windows: int | None
    order: tuple[str, ...]
    base: ABSide
    head: ABSide
    datetime: str = ""
    machine: MachineClaim = field(default_factory=MachineClaim)
    threads: int | None = None  # the threads a side's step ran on, as the file states


@dataclass(frozen=True)
class Curves:
    """Named series from a stage's metrics file (for example the integration loss curves)."""

    series: dict[str, tuple[float, ...]]


@dataclass(frozen=True)
class MissingFile:
    """A file the record names that is not there: ``kind`` as the record names it."""

    kind: str
    path: str
    message: str
    # The record holds its sha256: the stage wrote it, and something removed it afterwards.
    disappeared: bool = False
    stale: bool = False  # there, but left from before the stage: its command did not write it


@dataclass(frozen=True)
class RefusedFile:
    """A file the record names that collection would not read, and why (it resolves outside
    the raw directory, changed after the stage ended, or the record holds no hash for it)."""

    kind: str
    path: str
    reason: str


@dataclass(frozen=True)
class StageData:
    """What a stage's record points at, as collected (or why it could not be)."""

    record: StageRecord | None
    # No record, but the raw directory's run log says the stage ran (its start): removed since.
    record_gone: str = ""
    # No usable record: a file named after the stage that cannot be read, or two records.
    record_problem: str = ""
    suite: TestSuite | None = None
    coverage: Coverage | None = None
    warnings: tuple[WarningEntry, ...] = ()
    benchmark: Benchmark | None = None
    ab: ABRun | None = None
    curves: Curves | None = None
    lint: dict[str, list[LintFinding]] = field(default_factory=dict)
    input_errors: tuple[str, ...] = ()  # files that are there but cannot be read
    missing_files: tuple[MissingFile, ...] = ()
    refused_files: tuple[RefusedFile, ...] = ()
    # The same stage's tests on the base branch (``--base-raw``), or why there are none.
    base_suite: TestSuite | None = None
    base_note: str = ""
    base_coverage: Coverage | None = None
    changed: tuple[str, ...] | None = None  # the files the change touches; None: not known
    # The tests the other stages of this report ran (their file form, :func:`canonical`)
    ran_elsewhere: frozenset[str] = frozenset()
    executed_elsewhere: frozenset[str] = frozenset()  # of those, the ones that ran (no skip)
    recorded: frozenset[str] = frozenset()  # the stages this report holds a record of
    base_ran_elsewhere: frozenset[str] = frozenset()  # the tests other stages ran on the base


NOT_VERIFIED = "NOT VERIFIED"  # a baseline change the runs' spread could hide


@dataclass(frozen=True)
class MetricChange:
    """One metric of one precision, baseline against current, as the judge classed it."""

    precision: str
    metric: str
    baseline: float
    current: float
    change_pct: float  # positive: the metric grew
    margin_pct: float  # changes within this are noise (NOT VERIFIED: the runs' spread)
    verdict: str  # "regression", "improvement", "within noise" or NOT VERIFIED


@dataclass(frozen=True)
class BaselineComparison:
    comparable: bool
    reason: str  # why not comparable, or what was compared
    baseline_commit: str | None
    baseline_datetime: str
    changes: tuple[MetricChange, ...] = ()
    # The baseline given could not be read: the comparison is NOT VERIFIED (never a finding).
    unusable: bool = False

    @property
    def not_verified(self) -> str:
        """Why the comparison could not show a regression, or "" when it could."""
        if not self.comparable:
            return self.reason
        noisy = [
            f"{c.precision} {c.metric}: the runs' spread {c.margin_pct:.1f}% is above the "
            "regression margin"
            for c in self.changes
            if c.verdict == NOT_VERIFIED
        ]
        return "; ".join(noisy)

    @property
    def regressions(self) -> tuple[MetricChange, ...]:
        """The changes the judge classed as regressions."""
        return tuple(c for c in self.changes if c.verdict == "regression")

    @property
    def improvements(self) -> tuple[MetricChange, ...]:
        """The changes the judge classed as improvements."""
        return tuple(c for c in self.changes if c.verdict == "improvement")


@dataclass(frozen=True)
class MetricCheck:
    """One metric of one benchmark comparison against its target, and the judge's outcome."""

    comparison: Comparison
    metric: str
    value: float | None
    target: str  # the threshold as the policy writes it, e.g. ">= 1.5x"
    outcome: CheckOutcome
    why: str = ""  # the reason for a miss, or why it was not verified


class ABOutcome(Enum):
    """What the judge made of one A/B ratio against the policy's limit."""

    WITHIN = "PASS"  # the whole interval lies within the limit
    BEYOND = "REGRESSION"  # the whole interval lies beyond the limit: a blocking finding
    UNDECIDED = "NOT VERIFIED"  # the interval straddles the limit: never a PASS


@dataclass(frozen=True)
class ABCheck:
    """One head/base ratio recomputed from an A/B file's windows, and the judge's outcome."""

    metric: str  # "step_time" or "peak_memory"
    ratio: float
    low: float
    high: float
    limit: float  # the largest head/base ratio the policy accepts
    outcome: ABOutcome
    base_sha: str
    head_sha: str
    windows: int


@dataclass(frozen=True)
class Deduction:
    severity: Severity
    points: int
    title: str


@dataclass(frozen=True, kw_only=True)
class StageVerdict:
    """Everything the judge decided about one stage."""

    name: str
    status: StageStatus
    required: bool
    skippable: bool = False
    score: int
    findings: tuple[Finding, ...]  # most severe first
    blocking: tuple[Finding, ...] = ()  # the findings that block the merge
    deductions: tuple[Deduction, ...]
    data: StageData
    checks: tuple[MetricCheck, ...] = ()
    baseline: BaselineComparison | None = None
    ab: tuple[ABCheck, ...] = ()
    history: tuple[Benchmark, ...] = ()  # the trusted GPU baselines, oldest first: shown only
    note: str = ""  # why a stage is NOT VERIFIED, in words
    title: str = ""  # the stage's title, as the policy declares it (else its name)
    number: int = 0  # its place among the declared stages, from 1
    limits: Mapping[str, str] = field(default_factory=dict)  # thresholds its report states

    def count(self, severity: Severity) -> int:
        """Number of findings of ``severity``."""
        return sum(1 for f in self.findings if f.severity is severity)


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    score: int
    stages: tuple[StageVerdict, ...]
    blocking_reasons: tuple[str, ...]
    required_fixes: tuple[str, ...]
