"""Collecting every descendant of a tool call (SPEC T6), for the tool's supervisor.

Killing a process group is not enough: ``setsid sleep 1000 &`` or a double fork leaves it,
and the orphan is re-parented to init, out of reach. A *child subreaper*
(``PR_SET_CHILD_SUBREAPER``) receives every orphan of its subtree instead, so all of them
stay its descendants; on the way out it finds them by walking ``/proc`` (each process's
parent) and kills them until none is left. Only the tool's supervisor becomes one, never
the worker. Linux only: elsewhere the process group is all that is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
COLLECT_SECONDS = 5.0  # never spend longer than this collecting (a fork bomb)


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()  # once: loaded per call it cost a supervisor a quarter of a millisecond


def _prctl(option: int, value: int) -> bool:
    try:
        return _LIBC is not None and _LIBC.prctl(option, value, 0, 0, 0) == 0
    except AttributeError:  # not Linux
        return False


def become_subreaper() -> bool:
    """Orphans of this process's subtree are re-parented to it, not to init."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> None:
    """The kernel kills this process when the thread that forked it ends. Called in the
    tool process, forked by the supervisor's only thread: it ends when the supervisor does."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _parents() -> dict[int, list[int]]:
    """Live (not zombie) processes by their parent, from /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:  # it ended meanwhile
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """Every live process whose chain of parents leads to ``pid``."""
    children = _parents()
    found: list[int] = []
    pending = list(children.get(pid, []))
    while pending:
        child = pending.pop()
        found.append(child)
        pending.extend(children.get(child, []))
    return found


def _reap() -> bool:
    """Reap every child that ended; whether any child is left, alive or not yet reaped.
    None left means no descendant at all: an orphan is re-parented to this subreaper
    before its parent ends, so it is a child by the time that parent is reaped."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        return False
    return True


def collect_descendants() -> int:
    """Kill every descendant of this process and reap them; returns how many were found.

    Stopped first (SIGSTOP), then killed: a process forking in between loses the race, and
    the child it made is re-parented here and found on the next pass.
    """
    me, killed = os.getpid(), set()
    if not _reap():  # no child: nothing to look for (most calls, and /proc is slow to walk)
        return 0
    deadline = time.monotonic() + COLLECT_SECONDS
    while (alive := descendants(me)) and time.monotonic() < deadline:
        killed.update(alive)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        _reap()
        time.sleep(0.005)
    while time.monotonic() < deadline:  # the last ones re-parented here: reap them
        try:
            if not os.waitpid(-1, os.WNOHANG)[0]:
                time.sleep(0.005)
        except ChildProcessError:
            break
    return len(killed)
