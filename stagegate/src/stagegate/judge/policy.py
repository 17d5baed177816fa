"""The written policy (``[tool.stagegate]`` in pyproject.toml): data, checked by pure functions."""

from __future__ import annotations

import fnmatch
import math
import operator
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stagegate.errors import ConfigError
from stagegate.judge.benchpolicy import BenchmarkPolicy, benchmark_policy
from stagegate.kinds import DEFAULT_SEVERITY, Kind
from stagegate.model import Severity, stage_name_problem

__all__ = [
    "BenchmarkPolicy",
    "Policy",
    "StageSpec",
    "Threshold",
    "check_threshold",
    "load_policy",
]
_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@dataclass(frozen=True)
class Threshold:
    """``value OP limit`` must hold, e.g. speedup >= 1.5."""

    metric: str
    op: str
    limit: float
    unit: str = ""

    def __str__(self) -> str:
        return f"{self.op} {self.limit:g}{self.unit}"


def check_threshold(threshold: Threshold, value: float | None) -> str | None:
    """Why ``value`` misses ``threshold``, or None when it meets it (a missing value misses)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{threshold.metric} was not measured (target {threshold})"
    if _OPS[threshold.op](value, threshold.limit):
        return None
    return f"{threshold.metric} is {value:.4g}{threshold.unit}, target {threshold}"


DEFAULT_THRESHOLDS = {
    "speedup": Threshold("speedup", ">=", 1.5, "x"),
    "peak_memory_reduction_pct": Threshold("peak_memory_reduction_pct", ">=", 40.0, "%"),
    "activation_memory_reduction_pct": Threshold(
        "activation_memory_reduction_pct", ">=", 40.0, "%"
    ),
    "accuracy_diff": Threshold("accuracy_diff", "<", 0.01),
    # fp8 against bf16-mixed, the autocast it adds float8 matmuls to: faster on a GPU, and its
    # accuracy at parity (its own bound: float8 rounds more than bf16), on any device
    "fp8_speedup": Threshold("fp8_speedup", ">=", 1.1, "x"),
    "fp8_accuracy_diff": Threshold("fp8_accuracy_diff", "<", 0.02),
    "coverage_pct": Threshold("coverage_pct", ">=", 80.0, "%"),
    "memory_growth_mb_per_window": Threshold("memory_growth_mb_per_window", "<=", 2.0, " MB"),
    "syncs_per_step": Threshold("syncs_per_step", "<=", 0.0),
    # Tensors still attached to an autograd graph between steps (each keeps a graph alive).
    "live_graph_tensors": Threshold("live_graph_tensors", "<=", 0.0),
    # Growth of Python-held tensor storage per window, relative to what the run started with.
    "live_tensor_growth_pct_per_window": Threshold(
        "live_tensor_growth_pct_per_window", "<=", 1.0, "%"
    ),
}

# The files each stage must declare and produce, whatever its record says (``--junit`` ...);
# "lint" asks for at least one linter's file, "lint:TOOL" for that tool's. By default, the one
# file without which the stage cannot be judged at all; a repository's policy adds the rest.
OUTPUT_KINDS = ("junit", "coverage", "warnings", "benchmark", "metrics", "ab", "lint")
SKIP_REASONS = ("no-cuda",)  # when a declared stage may go unverified: it ran without a GPU


@dataclass(frozen=True)
class StageSpec:
    """A stage the repository declares (``[tool.stagegate.stages.NAME]``): its title, the
    files it must produce (kinds of evidence: ``junit``, ``lint:ruff``, ...), and when it may
    go unverified."""

    title: str
    outputs: tuple[str, ...] = ()
    skippable: str | None = None  # "no-cuda": it ran on a machine without a GPU
    # It runs a few of the tests other stages run (``-m cuda``): the tests it drops are not
    # looked for in the other stages' results (a report may judge it alone)
    subset: bool = False
    # Its tests carry this pytest mark (``-m slow``): another stage may drop them, and where
    # this stage did not run they wait for it (test_left_to_stage), never run nowhere
    marker: str | None = None


# With no policy: a plain Python project's two stages, both required
DEFAULT_STAGES = {
    "static": StageSpec("Static analysis", ("lint",)),
    "execution": StageSpec("Tests", ("junit",)),
}

DEFAULT_DEDUCTION = {
    Severity.CRITICAL: 40,
    Severity.HIGH: 20,
    Severity.MEDIUM: 5,
    Severity.LOW: 1,
    Severity.INFO: 0,
}


@dataclass(frozen=True, kw_only=True)
class Policy:
    """Everything the judge needs to decide; defaults come from the seed reports."""

    # The declared stages, in their order; what each must produce and when it may be skipped
    stages: Mapping[str, StageSpec] = field(default_factory=lambda: dict(DEFAULT_STAGES))
    required: tuple[str, ...] = tuple(DEFAULT_STAGES)
    thresholds: Mapping[str, Threshold] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    severity: Mapping[str, Severity] = field(default_factory=lambda: dict(DEFAULT_SEVERITY))
    deduction: Mapping[Severity, int] = field(default_factory=lambda: dict(DEFAULT_DEDUCTION))
    regression_margin_pct: float = 10.0
    slow_test_s: float = 5.0
    judged: tuple[str, ...] | None = None  # --only: just these; None: every stage
    # Stages that may execute no test (all skipped or disabled) and still pass.
    allow_no_tests: tuple[str, ...] = ()
    judged_baseline: str = "32-true"  # thresholds apply to comparisons against this precision
    rerun: str = ""  # the command that runs every stage, named in the fix for a missing one
    # stage -> node ids or patterns (``*`` matches anything) of tests that must run and pass
    required_tests: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Node ids or patterns of tests no stage runs on purpose (opt-in suites): never
    # test_run_nowhere, which every other test a stage drops stays
    not_run: tuple[str, ...] = ()
    # Globs (``*`` crosses folders) of the gate's own definition: a change touching one is
    # named at the top of the summary.
    gate_files: tuple[str, ...] = ()
    # Globs (``*`` crosses folders) of the tests' own helpers besides conftest.py files and
    # paths named test* (``e2e/*``): a skip raised in one is the tests' decision, never
    # skipped_by_code_under_test
    test_code: tuple[str, ...] = ()
    # A finding when a stage's skipped share rises more than this (percentage points) over the
    # base branch's with tests that ran there skipped here.
    skip_jump_pct: float = 0.0
    benchmark: BenchmarkPolicy = field(default_factory=BenchmarkPolicy)
    # A/B (the regression stage): the largest slowdown of the head's step over the base's, and
    # the largest growth of its peak CUDA memory, in percent; the fewest windows a side.
    ab_step_time_limit_pct: float = 10.0
    ab_memory_limit_pct: float = 5.0
    ab_min_windows: int = 8
    history_runs: int = 20  # the trusted baselines the History charts draw, newest last

    def gate_files_in(self, changed: tuple[str, ...]) -> tuple[str, ...]:
        """The changed files that define the gate itself, by the ``gate_files`` globs."""
        return tuple(
            p for p in changed if any(fnmatch.fnmatchcase(p, glob) for glob in self.gate_files)
        )

    def is_test_code(self, path: str) -> bool:
        """Whether ``path`` (below the root) is one of the tests' helpers the policy names."""
        return any(fnmatch.fnmatchcase(path, glob) for glob in self.test_code)

    @property
    def outputs(self) -> Mapping[str, tuple[str, ...]]:
        """stage -> the files it must produce; one it leaves out blocks."""
        return {name: spec.outputs for name, spec in self.stages.items()}

    @property
    def skippable(self) -> Mapping[str, str]:
        """stage -> when it may go unverified (``--require`` takes it away)."""
        return {name: spec.skippable for name, spec in self.stages.items() if spec.skippable}

    def title(self, stage: str) -> str:
        """The stage's title: its declaration's, else its name."""
        spec = self.stages.get(stage)
        return spec.title if spec is not None else stage

    def judges(self, stage: str) -> bool:
        """Whether this report judges ``stage`` (``--only`` narrows it)."""
        return self.judged is None or stage in self.judged

    def _declared(self, option: str, stages: tuple[str, ...]) -> None:
        unknown = [s for s in stages if s not in self.stages]
        if unknown:
            raise ConfigError(
                f"{option} {unknown[0]!r}: not a declared stage; declared: "
                f"{', '.join(self.stages)} (declare it under [tool.stagegate.stages.{unknown[0]}])"
            )

    def require(self, stages: tuple[str, ...]) -> Policy:
        """The same policy with ``stages`` required and no longer skippable."""
        self._declared("--require", stages)
        declared = {
            name: replace(spec, skippable=None) if name in stages else spec
            for name, spec in self.stages.items()
        }
        required = tuple(dict.fromkeys((*self.required, *stages)))
        return replace(self, stages=declared, required=required)

    def only(self, stages: tuple[str, ...]) -> Policy:
        """The same policy restricted to ``stages`` (none given: every stage)."""
        if not stages:
            return self
        self._declared("--only", stages)
        return replace(
            self,
            required=tuple(s for s in self.required if s in stages),
            judged=stages,
        )


def _severity(key: str, value: Any) -> Severity:
    try:
        return Severity(str(value).upper())
    except ValueError:
        names = ", ".join(s.value for s in Severity)
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: use one of {names}") from None


def _number(key: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a finite number is needed")
    if value < minimum:
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: must be >= {minimum:g}")
    return float(value)


def _whole(key: str, value: Any, minimum: int) -> int:
    number = _number(key, value, minimum)
    if number != int(number) or number > 500:
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a whole number up to 500")
    return int(number)


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a string is needed")
    return value


def _stage_list(key: str, value: Any) -> tuple[str, ...]:
    """Stage names (each checked against the declared stages once all keys are read)."""
    if not isinstance(value, list) or any(stage_name_problem(s) for s in value):
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a list of stage names")
    return tuple(value)


def _table(key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a table is needed")
    return value


def _thresholds(key: str, value: Any) -> dict[str, Threshold]:
    thresholds = dict(DEFAULT_THRESHOLDS)
    for name, spec in _table(key, value).items():
        where = f"{key}.{name}"
        if name not in DEFAULT_THRESHOLDS:
            raise ConfigError(
                f"[tool.stagegate] {where}: unknown metric; known: {', '.join(DEFAULT_THRESHOLDS)}"
            )
        well_formed = isinstance(spec, dict) and set(spec) == {"op", "value"}
        if not well_formed or spec.get("op") not in _OPS:
            raise ConfigError(
                f"[tool.stagegate] {where} = {spec!r}: write "
                '{ op = ">=", value = 1.5 } with op one of >=, >, <=, <'
            )
        limit = _number(f"{where}.value", spec["value"], minimum=-math.inf)
        thresholds[name] = Threshold(name, spec["op"], limit, DEFAULT_THRESHOLDS[name].unit)
    return thresholds


def _severities(key: str, value: Any) -> dict[str, Severity]:
    severity = dict(DEFAULT_SEVERITY)
    order = list(Severity)
    for kind, name in _table(key, value).items():
        if kind not in DEFAULT_SEVERITY:
            raise ConfigError(
                f"[tool.stagegate] {key}.{kind}: unknown finding kind; known: "
                f"{', '.join(DEFAULT_SEVERITY)}"
            )
        chosen, about = _severity(f"{key}.{kind}", name), Kind(kind).about
        if about.fixed and chosen is not about.severity:
            raise ConfigError(
                f"[tool.stagegate] {key}.{kind} = {name!r}: must be {about.severity.value}; "
                f"{kind} ({about.meaning}) depends on the machine's load, and the same code "
                "must get the same verdict and score"
            )
        if order.index(chosen) > order.index(about.floor):
            raise ConfigError(
                f"[tool.stagegate] {key}.{kind} = {name!r}: must be {about.floor.value} or "
                f"more severe; {kind} ({about.meaning}) is evidence that cannot pass"
            )
        severity[kind] = chosen
    return severity


def _deductions(key: str, value: Any) -> dict[Severity, int]:
    deduction = dict(DEFAULT_DEDUCTION)
    for name, points in _table(key, value).items():
        deduction[_severity(f"{key}.{name}", name)] = int(_number(f"{key}.{name}", points))
    if deduction[Severity.INFO]:
        raise ConfigError(
            f"[tool.stagegate] {key}.INFO = {deduction[Severity.INFO]!r}: must be 0; INFO "
            "findings (slow tests among them) depend on the machine's load, and the same code "
            "must get the same score"
        )
    return deduction


def _texts(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"[tool.stagegate] {key} = {value!r}: a list of non-empty strings")
    return tuple(value)


def _required_tests(key: str, value: Any) -> dict[str, tuple[str, ...]]:
    required = {}
    for stage, patterns in _table(key, value).items():
        problem = stage_name_problem(stage)
        if problem:
            raise ConfigError(f"[tool.stagegate] {key}: {problem}")
        required[stage] = _texts(f"{key}.{stage}", patterns)
        if not required[stage]:
            raise ConfigError(f"[tool.stagegate] {key}.{stage}: name at least one test")
    return required


def _output_kind(key: str, kind: str) -> str:
    name, sep, tool = kind.partition(":")
    if name not in OUTPUT_KINDS or (sep and (name != "lint" or stage_name_problem(tool))):
        raise ConfigError(
            f"[tool.stagegate] {key} = {kind!r}: use one of {', '.join(OUTPUT_KINDS)}, "
            'or "lint:TOOL" for one linter\'s file'
        )
    return kind


_STAGE_KEYS = {"title", "order", "outputs", "skippable", "subset", "marker"}


def _stage(key: str, value: Any) -> tuple[int | None, StageSpec]:
    table = _table(key, value)
    unknown = set(table) - _STAGE_KEYS
    if unknown:
        raise ConfigError(
            f"[tool.stagegate] {key}: unknown key {sorted(unknown)[0]!r}; known: "
            f"{', '.join(sorted(_STAGE_KEYS))}"
        )
    outputs = table.get("outputs", [])
    if not isinstance(outputs, list):
        raise ConfigError(f"[tool.stagegate] {key}.outputs = {outputs!r}: a list of file kinds")
    skippable = table.get("skippable")
    if skippable is not None and skippable not in SKIP_REASONS:
        raise ConfigError(
            f"[tool.stagegate] {key}.skippable = {skippable!r}: {' or '.join(SKIP_REASONS)}"
        )
    order = table.get("order")
    if order is not None:
        order = _whole(f"{key}.order", order, minimum=0)
    subset = table.get("subset", False)
    if not isinstance(subset, bool):
        raise ConfigError(f"[tool.stagegate] {key}.subset = {subset!r}: true or false")
    title = _text(f"{key}.title", table.get("title", key.rpartition(".")[2]))
    kinds = tuple(_output_kind(f"{key}.outputs", str(k)) for k in outputs)
    marker = table.get("marker")
    if marker is not None and not (isinstance(marker, str) and marker.isidentifier()):
        raise ConfigError(
            f"[tool.stagegate] {key}.marker = {marker!r}: the name of a pytest mark (slow)"
        )
    return order, StageSpec(title, kinds, skippable, subset, marker)


def _stages(key: str, value: Any) -> dict[str, StageSpec]:
    """The declared stages, by their ``order``; one without takes its place in the table
    (the first 1, the next 2, ...)."""
    declared = []
    for i, (name, spec) in enumerate(_table(key, value).items()):
        problem = stage_name_problem(name)
        if problem:
            raise ConfigError(f"[tool.stagegate] {key}: {problem}")
        order, parsed = _stage(f"{key}.{name}", spec)
        declared.append((order if order is not None else i + 1, i, name, parsed))
    if not declared:
        raise ConfigError(f"[tool.stagegate] {key}: declare at least one stage")
    return {name: spec for _, _, name, spec in sorted(declared)}


# Each key of [tool.stagegate] and the function that checks and converts its value.
_KEYS: dict[str, Callable[[str, Any], Any]] = {
    "stages": _stages,
    "required": _stage_list,
    "thresholds": _thresholds,
    "severity": _severities,
    "deduction": _deductions,
    "regression_margin_pct": _number,
    "slow_test_s": _number,
    "judged_baseline": _text,
    "allow_no_tests": _stage_list,
    "rerun": _text,
    "required_tests": _required_tests,
    "not_run": _texts,
    "gate_files": _texts,
    "test_code": _texts,
    "skip_jump_pct": _number,
    "benchmark": benchmark_policy,
    "ab_step_time_limit_pct": _number,
    "ab_memory_limit_pct": _number,
    "ab_min_windows": lambda key, value: _whole(key, value, minimum=2),
    "history_runs": lambda key, value: _whole(key, value, minimum=0),
}


def _declared_names(values: dict[str, Any], stages: Mapping[str, StageSpec]) -> None:
    """Every stage a key names is one the policy declares."""
    named = {
        "required": values.get("required", ()),
        "allow_no_tests": values.get("allow_no_tests", ()),
        "required_tests": tuple(values.get("required_tests", {})),
    }
    for key, names in named.items():
        unknown = [n for n in names if n not in stages]
        if unknown:
            raise ConfigError(
                f"[tool.stagegate] {key} names {unknown[0]!r}, which is not a declared stage; "
                f"declared: {', '.join(stages)} (declare it under "
                f"[tool.stagegate.stages.{unknown[0]}])"
            )


def policy_from_mapping(table: Mapping[str, Any]) -> Policy:
    """A Policy from a ``[tool.stagegate]`` table; a bad value raises ConfigError naming it."""
    for key in table:
        if key not in _KEYS:
            raise ConfigError(
                f"[tool.stagegate] has an unknown key {key!r}; known: {', '.join(sorted(_KEYS))}"
            )
    values = {key: _KEYS[key](key, value) for key, value in table.items()}
    stages = values.setdefault("stages", dict(DEFAULT_STAGES))
    values.setdefault("required", tuple(stages))
    _declared_names(values, stages)
    return Policy(**values)


def load_policy(pyproject: Path | None) -> Policy:
    """The policy in ``pyproject``'s ``[tool.stagegate]``; the defaults where there is none."""
    if pyproject is None or not pyproject.exists():
        return Policy()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject} is not valid TOML: {exc}") from None
    return policy_from_mapping(data.get("tool", {}).get("stagegate", {}))
