"""The JUnit test files of four peer reporters (publish-unit-test-result-action, test-reporter,
action-junit-report, go-junit-report), read by stagegate at pinned commits: none crashes the
reader, and each file's counts are the ones the peer itself publishes for it, except the
disagreements listed in ``fixtures/junit/peers.toml``, each with its reason.

The files are the peers' own, under their licenses, so they are not in this repository: the
corpus is a folder of ``OWNER__REPO/`` trees, each with its LICENSE and a PIN file (repo,
commit, license, where the expectations come from), found at ``$STAGEGATE_JUNIT_PEERS`` (the
repository's noxfile sets it when ``shared/junit-peers`` lies beside the checkout). Every
file's sha256 is pinned in the table.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from stagegate.collect import read_junit
from stagegate.errors import InputError
from stagegate.model import TestSuite

from ..builders import FIXTURES_ROOT

TABLE = tomllib.loads((FIXTURES_ROOT / "junit" / "peers.toml").read_text())
FILES = {f"{f['peer']}:{f['path']}": f for f in TABLE["file"]}


def _corpus() -> Path | None:
    where = os.environ.get("STAGEGATE_JUNIT_PEERS")
    return Path(where) if where and Path(where).is_dir() else None


CORPUS = _corpus()
NO_CORPUS = "no peer corpus: set STAGEGATE_JUNIT_PEERS to its folder"


def _keys(wanted=lambda entry: True) -> list:
    """The table's files that ``wanted`` selects; without the corpus, one skipped case, so each
    test below is skipped once with the reason, not once per file."""
    if CORPUS is None:
        return [pytest.param("-", marks=pytest.mark.skip(reason=NO_CORPUS))]
    return sorted(k for k, e in FILES.items() if wanted(e))


def _path(entry: dict) -> Path:
    assert CORPUS is not None
    return CORPUS / entry["peer"].replace("/", "__") / entry["path"]


def _project(peer: str, suite: TestSuite) -> dict[str, int]:
    """Our counts in the peer's terms: none of them has a flaky outcome (a flaky test passed
    in the end), and test-reporter and action-junit-report count errors as failures."""
    c = {o: suite.count(o) for o in ("passed", "flaky", "failed", "error", "skipped")}
    out = {"tests": len(suite.cases), "passed": c["passed"] + c["flaky"], "skipped": c["skipped"]}
    if peer in ("dorny/test-reporter", "mikepenz/action-junit-report"):
        return out | {"failed": c["failed"] + c["error"]}
    return out | {"failed": c["failed"], "error": c["error"]}


def _counts(entry: dict, path: Path) -> dict[str, int] | str:
    """The file's counts in the peer's terms, keys as the peer publishes them; "unreadable"
    for a file stagegate refuses with a clear error."""
    try:
        suite = read_junit(path, root=path.parent)
    except InputError:
        return "unreadable"
    projected = _project(entry["peer"], suite)
    if not isinstance(entry["expect"], dict):
        return projected
    return {k: projected[k] for k in entry["expect"]}


@pytest.mark.skipif(CORPUS is None, reason=NO_CORPUS)
def test_the_corpus_is_the_pinned_one() -> None:
    assert CORPUS is not None
    for peer, pin in TABLE["peer"].items():
        folder = CORPUS / peer.replace("/", "__")
        assert (folder / "LICENSE").is_file(), f"{peer}: LICENSE missing"
        assert pin["commit"] in (folder / "PIN").read_text(), f"{peer}: PIN names another commit"
    on_disk = {
        f"{d.name.replace('__', '/', 1)}:{p.relative_to(d)}"
        for d in CORPUS.iterdir()
        if d.is_dir()
        for p in d.rglob("*.xml")
    }
    assert on_disk == set(FILES)
    for key, entry in FILES.items():
        assert hashlib.sha256(_path(entry).read_bytes()).hexdigest() == entry["sha256"], key


@pytest.mark.slow
@pytest.mark.parametrize("key", _keys())
def test_a_peer_file_never_crashes_the_reader(key: str) -> None:
    path = _path(FILES[key])
    try:
        suite = read_junit(path, root=path.parent)
    except InputError as err:
        assert str(path) in str(err)  # a clear error that names the file
        return
    assert all(c.outcome in ("passed", "flaky", "failed", "error", "skipped") for c in suite.cases)


AGREED = _keys(lambda e: "expect" in e and "deviation" not in e)
DEVIATIONS = _keys(lambda e: "deviation" in e)


@pytest.mark.parametrize("key", AGREED)
def test_counts_are_the_ones_the_peer_expects(key: str) -> None:
    entry = FILES[key]
    assert _counts(entry, _path(entry)) == entry["expect"]


@pytest.mark.slow
@pytest.mark.parametrize("key", DEVIATIONS)
def test_an_expected_deviation_from_a_peer(key: str) -> None:
    """The peer counts otherwise, for the reason the table gives; a deviation that no longer
    differs is stale and fails here too."""
    entry = FILES[key]
    deviation = entry["deviation"]
    assert deviation["why"]
    ours = _counts(entry, _path(entry))
    assert ours != entry["expect"]
    assert ours == deviation["ours"]


@pytest.mark.slow
@pytest.mark.parametrize("key", _keys(lambda e: e.get("deviation", {}).get("kind") == "merge"))
def test_a_merge_deviation_is_the_merge_alone(key: str, tmp_path: Path) -> None:
    """The peer counts every ``<testcase>`` of a test written several times; with each given a
    name of its own, our counts are the peer's: merging is the whole difference."""
    entry = FILES[key]
    tree = ET.parse(_path(entry))
    for i, case in enumerate(tree.iter("testcase")):
        case.set("name", f"{case.get('name')} #{i}")
    apart = tmp_path / "apart.xml"
    tree.write(apart)
    assert _counts(entry, apart) == entry["expect"]


@pytest.mark.slow
@pytest.mark.parametrize("key", _keys())
def test_a_count_mismatch_is_explained(key: str) -> None:
    """A file whose suites declare more tests than they hold gets a count_mismatch finding (it
    blocks); no peer checks that, so each such file names why it declares more."""
    path = _path(FILES[key])
    try:
        suite = read_junit(path, root=path.parent)
    except InputError:
        return
    assert bool(suite.count_mismatches) == ("mismatch" in FILES[key]), suite.count_mismatches
