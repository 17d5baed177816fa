"""Ending every process a stage's command started, the detached ones included.

A command's process group is ended with it, but a process can leave the group (``setsid``,
a daemon's double fork) and go on writing the stage's files after its record was written. On
Linux ``stagegate run`` makes itself a child subreaper while the command runs: an orphaned
descendant is re-parented to it instead of to init, so every process the command started is
still a descendant, found through ``/proc`` and killed. Elsewhere only the group is ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_ROUNDS = 200  # a command that forks faster than it is killed still ends within this many


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """While inside, orphaned descendants of this process become its children (Linux); yields
    whether that holds. The previous setting is restored afterwards."""
    prctl = _prctl()
    before = ctypes.c_int(0)
    if prctl is None or prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0) != 0:
        yield False
        return
    on = before.value != 0 or prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield on
    finally:
        if not before.value:
            prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _table() -> dict[int, tuple[int, str, int]]:
    """Every process this user can see: pid -> (parent pid, state letter, process group)."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path("/proc", entry.name, "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat.rpartition(")")[2].split()  # the name may hold spaces and parentheses
        table[int(entry.name)] = (int(fields[1]), fields[0], int(fields[2]))
    return table


def children() -> set[int]:
    """This process's children now (none where /proc cannot be read)."""
    if not Path("/proc/self/stat").exists():
        return set()
    me = os.getpid()
    return {pid for pid, (parent, *_) in _table().items() if parent == me}


def _descendants(
    table: dict[int, tuple[int, str, int]], keep: set[int]
) -> tuple[set[int], set[int]]:
    """(live descendants, dead ones not yet reaped), leaving out ``keep``'s trees."""
    below: dict[int, list[int]] = {}
    for pid, (parent, *_) in table.items():
        below.setdefault(parent, []).append(pid)
    live, dead = set(), set()
    todo = [p for p in below.get(os.getpid(), []) if p not in keep]
    while todo:
        pid = todo.pop()
        (dead if table[pid][1] == "Z" else live).add(pid)
        todo += below.get(pid, [])
    return live, dead


def _kill(pids: set[int], table: dict[int, tuple[int, str, int]]) -> None:
    """SIGKILL each of ``pids`` and its process group: a group is signalled at once, so a
    process that forks and exits to change its pid cannot slip between two kills. A dead
    one's group counts too: a process that forks as /proc is read is missed by every scan,
    and what the scan sees of it is the zombie its last pid left, in the same group."""
    groups = {table[pid][2] for pid in pids if pid in table} - {os.getpgrp(), 0, 1}
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _reap(pids: set[int]) -> None:
    """Reap those of ``pids`` that are this process's zombie children."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


_QUIET_SCANS = 3


def end_tree(group: int | None, keep: set[int]) -> int:
    """Kill process group ``group`` (if any) and every descendant of this process outside
    ``keep``'s trees (its children from before), until none is left; how many were left."""
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    if not Path("/proc/self/stat").exists():
        return 0
    live: set[int] = set()
    quiet = 0  # scans in a row that found no process and no exit: a process that forks and
    for _ in range(_ROUNDS):  # exits as /proc is read leaves a zombie of ours each time
        table = _table()
        live, dead = _descendants(table, keep)
        _kill(live | dead, table)  # before the dead are reaped: until then no new process
        _reap(dead)  # can take their group's id
        quiet = 0 if live or dead else quiet + 1
        if quiet == _QUIET_SCANS:
            return 0
        time.sleep(0.01)  # let the kernel deliver the signals before looking again
    return max(len(live), 1)  # still busy after every round: something is left
