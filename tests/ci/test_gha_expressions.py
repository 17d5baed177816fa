"""The expression evaluator against GitHub's documented semantics."""

from __future__ import annotations

import pytest

from .gha_expressions import evaluate, job_runs

CTX = {
    "github": {"event_name": "pull_request", "event": {"action": "Labeled", "n": 3}},
    "needs": {"a": {"outputs": {"run": "true"}}},
    "list": ["x", "Y"],
}


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("github.event.action == 'labeled'", True),  # strings compare case-insensitively
        ("github.event['action'] != 'LABELED'", False),
        ("github.event.missing", None),
        ("github.event.n == '3'", True),  # mixed types compare as numbers
        ("github.event.n > 2 && github.event.n <= 3", True),
        ("null == 0", True),
        ("'' || 'fallback'", "fallback"),  # || returns an operand, not a boolean
        ("'a' && 'b'", "b"),
        ("!github.event.missing", True),
        ("contains(list, 'y')", True),
        ("contains('Hello world', 'WORLD')", True),
        ("startsWith(github.event_name, 'pull')", True),
        ("format('{0}-{1}', 'a', 2)", "a-2"),
        ("fromJSON('{\"k\": [1, 2]}').k[1]", 2),
        ("needs.a.outputs.run == 'true'", True),
        ("${{ 1 == 1.0 }}", True),
        ("'it''s'", "it's"),
    ],
)
def test_values(expression: str, value: object) -> None:
    assert evaluate(expression, CTX) == value


@pytest.mark.parametrize("bad", ["a ==", "(a", "a b", "unknownfn(1)", "a = 'b'"])
def test_syntax_errors(bad: str) -> None:
    with pytest.raises(SyntaxError):
        evaluate(bad, CTX)


def test_a_condition_without_a_status_function_needs_success() -> None:
    assert job_runs("true", CTX, needs_ok=True) and not job_runs("true", CTX, needs_ok=False)
    assert job_runs("always() && true", CTX, needs_ok=False)
    assert not job_runs(None, CTX, needs_ok=False) and job_runs(None, CTX, needs_ok=True)
