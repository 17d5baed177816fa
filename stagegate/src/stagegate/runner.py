"""``stagegate run``: execute a stage's command, stream its output, and always write its record."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from stagegate.io import write_atomic
from stagegate.model import StageRecord

TAIL_CHARS = 8000  # per stream, kept in the record; the full output went to the console
EXIT_TIMEOUT = 124
EXIT_NOT_STARTED = 127
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
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return env.get("GITHUB_SHA")


def environment(env: Mapping[str, str]) -> dict[str, Any]:
    """Where the stage ran: interpreter, platform, CPU count and CI variables that are set."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        **{k.lower(): env[k] for k in _ENV_KEYS if k in env},
    }


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """Terminate the command's whole process group, then kill it if it does not stop."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


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
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out.timed_out = True
        stderr.write(f"stagegate: {stage} timed out after {timeout_s:g} s; stopping it\n")
        _stop(proc)
    except KeyboardInterrupt:
        _stop(proc, grace_s=2.0)
    for t in pumps:
        t.join(timeout=5)
    rc = proc.returncode
    if rc is not None and rc < 0:
        out.signal = -rc
    elif not out.timed_out:
        out.exit_code = rc
    return out


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

    The exit code is the command's own, 124 on timeout, 128+N when killed by signal N, and 127
    when the command could not be started.
    """
    env = dict(os.environ if env is None else env)
    start = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    began = time.monotonic()
    out = _execute(stage, command, env, timeout_s, stdout or sys.stdout, stderr or sys.stderr)
    record = StageRecord(
        stage=stage,
        command=list(command),
        exit_code=out.exit_code,
        signal=out.signal,
        timed_out=out.timed_out,
        start=start,
        duration_s=round(time.monotonic() - began, 3),
        stdout_tail=out.tails[0].text(),
        stderr_tail=out.tails[1].text(),
        commit=_git_commit(env),
        environment=environment(env),
        files=dict(files or {}),
        error=out.error,
    )
    write_atomic(out_dir / f"{stage}.json", record.to_json())
    return record, out.code
