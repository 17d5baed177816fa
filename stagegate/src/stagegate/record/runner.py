"""``stagegate run``: execute a stage's command, stream its output, end every process it
started, and always write its record, with the sha256 of each file it names."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from stagegate.errors import UsageError
from stagegate.io import sha256_file, write_atomic
from stagegate.model import (
    RUN_LOG,
    StageRecord,
    counts_path,
    gate_witness_path,
    named_files,
    stage_name_problem,
)
from stagegate.record.machine import observe
from stagegate.record.proctree import children, end_tree, subreaper
from stagegate.record.watch import altered, inside, watch

TAIL_CHARS = 8000  # per stream, kept in the record; the full output went to the console
EXIT_TIMEOUT = 124
EXIT_NOT_STARTED = 127
EXIT_NO_RECORD = 3  # the record itself could not be written
_ENV_KEYS = (
    "CI",
    "GITHUB_RUN_ID",
    "GITHUB_REF",
    "GITHUB_SHA",
    "RUNNER_NAME",
    "RUNNER_OS",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)


class _Tail:
    """The last ``limit`` characters of a stream, in bounded memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: deque[str] = deque()
        self.size = 0
        self.dropped = False

    def add(self, text: str) -> None:
        self.chunks.append(text)
        self.size += len(text)
        while self.size - len(self.chunks[0]) >= self.limit:
            self.size -= len(self.chunks.popleft())
            self.dropped = True

    def text(self) -> str:
        joined = "".join(self.chunks)
        if len(joined) > self.limit or self.dropped:
            return "[... earlier output cut ...]\n" + joined[-self.limit :]
        return joined


def _pump(stream: IO[bytes], sink: IO[str], tail: _Tail) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        sink.write(line)
        sink.flush()
        tail.add(line)
    stream.close()


def _git_commit(env: Mapping[str, str]) -> str | None:
    out = _git("rev-parse", "HEAD")
    return (out.decode("ascii", "replace").strip() if out else "") or env.get("GITHUB_SHA")


MAX_UNCOMMITTED = 200  # paths kept in a record; past that, a last entry counts the rest


# git as stagegate asks it: no hook, no file-system monitor, nothing the checkout's own
# configuration (which a stage's code can write) makes it run.
_GIT = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]


def _git(*args: str) -> bytes | None:
    try:
        return subprocess.run([*_GIT, *args], capture_output=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _paths(out: bytes) -> list[str]:
    """The paths of ``git status --porcelain=v1 -z``: "XY path", a rename's source after it."""
    fields, paths = iter(out.decode("utf-8", "replace").split("\0")), []
    for entry in fields:
        if len(entry) > 3:
            paths.append(entry[3:])
            if "R" in entry[:2] or "C" in entry[:2]:
                next(fields, None)
    return paths


def _hidden(out: bytes) -> list[str]:
    """The paths ``git ls-files -v -z`` marks as hidden from status: assume-unchanged (a
    lower-case tag) or skip-worktree (S)."""
    entries = out.decode("utf-8", "replace").split("\0")
    return [e[2:] for e in entries if len(e) > 2 and (e[0].islower() or e[0] == "S")]


def _git_scope(out_dir: Path) -> tuple[Path, list[str]] | None:
    """The checkout's top and the pathspec of the whole checkout but the stages' output folder
    (where it lies inside); None where git cannot say (no checkout, no git)."""
    top = _git("rev-parse", "--show-toplevel")
    if top is None:
        return None
    root, folder = Path(top.decode("utf-8", "surrogateescape").strip()), out_dir.resolve()
    inside = folder != root and folder.is_relative_to(root)
    return root, ["--", ":/", *([f":(exclude){folder}"] if inside else [])]


def _marked(where: list[str]) -> list[str] | None:
    """The tracked paths in ``where`` git is told to look past (:func:`_hidden`)."""
    listed = _git("ls-files", "-z", "-v", "--full-name", *where)
    return None if listed is None else _hidden(listed)


def _git_uncommitted(out_dir: Path) -> list[str] | None:
    """The paths the commit does not hold as they are in the checkout: changed or staged,
    untracked (what .gitignore files ignore left out, not what .git/info/exclude or a global
    excludes file hides), or marked for git to look past; the stages' output folder left out
    where it lies inside. None where git cannot say (no checkout, no git)."""
    scope = _git_scope(out_dir)
    if scope is None:
        return None
    where = scope[1]
    changed = _git("status", "--porcelain=v1", "-z", "--untracked-files=no", *where)
    untracked = _git("ls-files", "-z", "--full-name", "--others",
                     "--exclude-per-directory=.gitignore", *where)  # fmt: skip
    marked = _marked(where)
    if changed is None or untracked is None or marked is None:
        return None
    listed = [*_paths(changed), *untracked.decode("utf-8", "replace").split("\0"), *marked]
    paths = list(dict.fromkeys(p for p in listed if p))
    if len(paths) > MAX_UNCOMMITTED:
        rest = len(paths) - MAX_UNCOMMITTED + 1
        paths = [*paths[: MAX_UNCOMMITTED - 1], f"... and {rest} more"]
    return paths


def _git_changed_sha256(out_dir: Path) -> dict[str, str] | None:
    """Each file git tracks that the checkout has changed, staged or not, or that git is told
    to look past (the stages' output folder left out) -> the sha256 of what it holds now
    (:func:`_content_sha256`). None where git cannot say."""
    scope = _git_scope(out_dir)
    if scope is None:
        return None
    changed = _git("diff", "HEAD", "--name-only", "--no-renames", "--no-relative", "-z", *scope[1])
    marked = _marked(scope[1])
    if changed is None or marked is None:
        return None
    listed = [*changed.decode("utf-8", "surrogateescape").split("\0"), *marked]
    held = {n: _content_sha256(scope[0] / n) for n in sorted({n for n in listed if n})}
    if len(held) <= MAX_UNCOMMITTED:
        return held
    names = list(held)  # past the limit, the rest as one digest of their names and contents
    rest = hashlib.sha256(
        "\0".join(f"{n}\0{held[n]}" for n in names[MAX_UNCOMMITTED - 1 :]).encode()
    )
    kept = {n: held[n] for n in names[: MAX_UNCOMMITTED - 1]}
    return {**kept, f"... and {len(names) - MAX_UNCOMMITTED + 1} more": rest.hexdigest()}


def _content_sha256(path: Path) -> str:
    """The sha256 of a regular file's bytes or of a symbolic link's target; "" for anything
    else (deleted, a folder, a pipe, unreadable), which is never opened."""
    try:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            return hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()
        return sha256_file(path) if stat.S_ISREG(mode) else ""
    except OSError:
        return ""


def environment(env: Mapping[str, str]) -> dict[str, Any]:
    """Where the stage ran, as observed here (:func:`stagegate.record.machine.observe`)."""
    return observe(env, _ENV_KEYS)


def _exited(pid: int, timeout_s: float | None) -> bool:
    """Wait until ``pid`` has exited, leaving it unreaped (False on timeout). While its exit
    status waits, its pid stays taken: a process it started cannot see it gone and act before
    the stage's processes are ended."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """Terminate the command's whole process group, then kill it if it does not stop."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if _exited(proc.pid, wait_s):
            return


@dataclass
class _Outcome:
    """How the command ended, and the tails of its output."""

    tails: tuple[_Tail, _Tail] = field(
        default_factory=lambda: (_Tail(TAIL_CHARS), _Tail(TAIL_CHARS))
    )
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    error: str | None = None
    left: int = 0  # processes it started that could not be ended

    @property
    def code(self) -> int:
        """The command's own exit code, 124 on timeout, 128+N on signal N, 127 if not started."""
        if self.error is not None:
            return EXIT_NOT_STARTED
        if self.timed_out:
            return EXIT_TIMEOUT
        if self.signal is not None:
            return 128 + self.signal
        return self.exit_code if self.exit_code is not None else 1


def _execute(
    stage: str,
    command: Sequence[str],
    env: dict[str, str],
    timeout_s: float | None,
    stdout: IO[str],
    stderr: IO[str],
) -> _Outcome:
    """Run ``command`` in a session of its own, streaming its output and keeping the tails."""
    out = _Outcome()
    keep = children()  # this process's own children from before: not the command's
    try:
        proc = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        out.error = f"cannot start {command[0]!r}: {exc.strerror or exc}"
        stderr.write(f"stagegate: {out.error}\n")
        return out
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, stdout, out.tails[0]), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, stderr, out.tails[1]), daemon=True),
    ]
    for t in pumps:
        t.start()
    try:
        if not _exited(proc.pid, timeout_s):
            out.timed_out = True
            stderr.write(f"stagegate: {stage} timed out after {timeout_s:g} s; stopping it\n")
            _stop(proc)
    except KeyboardInterrupt:
        _stop(proc, grace_s=2.0)
    out.left = end_tree(proc.pid, keep | {proc.pid})  # nothing the command started outlives it
    rc = proc.wait()  # reaped only now, after every process it started was ended
    for t in pumps:
        t.join(timeout=5)
    if rc is not None and rc < 0:
        out.signal = -rc
    elif not out.timed_out:
        out.exit_code = rc
    return out


def _check(stage: str, out_dir: Path, files: Mapping[str, Any]) -> None:
    """Refuse a stage name that is no identifier and a file outside ``out_dir``."""
    problem = stage_name_problem(stage)
    if problem:
        raise UsageError(problem)
    for kind, value in files.items():
        for path in value.values() if isinstance(value, Mapping) else [value]:
            if not inside(Path(path), out_dir):
                raise UsageError(
                    f"--{kind} {path}: a stage's files go under its --out-dir {out_dir}, "
                    "where the report looks for them"
                )


def _sealed(files: Mapping[str, Any]) -> list[str]:
    """The files whose hash a record keeps: those the stage declares (``files``), and beside
    each JUnit file what stagegate's pytest plugin and the gate's witness write (the judge
    reads them with it)."""
    named = named_files(files)
    junit = [p for k, p, _ in named if k == "junit"]
    besides = [where(p) for p in junit for where in (counts_path, gate_witness_path)]
    return [path for _, path, _ in named] + besides


def _identity(path: str) -> tuple[int, ...] | None:
    """What changes whenever a file (or the file a link names) is written or replaced, and not
    when only its owner, mode or links change (``chown -R`` of a folder a container wrote);
    None where there is no file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _present(paths: list[str]) -> dict[str, tuple[int, ...]]:
    """The identity of each of ``paths`` that is there."""
    return {p: found for p in paths if (found := _identity(p)) is not None}


def _stale(before: dict[str, tuple[int, ...]]) -> list[str]:
    """The files that were there before the command and that it left exactly as they were."""
    return [path for path, was in before.items() if _identity(path) == was]


def _sealed_hash(path: Path) -> str | None:
    """The sha256 of a regular file, None for one that is not there; anything else (a folder,
    a pipe, a device) is never opened: an OSError that the record states."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        raise OSError(f"{path} is not a regular file: a stage's outputs are files")
    return sha256_file(path)


def _hashes(record: StageRecord) -> dict[str, str | None]:
    """The sha256 of every file the record seals, None for one that is not there."""
    return {path: _sealed_hash(Path(path)) for path in _sealed(record.files)}


def _record(
    stage: str, command: Sequence[str], out: _Outcome, env: dict[str, str], **kw: Any
) -> StageRecord:
    """The record of a finished command; a failure to read its files makes it a fallback
    record that says so (and holds the hashes it could take)."""
    record = StageRecord(
        stage=stage,
        command=list(command),
        exit_code=out.exit_code,
        signal=out.signal,
        timed_out=out.timed_out,
        stdout_tail=out.tails[0].text(),
        stderr_tail=out.tails[1].text(),
        error=out.error,
        **kw,
    )
    if out.left:
        left = f"{out.left} process(es) the command started could not be ended: they may change"
        return replace(record, runner_error=f"{left} its results, or another stage's, after it")
    try:
        return replace(record, sha256=_hashes(record))
    except Exception as exc:  # the record is written whatever went wrong after the command
        where = "".join(traceback.format_exception_only(exc)).strip()
        return replace(record, runner_error=f"stagegate run could not finish the record: {where}")


def _before(out_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    """What stagegate observes itself before the command: the machine, the commit and the
    tree's uncommitted changes. Whatever the tools it asks (git, nvidia-smi) started is ended
    before the command runs: they are found on a PATH the change may have written to."""
    keep = children()
    facts = {
        "environment": environment(env),
        "commit": _git_commit(env),
        "uncommitted": _git_uncommitted(out_dir),
        "changed_sha256": _git_changed_sha256(out_dir),
    }
    end_tree(None, keep)
    return facts


def _log_run(out_dir: Path, record: StageRecord) -> None:
    """One line in the raw directory's run log: a record removed later is then reported as
    removed, not as a stage that never ran."""
    entry = {"stage": record.stage, "start": record.start, "record": f"{record.stage}.json"}
    with (out_dir / RUN_LOG).open("a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def run_stage(
    stage: str,
    command: Sequence[str],
    *,
    out_dir: Path,
    files: Mapping[str, Any] | None = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> tuple[StageRecord, int]:
    """Run ``command``, write ``out_dir/STAGE.json`` whatever happens, return it and an exit code.

    The exit code is the command's own, 124 on timeout, 128+N when killed by signal N, 127
    when the command could not be started, and 3 when the record could not be written. A
    stage name that is no identifier, or a file outside ``out_dir``, is a UsageError before
    anything runs.
    """
    files = dict(files or {})
    _check(stage, out_dir, files)
    env = dict(os.environ if env is None else env)
    err = stderr or sys.stderr
    with subreaper():
        facts = _before(out_dir, env)  # the machine and the tree, before the command runs
        watched = watch(out_dir, stage)  # what other stages left: the command must not touch it
        earlier = _present(_sealed(files))  # an earlier run's, until written
        # The command's run, by one clock: what it writes is dated between start and its end
        start = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        began = time.monotonic()
        out = _execute(stage, command, env, timeout_s, stdout or sys.stdout, err)
    record = _record(
        stage,
        command,
        out,
        env,
        start=start,
        duration_s=round(time.monotonic() - began, 3),
        files=files,
        out_dir=str(out_dir),
        altered=altered(watched),
        stale=_stale(earlier),
        changed_sha256_end=_git_changed_sha256(out_dir),
        **facts,
    )
    if watched.problem and not record.runner_error:
        record = replace(record, runner_error=f"stagegate run could not watch: {watched.problem}")
    if record.runner_error:
        err.write(f"stagegate: {record.runner_error}\n")
    try:
        write_atomic(out_dir / f"{stage}.json", record.to_json())
        _log_run(out_dir, record)
    except OSError as exc:
        err.write(f"stagegate: the record of {stage} could not be written to {out_dir}: {exc}\n")
        return record, EXIT_NO_RECORD
    return record, EXIT_NO_RECORD if record.runner_error and out.code == 0 else out.code
