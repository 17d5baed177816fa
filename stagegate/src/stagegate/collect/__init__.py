"""Collectors: read the files a stage produced into :mod:`stagegate.model` objects."""

from stagegate.collect.benchmark import read_benchmark
from stagegate.collect.files import read_coverage, read_curves, read_warnings
from stagegate.collect.junit import read_junit
from stagegate.collect.lint import LINT_TOOLS, read_lint

__all__ = [
    "LINT_TOOLS",
    "read_benchmark",
    "read_coverage",
    "read_curves",
    "read_junit",
    "read_lint",
    "read_warnings",
]
