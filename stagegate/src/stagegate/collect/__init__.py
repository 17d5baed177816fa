"""Collection: read the files stages produced into :mod:`stagegate.model` objects; never judge."""

from stagegate.collect.benchmark import read_benchmark
from stagegate.collect.files import read_coverage, read_curves, read_warnings
from stagegate.collect.junit import read_junit
from stagegate.collect.lint import LINT_TOOLS, read_lint
from stagegate.collect.records import find_records, load_record, read_run_log
from stagegate.collect.stage import collect_stage, read_baselines, read_host

__all__ = [
    "LINT_TOOLS",
    "collect_stage",
    "find_records",
    "load_record",
    "read_baselines",
    "read_benchmark",
    "read_coverage",
    "read_curves",
    "read_host",
    "read_junit",
    "read_lint",
    "read_run_log",
    "read_warnings",
]
