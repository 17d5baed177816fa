"""One catalogue of finding kinds: every kind has its entry, every finding the judge makes names
a kind from it (a misspelt one is an error where it is made, never a quiet finding), and the
policy's severities keep within each kind's floor."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import stagegate
from stagegate.errors import ConfigError
from stagegate.judge.findings import Findings
from stagegate.judge.policy import Policy, policy_from_mapping
from stagegate.kinds import CATALOGUE, DEFAULT_SEVERITY, Kind
from stagegate.model import Severity

PACKAGE = Path(stagegate.__file__).parent


def test_every_kind_has_an_entry_and_a_meaning() -> None:
    assert set(CATALOGUE) == set(Kind)
    assert all(a.meaning.strip() for a in CATALOGUE.values())
    assert {str(k): a.severity for k, a in CATALOGUE.items()} == DEFAULT_SEVERITY
    order = list(Severity)
    assert all(order.index(a.severity) <= order.index(a.floor) for a in CATALOGUE.values())


def _kind_arguments() -> list[tuple[str, int, ast.expr]]:
    """The kind argument of every ``X.add(kind, ...)`` and ``flag(f, kind, ...)`` in the
    package, with where it is."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "add" and len(node.args) > 1:
                found.append((path.name, node.lineno, node.args[0]))
            elif isinstance(func, ast.Name) and func.id == "flag" and len(node.args) > 1:
                found.append((path.name, node.lineno, node.args[1]))
    return found


@pytest.mark.slow
def test_every_finding_names_its_kind_from_the_catalogue() -> None:
    arguments = _kind_arguments()
    assert len(arguments) > 100  # the judge's findings, found
    for where, line, arg in arguments:
        named = isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name)
        if named and arg.value.id == "Kind":  # type: ignore[attr-defined]
            assert arg.attr in Kind.__members__, f"{where}:{line}: Kind.{arg.attr}"  # type: ignore[attr-defined]
            continue
        assert not isinstance(arg, ast.Constant), f"{where}:{line}: a kind written as a string"


def test_a_kind_no_catalogue_entry_has_fails_where_it_is_made() -> None:
    f = Findings("execution", Policy())
    with pytest.raises(ValueError, match="test_fialed"):
        f.add("test_fialed", "a test failed", fix="fix it")  # type: ignore[arg-type]
    f.add(Kind.TEST_FAILED, "a test failed", fix="fix it")
    assert f.items[0].kind == "test_failed" and f.items[0].severity is Severity.CRITICAL


@pytest.mark.parametrize("kind", [k for k, a in CATALOGUE.items() if a.floor is not Severity.INFO])
def test_a_policy_cannot_set_a_kind_below_its_floor(kind: Kind) -> None:
    with pytest.raises(ConfigError, match=str(kind)):
        policy_from_mapping({"severity": {str(kind): "INFO"}})


def test_a_fixed_kind_cannot_be_moved_and_an_unknown_one_is_named() -> None:
    with pytest.raises(ConfigError, match="slow_test"):
        policy_from_mapping({"severity": {"slow_test": "HIGH"}})
    with pytest.raises(ConfigError, match="test_fialed"):
        policy_from_mapping({"severity": {"test_fialed": "HIGH"}})
    assert policy_from_mapping({"severity": {"lint_style": "HIGH"}}).severity["lint_style"] is (
        Severity.HIGH
    )
