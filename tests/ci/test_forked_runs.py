"""Test runs forked from one process, as mutmut runs each mutant's tests, must not share a
lock: a run killed while holding it would hang every run forked after it."""

from __future__ import annotations

import io
import os
import signal
import time

from tqdm.auto import tqdm


def _fork(child) -> int:
    """Run ``child`` in a forked process that exits with its return value, never returning
    into pytest."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child()
        finally:
            os._exit(code)
    return pid


def _die_holding_the_lock() -> int:
    tqdm.get_lock().acquire()  # as a mutant killed mid-bar: the lock is never released
    os._exit(0)


def _draw_a_bar() -> int:
    for _ in tqdm(range(3), file=io.StringIO()):
        pass
    return 0


def _wait(pid: int, seconds: float) -> int | None:
    """The exit status of ``pid``, or None (and the process killed) after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_a_run_killed_inside_the_progress_bars_lock_does_not_hang_the_next_one() -> None:
    tqdm(range(1), file=io.StringIO()).close()  # the first bar: its lock now exists
    assert _wait(_fork(_die_holding_the_lock), 30) == 0
    assert _wait(_fork(_draw_a_bar), 30) == 0, "the next run hung at its first progress bar"
