"""stagegate run: real commands, real exits, timeouts and signals; the record is always written."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from stagegate.collect import load_record
from stagegate.errors import UsageError
from stagegate.record import proctree
from stagegate.record.proctree import children, end_tree, subreaper
from stagegate.record.runner import TAIL_CHARS, run_stage

PY = sys.executable


def _run(tmp_path: Path, *cmd: str, **kw: object) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    record, code = run_stage("execution", list(cmd), out_dir=tmp_path, stdout=out, stderr=err, **kw)
    return record, code, out.getvalue(), err.getvalue()


@pytest.mark.slow
def test_success_is_recorded_with_output_and_environment(tmp_path: Path) -> None:
    junit = str(tmp_path / "j.xml")
    record, code, out, _ = _run(tmp_path, PY, "-c", "print('héllo ✓')", files={"junit": junit})
    assert code == 0 and record.exit_code == 0 and record.succeeded
    assert "héllo ✓" in out and "héllo ✓" in record.stdout_tail  # streamed and kept
    saved = load_record(tmp_path / "execution.json")
    assert saved == record
    assert saved.files == {"junit": junit} and saved.environment["python"]
    assert saved.start.endswith("Z") and saved.duration_s >= 0
    assert saved.out_dir == str(tmp_path)
    never = {junit: None, f"{junit}.counts.json": None, f"{junit}.witness.json": None}
    assert saved.sha256 == never  # never written


@pytest.mark.slow
def test_failure_keeps_the_exit_code_and_stderr(tmp_path: Path) -> None:
    record, code, _, err = _run(
        tmp_path, PY, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"
    )
    assert code == 3 and record.exit_code == 3 and not record.succeeded
    assert "boom" in err and "boom" in record.stderr_tail


@pytest.mark.slow
def test_timeout_stops_the_command_and_is_recorded(tmp_path: Path) -> None:
    record, code, _, err = _run(tmp_path, PY, "-c", "import time; time.sleep(60)", timeout_s=0.5)
    assert code == 124 and record.timed_out and record.exit_code is None
    assert record.duration_s < 30 and "timed out" in err
    assert json.loads((tmp_path / "execution.json").read_text())["timed_out"] is True


@pytest.mark.slow
def test_a_killed_command_records_its_signal(tmp_path: Path) -> None:
    record, code, _, _ = _run(
        tmp_path, PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    )
    assert record.signal == 9 and record.exit_code is None and code == 128 + 9


@pytest.mark.slow
def test_a_command_that_cannot_start_is_recorded(tmp_path: Path) -> None:
    record, code, _, err = _run(tmp_path, "/no/such/tool", "--flag")
    assert code == 127 and record.error and "cannot start" in err
    assert load_record(tmp_path / "execution.json").error == record.error


@pytest.mark.slow
def test_output_tail_is_bounded(tmp_path: Path) -> None:
    record, code, out, _ = _run(
        tmp_path, PY, "-c", "print('x' * 100 + '\\n' * 0, end=''); [print(i) for i in range(50000)]"
    )
    assert code == 0 and "49999" in record.stdout_tail
    assert (
        len(record.stdout_tail) <= TAIL_CHARS + 100 and "earlier output cut" in record.stdout_tail
    )
    assert out.count("\n") == 50000  # the console still got everything


@pytest.mark.slow
def test_each_named_file_is_recorded_with_its_sha256(tmp_path: Path) -> None:
    junit, absent = tmp_path / "j.xml", tmp_path / "never.json"
    write = f"open({str(junit)!r}, 'w').write('<testsuites/>')"
    record, code, _, _ = _run(
        tmp_path, PY, "-c", write, files={"junit": str(junit), "metrics": str(absent)}
    )
    assert code == 0 and record.out_dir == str(tmp_path)
    assert record.sha256 == {
        str(junit): hashlib.sha256(b"<testsuites/>").hexdigest(),
        str(absent): None,
        f"{junit}.counts.json": None,  # where pytest's counts would be: sealed too
        f"{junit}.witness.json": None,  # and the gate's witness
    }


@pytest.mark.slow
def test_a_declared_file_the_command_left_untouched_is_recorded_as_an_earlier_runs(
    tmp_path: Path,
) -> None:
    kinds = ("junit", "coverage", "metrics", "warnings", "benchmark")
    files = {k: tmp_path / f"{k}.json" for k in kinds}
    for path in files.values():
        path.write_text("{}")
    # rewritten with the same bytes, replaced, removed; warnings left as it was; the benchmark
    # only given another mode and a second link, as a chown -R or chmod -R of the folder does
    again = f"open({str(files['junit'])!r}, 'w').write('{{}}')"
    mode = f"os.chmod({str(files['benchmark'])!r}, 0o600); "
    mode += f"os.link({str(files['benchmark'])!r}, {str(tmp_path / 'link')!r})"
    new = str(tmp_path / "new")
    moved = f"import os; open({new!r}, 'w').write('{{}}'); os.replace({new!r}, "
    moved += f"{str(files['coverage'])!r})"
    gone = f"import os; os.remove({str(files['metrics'])!r})"
    record, code, _, _ = _run(
        tmp_path,
        PY,
        "-c",
        f"{again}; {moved}; {gone}; {mode}",
        files={k: str(p) for k, p in files.items()},
    )
    assert code == 0 and record.stale == [str(files["warnings"]), str(files["benchmark"])]
    assert load_record(tmp_path / "execution.json").stale == record.stale


@pytest.mark.slow
def test_what_the_command_sees_of_the_clock_lies_inside_the_records_run(tmp_path: Path) -> None:
    """The record's start and duration are the command's: observing the machine first (here
    an nvidia-smi that takes 2 s to answer) moves neither, so a file the command dates at its
    end is inside the run the judge holds it to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nsleep 2\nexit 9\n")
    smi.chmod(0o755)
    seen = tmp_path / "seen.txt"
    stamp = "datetime.datetime.now(datetime.UTC).isoformat()"
    write = f"import datetime, time; a = {stamp}; time.sleep(0.3); b = {stamp}; "
    write += f"open({str(seen)!r}, 'w').write(a + ' ' + b)"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    record, code, _, _ = _run(tmp_path, PY, "-c", write, env=env)
    start = datetime.fromisoformat(record.start)
    end = start + timedelta(seconds=record.duration_s)
    assert code == 0
    assert all(start <= datetime.fromisoformat(t) <= end for t in seen.read_text().split())


# A grandchild that leaves the stage's process group and session (setsid, or a daemon's double
# fork), waits until the stage's command has ended, then rewrites the stage's files for as long
# as it lives. It writes its pid first, so the test can tell it was started and is gone.
DETACHED = """
import os, subprocess, sys, time
out, mode = sys.argv[1], sys.argv[2]
child = '''
import os, sys, time
out, parent = sys.argv[1], int(sys.argv[2])
open(os.path.join(out, "grandchild.pid"), "w").write(str(os.getpid()))
while True:
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        break  # the stage's command is over
    time.sleep(0.01)
while True:
    for name in ("junit.xml", "execution.json"):
        open(os.path.join(out, name), "w").write("rewritten after the stage")
    open(os.path.join(out, "rewrote"), "w").write("yes")
    time.sleep(0.01)
'''
argv = [sys.executable, "-c", child, out, str(os.getpid())]
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if mode == "setsid":
    subprocess.Popen(argv, start_new_session=True, **quiet)
elif os.fork() == 0:  # a daemon: fork, new session, fork again, the middle one exits
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, argv)
    os._exit(0)
while not os.path.exists(os.path.join(out, "grandchild.pid")):
    time.sleep(0.01)
open(os.path.join(out, "junit.xml"), "w").write("<testsuites/>")
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("mode", ["setsid", "daemon"])
def test_a_detached_grandchild_cannot_rewrite_the_stage_files_afterwards(
    tmp_path: Path, mode: str
) -> None:
    junit = tmp_path / "junit.xml"
    record, code, _, _ = _run(
        tmp_path, PY, "-c", DETACHED, str(tmp_path), mode, files={"junit": str(junit)}
    )
    assert code == 0
    pid = int((tmp_path / "grandchild.pid").read_text())
    deadline = time.monotonic() + 30  # a bound on waiting, not a measurement
    while _alive(pid) and not (tmp_path / "rewrote").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):  # the runner failed to end it: end it here, then fail
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the detached grandchild outlived its stage")
    assert not (tmp_path / "rewrote").exists()
    assert junit.read_text() == "<testsuites/>"
    assert load_record(tmp_path / "execution.json") == record
    assert record.sha256[str(junit)] == hashlib.sha256(b"<testsuites/>").hexdigest()


@pytest.mark.slow
def test_the_record_is_written_when_reading_the_outputs_fails(tmp_path: Path) -> None:
    # A declared output that is a directory cannot be hashed: the record says so, and is kept.
    (tmp_path / "coverage.json").mkdir()
    record, code, _, err = _run(
        tmp_path, PY, "-c", "pass", files={"coverage": str(tmp_path / "coverage.json")}
    )
    assert code == 3 and record.runner_error and "coverage.json" in record.runner_error
    saved = load_record(tmp_path / "execution.json")
    assert saved.runner_error == record.runner_error and saved.exit_code == 0
    assert "could not finish the record" in err


@pytest.mark.slow
def test_the_record_is_written_when_the_command_removed_its_folder(tmp_path: Path) -> None:
    out = tmp_path / "raw"
    out.mkdir()
    record, code = run_stage(
        "execution",
        [PY, "-c", f"import shutil; shutil.rmtree({str(out)!r})"],
        out_dir=out,
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    assert code == 0 and load_record(out / "execution.json") == record


@pytest.mark.parametrize("name", ["Execution", "../up", "a b", "x" * 40, "", "é", "ok\n# PASS"])
def test_a_stage_name_that_is_no_identifier_is_refused_before_anything_runs(
    tmp_path: Path, name: str
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(UsageError, match="short identifier"):
        run_stage(name, [PY, "-c", f"open({str(marker)!r}, 'w')"], out_dir=tmp_path)
    assert not marker.exists() and list(tmp_path.iterdir()) == []


def test_a_file_outside_the_out_dir_is_refused_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "raw"
    with pytest.raises(UsageError, match="--junit"):
        run_stage("execution", [PY, "-c", "pass"], out_dir=out, files={"junit": "j.xml"})
    with pytest.raises(UsageError, match="--lint"):
        run_stage(
            "static", [PY, "-c", "pass"], out_dir=out, files={"lint": {"ruff": str(tmp_path)}}
        )
    assert not out.exists()


GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "a",
    "GIT_AUTHOR_EMAIL": "a@b",
    "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@b",
}


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, **GIT_IDENTITY}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


@pytest.mark.slow
def test_the_record_lists_what_the_commit_does_not_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changed, staged, renamed and untracked paths when the command starts; not the stage's
    own output folder, nor what .gitignore ignores; none at all on a clean checkout."""
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("*.log\n")
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    monkeypatch.chdir(tmp_path)
    raw = tmp_path / "reports" / "raw"
    clean, _ = run_stage("static", [PY, "-c", "pass"], out_dir=raw, stdout=io.StringIO())
    assert clean.uncommitted == [] and clean.changed_sha256 == {} and clean.commit
    (tmp_path / "a.py").write_text("x = 2\n")
    _git(tmp_path, "mv", "b.py", "c.py")
    (tmp_path / "new.py").write_text("")
    (tmp_path / "run.log").write_text("")
    record, _ = run_stage("static", [PY, "-c", "pass"], out_dir=raw, stdout=io.StringIO())
    assert sorted(record.uncommitted or []) == ["a.py", "c.py", "new.py"]
    assert load_record(raw / "static.json").uncommitted == record.uncommitted
    # the tracked files changed, by what they hold (a rename: one deleted, one added)
    held = {
        n: hashlib.sha256(t).hexdigest() for n, t in (("a.py", b"x = 2\n"), ("c.py", b"x = 1\n"))
    }
    assert record.changed_sha256 == {**held, "b.py": ""}
    assert load_record(raw / "static.json").changed_sha256 == record.changed_sha256
    assert record.changed_sha256_end == record.changed_sha256  # the command changed none
    write = "open('a.py', 'w').write('x = 3\\n')"  # a formatter, say
    wrote, _ = run_stage("static", [PY, "-c", write], out_dir=raw, stdout=io.StringIO())
    assert wrote.changed_sha256 == record.changed_sha256
    assert wrote.changed_sha256_end == {
        **held,
        "b.py": "",
        "a.py": hashlib.sha256(b"x = 3\n").hexdigest(),
    }
    elsewhere = tmp_path.parent / f"{tmp_path.name}-raw"  # outside the checkout (or a link out)
    away, _ = run_stage("static", [PY, "-c", "pass"], out_dir=elsewhere, stdout=io.StringIO())
    ran = ["reports/raw/stagegate-runs.jsonl", "reports/raw/static.json"]  # now seen as changes
    assert sorted(away.uncommitted or []) == ["a.py", "c.py", "new.py", *ran]
    monkeypatch.setenv("GIT_DIR", "/nonexistent")  # as the CI host runs a stage: no checkout
    outside, _ = run_stage("static", [PY, "-c", "pass"], out_dir=raw, stdout=io.StringIO())
    assert outside.uncommitted is None  # git could not say: not known, not clean
    assert outside.changed_sha256 is None


@pytest.mark.slow
def test_a_command_that_rewrites_another_stages_results_is_recorded(tmp_path: Path) -> None:
    """A later stage's command that rewrites an earlier stage's record and file (as a conftest
    could) is named in its own record; rerunning a stage over its own results is not, nor is
    a file it creates, nor a line another stage appends to the run log."""
    raw = tmp_path / "raw"
    lint = raw / "ruff.json"
    write = f"open({str(lint)!r}, 'w').write('[1]')"
    run_stage("static", [PY, "-c", write], out_dir=raw, files={"lint": {"ruff": str(lint)}},
              stdout=io.StringIO())  # fmt: skip
    again, _ = run_stage("static", [PY, "-c", write.replace("[1]", "[2]")], out_dir=raw,
                         files={"lint": {"ruff": str(lint)}}, stdout=io.StringIO())  # fmt: skip
    assert again.altered == []  # its own results, run again
    forge = (
        f"import json; p = {str(raw / 'static.json')!r}; r = json.load(open(p)); "
        f"r['exit_code'] = 0; json.dump(r, open(p, 'w')); open({str(lint)!r}, 'w').write('[]');"
        f"open({str(raw / 'mine.txt')!r}, 'w').write('new')"
    )
    forged, _ = run_stage("docs", [PY, "-c", forge], out_dir=raw, stdout=io.StringIO())
    assert sorted(forged.altered) == sorted([str(raw / "static.json"), str(lint)])
    assert load_record(raw / "docs.json").altered == forged.altered
    log = f"open({str(raw / 'stagegate-runs.jsonl')!r}, 'a').write('{{}}\\n')"
    appended, _ = run_stage("other", [PY, "-c", log], out_dir=raw, stdout=io.StringIO())
    assert appended.altered == []
    cut = f"open({str(raw / 'stagegate-runs.jsonl')!r}, 'w').write('')"
    truncated, _ = run_stage("last", [PY, "-c", cut], out_dir=raw, stdout=io.StringIO())
    assert truncated.altered == [str(raw / "stagegate-runs.jsonl")]


@pytest.mark.slow
def test_a_pipe_among_another_stages_files_is_watched_without_opening_it(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    junit = raw / "junit.xml"
    make = f"import os; os.makedirs({str(raw)!r}, exist_ok=True); os.mkfifo({str(junit)!r})"
    first, _ = run_stage("execution", [PY, "-c", make], out_dir=raw, files={"junit": str(junit)},
                         stdout=io.StringIO())  # fmt: skip
    assert junit.is_fifo() and "not a regular file" in (first.runner_error or "")
    record, code = run_stage("docs", [PY, "-c", "pass"], out_dir=raw, stdout=io.StringIO())
    assert code == 0 and record.altered == []


@pytest.mark.slow
def test_changes_hidden_from_git_status_are_still_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stage's code can hide a change from ``git status`` (assume-unchanged, skip-worktree,
    .git/info/exclude) or give git a hook to run: the next record lists the change anyway,
    and git runs no hook of the checkout's."""
    _git(tmp_path, "init", "-q")
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("x = 2\n")
    (tmp_path / "b.py").write_text("x = 3\n")
    _git(tmp_path, "update-index", "--assume-unchanged", "a.py")
    _git(tmp_path, "update-index", "--skip-worktree", "b.py")
    (tmp_path / "sneaky.py").write_text("")
    (tmp_path / ".git" / "info" / "exclude").write_text("sneaky.py\n")
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {tmp_path / 'hook-ran'}\n")
    hook.chmod(0o755)
    _git(tmp_path, "config", "core.fsmonitor", str(hook))
    raw = tmp_path / "reports" / "raw"
    record, _ = run_stage("static", [PY, "-c", "pass"], out_dir=raw, stdout=io.StringIO())
    assert sorted(record.uncommitted or []) == ["a.py", "b.py", "fsmonitor.sh", "sneaky.py"]
    assert not (tmp_path / "hook-ran").exists()


@pytest.mark.slow
def test_the_commit_is_the_one_the_command_started_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that commits names nothing new: its record has the commit it ran on."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    monkeypatch.chdir(tmp_path)
    first = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    commit = (
        "import subprocess; subprocess.run(['git', 'commit', '-q', '--allow-empty', '-m', 'x'])"
    )
    record, _ = run_stage("static", [PY, "-c", commit], out_dir=tmp_path / "raw",
                          stdout=io.StringIO(), env={**os.environ, **GIT_IDENTITY})  # fmt: skip
    assert record.commit == first.strip()


@pytest.mark.slow
def test_what_cannot_be_watched_is_said(tmp_path: Path) -> None:
    """A JSON file nested past the parser's depth is no record and no crash; more records than
    are watched make the record say so, and the stage block."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    record, code = run_stage("docs", [PY, "-c", "pass"], out_dir=raw, stdout=io.StringIO())
    assert code == 0 and record.runner_error is None
    stub = {"kind": "stagegate-record", "sha256": {}}
    for n in range(201):
        (raw / f"r{n:03}.json").write_text(json.dumps({**stub, "stage": f"s{n}"}))
    record, code = run_stage("docs", [PY, "-c", "pass"], out_dir=raw, stdout=io.StringIO())
    assert code == 3 and "not all were watched" in (record.runner_error or "")


HOPPER = """
import os, sys, time
if os.fork():
    sys.exit(0)  # the command returns at once
os.setsid()
end = time.time() + float(sys.argv[2])
while time.time() < end:
    if os.fork():
        os._exit(0)  # the parent dies: the child goes on under a new pid
open(sys.argv[1], "w").write("survived")
"""


def _hop(tmp_path: Path, stages: int, life_s: float, stage_s: float) -> bool:
    """Whether a pid hopper that lives ``life_s`` outlived any of ``stages`` stages."""
    marker = tmp_path / "survived"
    hopper = tmp_path / "hopper.py"
    hopper.write_text(HOPPER)
    for _ in range(stages):
        run_stage("docs", ["sh", "-c", f"{PY} {hopper} {marker} {life_s} & sleep {stage_s}"],
                  out_dir=tmp_path / "raw", stdout=io.StringIO(), stderr=io.StringIO())  # fmt: skip
    time.sleep(life_s + 1)
    return marker.exists()


@pytest.mark.slow
def test_a_process_that_keeps_changing_its_pid_does_not_outlive_the_stage(tmp_path: Path) -> None:
    assert not _hop(tmp_path, stages=3, life_s=3, stage_s=1)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_a_process_that_keeps_changing_its_pid_does_not_outlive_a_busy_machine(
    tmp_path: Path,
) -> None:
    # On a busy machine the hopper is mostly seen as the zombie its last pid left: it forks
    # between the listing of /proc and the reading of its entry. These timings let it outlive
    # its stage in most runs on two loaded cores before a dead process's group was killed.
    busy = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(2)]
    try:
        assert not _hop(tmp_path, stages=5, life_s=1.5, stage_s=0.3)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_a_process_no_scan_sees_alive_is_ended_through_its_dead_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the scans see of a process that forks as /proc is read is the zombie of the pid it
    # left: that zombie's process group, which it is still in, is killed before it is reaped.
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(60)"
    with subreaper():
        keep = children()
        parent = subprocess.Popen([PY, "-c", code], start_new_session=True)
        while not os.waitid(os.P_PID, parent.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG):
            time.sleep(0.01)  # exited, not reaped: a zombie
        table = proctree._table
        hidden = {p for p, row in table().items() if row[2] == parent.pid} - {parent.pid}

        def scan() -> dict[int, tuple[int, str, int]]:  # every scan misses the live child
            return {p: row for p, row in table().items() if p not in hidden or row[1] == "Z"}

        monkeypatch.setattr(proctree, "_table", scan)
        try:
            assert end_tree(None, keep) == 0
            assert len(hidden) == 1 and not any(_alive(p) for p in hidden)
        finally:
            for pid in hidden:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            parent.wait()
