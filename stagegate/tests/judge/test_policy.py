"""The written policy: boundary tables for every threshold, and bad config values."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stagegate.errors import ConfigError
from stagegate.judge.policy import (
    DEFAULT_STAGES,
    DEFAULT_THRESHOLDS,
    Policy,
    check_threshold,
    load_policy,
    policy_from_mapping,
)
from stagegate.model import Severity

T = DEFAULT_THRESHOLDS


@pytest.mark.parametrize(
    ("metric", "value", "meets"),
    [
        ("speedup", 1.4999, False),
        ("speedup", 1.5, True),
        ("speedup", 4.2, True),
        ("speedup", None, False),
        ("speedup", math.nan, False),
        ("speedup", 0.0, False),
        ("peak_memory_reduction_pct", 39.999, False),
        ("peak_memory_reduction_pct", 40.0, True),
        ("activation_memory_reduction_pct", 40.0, True),
        ("activation_memory_reduction_pct", -5.0, False),
        ("accuracy_diff", 0.0, True),
        ("accuracy_diff", 0.00999, True),
        ("accuracy_diff", 0.01, False),
        ("accuracy_diff", 0.5, False),
        ("coverage_pct", 79.99, False),
        ("coverage_pct", 80.0, True),
        ("coverage_pct", 100.0, True),
        ("memory_growth_mb_per_window", 2.0, True),
        ("memory_growth_mb_per_window", 2.01, False),
        ("memory_growth_mb_per_window", -1.0, True),
        ("syncs_per_step", 0.0, True),
        ("syncs_per_step", 0.34, False),
    ],
)
def test_threshold_boundaries(metric: str, value: float | None, meets: bool) -> None:
    reason = check_threshold(T[metric], value)
    assert (reason is None) is meets
    if reason:
        assert metric in reason and str(T[metric]) in reason


def test_defaults_are_the_seed_targets() -> None:
    p = Policy()
    assert (
        str(p.thresholds["speedup"]),
        str(p.thresholds["peak_memory_reduction_pct"]),
        str(p.thresholds["accuracy_diff"]),
    ) == (">= 1.5x", ">= 40%", "< 0.01")
    assert p.required == tuple(p.stages) == ("static", "execution")  # a plain project's two
    assert p.outputs == {"static": ("lint",), "execution": ("junit",)} and p.skippable == {}
    assert p.deduction[Severity.CRITICAL] > p.deduction[Severity.HIGH] > p.deduction[Severity.LOW]


def test_a_custom_table_overrides_what_it_names() -> None:
    p = policy_from_mapping(
        {
            "thresholds": {
                "speedup": {"op": ">", "value": 2},
                "coverage_pct": {"op": ">=", "value": 90},
            },
            "severity": {"slow_test": "info", "host_sync": "HIGH"},
            "deduction": {"HIGH": 25},
            "regression_margin_pct": 5,
            "required": ["static", "execution"],
        }
    )
    assert check_threshold(p.thresholds["speedup"], 2.0) is not None
    assert check_threshold(p.thresholds["speedup"], 2.01) is None
    assert p.severity["slow_test"] is Severity.INFO and p.severity["host_sync"] is Severity.HIGH
    assert p.deduction[Severity.HIGH] == 25 and p.deduction[Severity.CRITICAL] == 40
    assert p.regression_margin_pct == 5.0 and p.required == ("static", "execution")
    assert str(p.thresholds["accuracy_diff"]) == "< 0.01"  # untouched


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"speed": 1}, "'speed'"),
        ({"thresholds": {"speedup": {"op": "=>", "value": 1.5}}}, "thresholds.speedup"),
        ({"thresholds": {"speedup": {"op": ">=", "value": "fast"}}}, "thresholds.speedup.value"),
        ({"thresholds": {"latency": {"op": "<", "value": 1}}}, "thresholds.latency"),
        # a key a threshold does not have (its unit is the metric's own)
        ({"thresholds": {"speedup": {"op": ">=", "value": 2, "unit": "x"}}}, "thresholds.speedup"),
        ({"severity": {"test_failed": "FATAL"}}, "severity.test_failed"),
        ({"severity": {"typo_kind": "LOW"}}, "severity.typo_kind"),
        ({"deduction": {"HIGH": -3}}, "deduction.HIGH"),
        ({"deduction": {"FATAL": 3}}, "deduction.FATAL"),
        ({"regression_margin_pct": math.inf}, "regression_margin_pct"),
        ({"slow_test_s": -1}, "slow_test_s"),
        ({"required": ["static", "docs"]}, "required"),
        ({"stages": {"gpu": {"skippable": "always"}}}, "stages.gpu.skippable"),
        ({"stages": {"gpu": {"outputs": "junit"}}}, "stages.gpu.outputs"),
        ({"stages": {"gpu": {"outputs": ["xunit"]}}}, "stages.gpu.outputs"),
        ({"stages": {"gpu": {"titel": "GPU"}}}, "stages.gpu"),
        ({"stages": {"gpu": {"order": -1}}}, "stages.gpu.order"),
        ({"stages": {}}, "stages"),
        ({"skippable": {"performance": "no-cuda"}}, "'skippable'"),  # now a stage's own key
        ({"ab_min_windows": 1}, "ab_min_windows"),
        ({"ab_min_windows": 2.5}, "ab_min_windows"),
        ({"ab_min_windows": 501}, "ab_min_windows"),
        ({"history_runs": -1}, "history_runs"),
        ({"test_code": "e2e/*"}, "test_code"),  # a list of globs, not one
        ({"outputs": {"execution": ["junit"]}}, "'outputs'"),  # now a stage's own key
    ],
)
def test_a_bad_value_names_its_key(table: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        policy_from_mapping(table)


GPU = {"stages": {"static": {}, "gpu": {"title": "GPU", "skippable": "no-cuda"}}}


def test_a_declared_stage_takes_its_title_outputs_and_order() -> None:
    p = policy_from_mapping(
        {
            "stages": {
                "docs": {"title": "Documentation", "outputs": ["junit", "lint:vale"]},
                "gpu": {"skippable": "no-cuda", "order": 1},
                "unit": {},
            }
        }
    )
    assert list(p.stages) == ["docs", "gpu", "unit"]  # order 1, 1 (by position), then 3
    assert p.title("docs") == "Documentation" and p.title("unit") == "unit"
    assert p.outputs["docs"] == ("junit", "lint:vale") and p.outputs["unit"] == ()
    assert p.skippable == {"gpu": "no-cuda"} and p.required == ("docs", "gpu", "unit")
    assert list(policy_from_mapping({"stages": {"b": {"order": 9}, "a": {}}}).stages) == [
        "a",
        "b",
    ]


def test_require_makes_a_stage_mandatory_and_unskippable() -> None:
    p = policy_from_mapping({**GPU, "required": ["static"]}).require(("gpu",))
    assert "gpu" in p.required and "gpu" not in p.skippable
    assert p.stages["gpu"].title == "GPU"  # the rest of its declaration stays
    with pytest.raises(ConfigError, match="--require 'cuda'"):
        p.require(("cuda",))


def test_a_real_policy_file_loads(policy_file: Path) -> None:
    policy = load_policy(policy_file)
    assert policy.thresholds["speedup"].limit == 1.5
    assert policy.thresholds["peak_memory_reduction_pct"].limit == 35
    assert policy.rerun and policy.deduction[Severity.INFO] == 0


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "pyproject.toml"
    bad.write_text("[tool.stagegate\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_policy(bad)
    assert load_policy(tmp_path / "absent.toml") == Policy()


@pytest.mark.parametrize("severity", ["LOW", "HIGH", "CRITICAL", "MEDIUM"])
def test_slow_tests_can_never_cost_points(severity: str) -> None:
    with pytest.raises(ConfigError, match=r"slow_test.*must be INFO.*load"):
        policy_from_mapping({"severity": {"slow_test": severity}})
    assert (
        policy_from_mapping({"severity": {"slow_test": "info"}}).severity["slow_test"].value
        == "INFO"
    )


@pytest.mark.parametrize(
    "table",
    [
        {"allow_no_tests": ["nightly"]},
        {"required": ["nightly"]},
        {"required_tests": {"nightly": ["t.py::*"]}},
    ],
)
def test_a_key_naming_an_undeclared_stage_says_how_to_declare_it(table: dict) -> None:
    (key,) = table
    with pytest.raises(ConfigError, match=key) as caught:
        policy_from_mapping(table)
    assert "[tool.stagegate.stages.nightly]" in str(caught.value)
    assert policy_from_mapping({**table, "stages": {"nightly": {}}}).stages.keys() == {"nightly"}


def test_an_unknown_severity_lists_the_ones_there_are() -> None:
    with pytest.raises(ConfigError) as caught:
        policy_from_mapping({"severity": {"test_failed": "FATAL"}})
    assert "severity.test_failed" in str(caught.value) and "'FATAL'" in str(caught.value)
    assert all(s.value in str(caught.value) for s in Severity)


def test_unknown_stages_list_the_declared_ones() -> None:
    p = policy_from_mapping(GPU)
    for call, flag in ((p.only, "--only"), (p.require, "--require")):
        with pytest.raises(ConfigError) as caught:
            call(("static", "cuda", "cpu"))
        message = str(caught.value)
        assert flag in message and "'cuda'" in message and "static, gpu" in message


def test_only_narrows_what_is_required_and_judged() -> None:
    p = policy_from_mapping(GPU)
    narrowed = p.only(("gpu",))
    assert narrowed.required == ("gpu",) and narrowed.judged == ("gpu",)
    assert narrowed.judges("gpu") and not narrowed.judges("static") and p.judges("static")
    assert p.only(()) == p


def test_require_adds_a_stage_the_policy_did_not_require() -> None:
    p = policy_from_mapping({**GPU, "required": ["static"]}).require(("gpu",))
    assert p.required == ("static", "gpu") and "gpu" not in p.skippable


def test_a_pyproject_without_a_stagegate_table_is_the_default_policy(tmp_path: Path) -> None:
    for text in ("", "[tool.other]\nx = 1\n", "[project]\nname = 'x'\n"):
        (tmp_path / "pyproject.toml").write_text(text)
        assert load_policy(tmp_path / "pyproject.toml") == Policy()


def test_pyproject_is_read_as_utf_8_whatever_the_locale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TOML is UTF-8 by definition; the locale's encoding (ASCII under LC_ALL=C without
    # coercion) must not decide how the policy file reads.
    (tmp_path / "pyproject.toml").write_text("# café\n[tool.stagegate]\n", encoding="utf-8")
    encodings: list[object] = []
    read = Path.read_text

    def spy(self: Path, *args: object, **kwargs: object) -> str:
        encodings.append(kwargs.get("encoding", args[0] if args else None))
        return read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", spy)
    assert load_policy(tmp_path / "pyproject.toml") == Policy()
    assert encodings == ["utf-8"]


def test_rerun_names_the_command_that_runs_every_stage() -> None:
    assert Policy().rerun == ""  # the generic tool names no project's command of its own
    assert policy_from_mapping({"rerun": "make verify"}).rerun == "make verify"
    with pytest.raises(ConfigError, match="rerun"):
        policy_from_mapping({"rerun": ["make", "verify"]})


@pytest.mark.parametrize("points", [1, 5])
def test_info_findings_can_never_cost_points(points: int) -> None:
    """Slow tests are INFO: a score that counted them would depend on the machine's load."""
    with pytest.raises(ConfigError, match=r"deduction\.INFO"):
        policy_from_mapping({"deduction": {"INFO": points}})
    assert policy_from_mapping({"deduction": {"INFO": 0, "LOW": 2}}).deduction[Severity.LOW] == 2


@pytest.mark.parametrize("key", ["thresholds", "severity", "deduction"])
def test_a_table_key_given_a_plain_value_names_it(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        policy_from_mapping({key: 3})


def test_a_limit_may_be_below_zero() -> None:
    p = policy_from_mapping(
        {"thresholds": {"activation_memory_reduction_pct": {"op": ">=", "value": -5}}}
    )
    assert p.thresholds["activation_memory_reduction_pct"].limit == -5.0
    assert check_threshold(p.thresholds["activation_memory_reduction_pct"], -4.0) is None


@pytest.mark.parametrize(
    ("call", "known"),
    [
        (lambda: policy_from_mapping({"speed": 1}), "required"),
        (lambda: policy_from_mapping({"required": ["gpu"]}), "static"),
        (lambda: policy_from_mapping({"thresholds": {"latency": {}}}), "speedup"),
        (lambda: policy_from_mapping({"severity": {"typo": "LOW"}}), "test_failed"),
        (lambda: policy_from_mapping({"severity": {"test_failed": "FATAL"}}), "CRITICAL"),
        (lambda: Policy().only(("gpu",)), "static"),
        (lambda: Policy().require(("gpu",)), "static"),
    ],
)
def test_an_unknown_name_is_answered_with_the_list_of_known_ones(call, known: str) -> None:
    with pytest.raises(ConfigError) as caught:
        call()
    lists = {
        # every field of the policy is a key of the table, but the one --only sets
        "required": ", ".join(sorted(set(Policy.__dataclass_fields__) - {"judged"})),
        "static": ", ".join(DEFAULT_STAGES),
        "speedup": ", ".join(DEFAULT_THRESHOLDS),
        "test_failed": ", ".join(Policy().severity),
        "CRITICAL": ", ".join(s.value for s in Severity),
    }
    assert lists[known] in str(caught.value)  # a list a reader can copy a name from


def test_a_malformed_threshold_shows_how_to_write_one() -> None:
    with pytest.raises(ConfigError) as caught:
        policy_from_mapping({"thresholds": {"speedup": 1.5}})
    assert 'op = ">="' in str(caught.value) and "value = 1.5" in str(caught.value)


@pytest.mark.parametrize("windows", [2, 500])
def test_a_whole_number_setting_takes_its_bounds(windows: int) -> None:
    assert policy_from_mapping({"ab_min_windows": windows}).ab_min_windows == windows
