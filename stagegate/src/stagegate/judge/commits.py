"""Which commit the records were made of: every record of one report must name the same one.

Records of different commits in one raw directory (a stage's record kept from an earlier run,
or copied from another branch) would let one commit's results pass for another's. The run's
commit is the one most records name; each record naming another (or none, beside records that
name one) is a blocking finding that names both. So is a record of the run's commit whose
stage began or ended on other changes to its files than the run's: an edit between stages,
or while one ran (by hand, or by the stage's own command: a stage that verifies must not
change what it verifies).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from operator import attrgetter

from stagegate.judge.findings import Findings
from stagegate.kinds import Kind
from stagegate.model import StageRecord


def run_commit(records: Mapping[str, StageRecord]) -> str:
    """The commit most records name (on a tie, one that names a commit, then the first named);
    "" when none names one."""
    counts = Counter(r.commit or "" for r in records.values())
    if not counts:
        return ""
    return max(counts, key=lambda c: (counts[c], c != ""))


_by_start = attrgetter("start")


def run_changes(records: Mapping[str, StageRecord], commit: str) -> dict[str, str] | None:
    """The changes to ``commit``'s tracked files that its records saw most often, as a stage
    began or as it ended (on a tie, the earliest); None where none of them says."""
    said = sorted((r for r in records.values() if (r.commit or "") == commit), key=_by_start)
    states = [
        sorted(state.items())
        for r in said
        for state in (r.changed_sha256, r.changed_sha256_end)
        if state is not None
    ]
    return dict(max(states, key=states.count)) if states else None


def commit_findings(
    f: Findings, record: StageRecord, commit: str, changes: Mapping[str, str] | None = None
) -> None:
    """A finding when ``record`` names another commit than the run's ``commit`` ("": none) or
    began or ended on other ``changes`` to its files than the run's, one when the stage ran
    on a tree with changes its commit does not hold (or git could not say), and one when its
    command changed another stage's results."""
    _uncommitted(f, record)
    _other_changes(f, record, commit, changes)
    if record.altered:
        f.add(
            Kind.RESULTS_ALTERED,
            f"{f.stage}'s command changed what another stage left ({len(record.altered)} files)",
            detail=", ".join(record.altered[:10]),
            fix="a stage's command must not write to another stage's records or files: find "
            "what in the change writes there (a conftest, a fixture, a script), remove it, and "
            "run every stage again into an emptied raw folder",
        )
    if (record.commit or "") == commit:
        return
    this, run = record.commit or "no commit", commit or "no commit"
    f.add(
        Kind.COMMIT_MISMATCH,
        f"{f.stage}'s record is of {this[:12]}; the other records are of {run[:12]}",
        detail=f"{f.stage}: {this}; the run: {run}. One report judges one commit: results of "
        "another commit say nothing about this one",
        fix="run every stage again on one checkout, into an emptied raw directory",
    )


def _other_changes(
    f: Findings, record: StageRecord, commit: str, changes: Mapping[str, str] | None
) -> None:
    if changes is None or (record.commit or "") != commit:
        return
    seen = {"began": record.changed_sha256, "ended": record.changed_sha256_end}
    for when, own in seen.items():
        if own is None or own == changes:
            continue
        paths = sorted(p for p in {*own, *changes} if own.get(p) != changes.get(p))
        f.add(
            Kind.TREE_MISMATCH,
            f"{f.stage} {when} on other changes to {len(paths)} file(s) than the other stages: "
            "the records are of two trees",
            detail=", ".join(paths[:10])
            + (f"; and {len(paths) - 10} more" if len(paths) > 10 else ""),
            fix="one report judges one tree: edit nothing while the stages run (a stage's "
            "command included: run a formatter with --check), then run every stage again into "
            "an emptied raw directory",
        )
        return


def _uncommitted(f: Findings, record: StageRecord) -> None:
    fix = (
        "commit (or stash) the changes and run the stages again; a gate that must refuse such "
        'runs sets [tool.stagegate.severity] uncommitted_changes = "HIGH"'
    )
    if record.uncommitted is None:
        f.add(
            Kind.UNCOMMITTED_CHANGES,
            f"{f.stage}'s record does not say whether its tree held uncommitted changes",
            detail="git could not list the checkout's changes when the stage started",
            fix="run the stage in a git checkout of the commit, with git on the PATH",
        )
    elif record.uncommitted:
        shown, more = ", ".join(record.uncommitted[:10]), len(record.uncommitted) - 10
        f.add(
            Kind.UNCOMMITTED_CHANGES,
            f"{f.stage} ran on uncommitted changes ({len(record.uncommitted)} paths): its "
            "commit does not hold everything that ran",
            detail=shown + (f"; and {more} more" if more > 0 else ""),
            fix=fix,
        )
