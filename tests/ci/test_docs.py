"""The docs cannot go stale unnoticed: their measured tables equal what tools/docs_tables.py makes
of the committed result files, every relative link and anchor resolves, the README stays a
short entry point that links every doc, and the user docs stay short and hold no commit hashes
or times of day."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "stagegate" / "README.md",
    ROOT / "reports" / "baseline" / "README.md",
]
# Docs written on other branches at the same time: a link to one is checked once it exists.
PENDING = {"docs/faults.md", "docs/huggingface.md"}


def _tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_tables", ROOT / "tools" / "docs_tables.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["docs_tables"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


tables = _tables()


def _name(path: Path) -> str:
    """``path`` relative to the repository (as given when it lies outside)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


@pytest.mark.slow
@pytest.mark.parametrize("doc", tables.documents(), ids=_name)
def test_generated_tables_equal_the_result_files(doc: Path) -> None:
    text = doc.read_text()
    assert tables.fill(text) == text, f"run: python tools/docs_tables.py ({_name(doc)} is stale)"


def test_every_table_is_shown_in_some_doc() -> None:
    shown = {
        m["name"] for doc in tables.documents() for m in tables.MARKER.finditer(doc.read_text())
    }
    assert shown == set(tables.TABLES)


def _copy_sources(dest: Path) -> None:
    for table in tables.TABLES.values():
        for path in table.paths:
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / path, dest / path)


@pytest.mark.slow
def test_a_changed_result_file_makes_its_table_stale(tmp_path: Path) -> None:
    _copy_sources(tmp_path)
    doc = (ROOT / "docs" / "benchmark.md").read_text()
    assert tables.fill(doc, tmp_path) == doc
    bench = tmp_path / tables.BENCH
    data = json.loads(bench.read_text())
    arm = data["precisions"]["bf16-mixed"]  # a step of 12.5 ms in every window
    arm["window_s"] = [12.5 * arm["steps_per_window"] / 1e3] * len(arm["window_s"])
    bench.write_text(json.dumps(data))
    regenerated = tables.fill(doc, tmp_path)
    assert regenerated != doc and "| `bf16-mixed` | 12.50 |" in regenerated


@pytest.mark.slow
def test_a_hand_edited_figure_is_stale() -> None:
    doc = (ROOT / "docs" / "benchmark.md").read_text()
    edited = doc.replace("| `bf16-mixed` | ", "| `bf16-mixed` | 1", 1)
    assert edited != doc and tables.fill(edited) == doc


@pytest.mark.parametrize(
    "text",
    [
        "<!-- begin table:h100-run -->\nno end marker\n",
        "<!-- begin table:h100-run -->\n<!-- end table:h100-precisions -->\n",
        "<!-- begin table:no-such-table -->\n<!-- end table:no-such-table -->\n",
    ],
    ids=["unclosed", "mismatched", "unknown"],
)
def test_broken_markers_are_refused(text: str) -> None:
    with pytest.raises(tables.DocsTableError):
        tables.fill(text)


def test_an_unreadable_result_file_names_it(tmp_path: Path) -> None:
    _copy_sources(tmp_path)
    (tmp_path / tables.BENCH).write_text("{ not json")
    with pytest.raises(tables.DocsTableError, match=re.escape(str(tables.BENCH))):
        tables.render("h100-precisions", tmp_path)


def _links(doc: Path) -> list[str]:
    """Every link and image target of a markdown file."""
    found = []
    for token in MarkdownIt("commonmark").parse(doc.read_text()):
        for child in token.children or []:
            target = child.attrGet("href") or child.attrGet("src")
            if target:
                found.append(str(target))
    return found


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces made hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    tokens = MarkdownIt("commonmark").parse(doc.read_text())
    return {
        _slug(tokens[i + 1].content)
        for i, token in enumerate(tokens)
        if token.type == "heading_open"
    }


def _resolve(doc: Path, target: str) -> tuple[Path, str]:
    path, _, anchor = target.partition("#")
    return ((doc.parent / path).resolve() if path else doc), anchor


def _local_links(doc: Path) -> list[tuple[str, Path, str]]:
    return [
        (target, *_resolve(doc, target))
        for target in _links(doc)
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: need a network
    ]


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_relative_links_and_anchors_resolve(doc: Path) -> None:
    broken = []
    for target, path, anchor in _local_links(doc):
        if _name(path) in PENDING and not path.exists():
            continue  # test_pending_docs_once_they_exist reports these
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {_name(path)}")
    assert not broken, f"{_name(doc)}: {broken}"


@pytest.mark.parametrize("pending", sorted(PENDING))
def test_pending_docs_once_they_exist(pending: str) -> None:
    if not (ROOT / pending).exists():
        pytest.skip(f"{pending} is written on another branch and not merged here yet")
    assert _anchors(ROOT / pending), f"{pending} has no heading"


def test_the_link_checker_finds_a_broken_link_and_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title here\n\n[ok](#title-here) [gone](b.md) [no](#nope)\n")
    found = [
        t for t, p, a in _local_links(tmp_path / "a.md") if not p.exists() or a not in _anchors(p)
    ]
    assert found == ["b.md", "#nope"]


def test_slugs_match_githubs() -> None:
    assert _slug("What `stagegate run` records") == "what-stagegate-run-records"
    assert _slug("`fine_tune` against the bare step") == "fine_tune-against-the-bare-step"
    assert _slug("Several processes: torchrun") == "several-processes-torchrun"


def test_the_readme_is_short_and_links_every_doc() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    linked = {_name(path) for _, path, _ in _local_links(ROOT / "README.md")}
    docs = {_name(p) for p in (ROOT / "docs").glob("*.md")} | PENDING
    assert docs <= linked, f"not linked from README.md: {sorted(docs - linked)}"


# The user docs, whose size and content the rules below bound (the README is bounded above).
USER_DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "stagegate" / "README.md"]
WORD_LIMIT = 12_000
# A commit: 7 to 40 lowercase hex characters standing alone, with a digit and a letter among
# them. A sha256 digest (64 characters) is a longer run, so it never matches.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
# A time of day: H:MM or HH:MM, optionally :SS (with or without UTC after it).
TIME_OF_DAY = re.compile(r"\b(?:[01]?[0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9])?\b")


def _dated(text: str) -> list[str]:
    """The commit hashes and times of day a text holds."""
    return COMMIT.findall(text) + TIME_OF_DAY.findall(text)


def test_the_user_docs_stay_short() -> None:
    words = {_name(doc): len(doc.read_text().split()) for doc in USER_DOCS}
    assert sum(words.values()) < WORD_LIMIT, f"{sum(words.values())} words: {words}"


@pytest.mark.parametrize("doc", USER_DOCS, ids=_name)
def test_the_user_docs_hold_no_commit_or_time_of_day(doc: Path) -> None:
    found = _dated(doc.read_text())
    assert not found, (
        f"{_name(doc)} holds {found}: say how to reproduce a figure, not when or at which commit"
    )


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("measured at `3d34359`", ["3d34359"]),
        (
            "commit 8ec0703a1b2c3d4e5f60718293a4b5c6d7e8f901 today",
            ["8ec0703a1b2c3d4e5f60718293a4b5c6d7e8f901"],
        ),
        ("at 15:14 UTC", ["15:14"]),
        ("from 07:22:05", ["07:22:05"]),
        ("sha256 " + "ab12" * 16, []),
        ("633019392 FLOPs, a deadbeef, 2:4 sparsity, test.py::Class, 1.5x", []),
    ],
)
def test_commits_and_times_of_day_are_found(text: str, found: list[str]) -> None:
    assert _dated(text) == found
