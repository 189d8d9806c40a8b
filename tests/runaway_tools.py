"""Tools that misbehave on purpose, run through the real isolation in the tool tests."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def spin(root: Path, drafts: Path, args: dict) -> dict:
    while True:  # an infinite loop
        pass


def ignore_term(root: Path, drafts: Path, args: dict) -> dict:
    """Starts a grandchild that ignores SIGTERM, then ignores it too, then hangs."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen(["sh", "-c", f"trap '' TERM; exec sleep {args['marker']}"])
    time.sleep(3600)
    return {"ok": True}


def leave_child(root: Path, drafts: Path, args: dict) -> dict:
    """Returns at once but leaves a background process behind."""
    subprocess.Popen(
        ["sleep", str(args["marker"])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    return {"ok": True, "summary": "left a child"}


def flaky(root: Path, drafts: Path, args: dict) -> dict:
    """Fails (retryably or not) until it has been called ``succeed_on`` times."""
    counter = drafts / "flaky-count"
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(count))
    if count < args["succeed_on"]:
        return {"ok": False, "error": f"attempt {count} failed", "retryable": args["retryable"]}
    return {"ok": True, "summary": f"succeeded on attempt {count}"}


def environment(root: Path, drafts: Path, args: dict) -> dict:
    return {"ok": True, "keys": sorted(os.environ)}


def slow_read(root: Path, drafts: Path, args: dict) -> dict:
    """Logs its start, reads slowly, logs its end: a kill -9 test counts both."""
    log = drafts.parent / f"slow-read-{drafts.name}.log"  # beside the drafts, not one
    with log.open("a") as handle:
        handle.write("start\n")
    time.sleep(float(args.get("seconds", 6)))
    with log.open("a") as handle:
        handle.write("done\n")
    return {"ok": True, "summary": "read slowly", "content": (root / args["path"]).read_text()}


def sneaky_write(root, drafts, args):
    """A tool declared read-only that describes a write anyway: the worker drops it."""
    from runs.tools.effects import effect_write

    effect_write("workspace", "sneaky.md", b"written by a read-only tool")
    return {
        "ok": True,
        "summary": "Read nothing.",
        "effects": [{"op": "write", "area": "workspace", "path": "sneaky.md", "data": "eA=="}],
    }


def gated_patch(root: Path, drafts: Path, args: dict) -> dict:
    """patchDraft that waits at a gate first: a freeze test holds the call there, so the
    patch is made only after another worker has taken the run over."""
    from runs.tools.builtin.files import patch_draft

    log = drafts.parent / f"gated-{drafts.name}.log"
    gate = drafts.parent / f"gate-{drafts.name}"
    with log.open("a") as handle:
        handle.write("start\n")
    deadline = time.monotonic() + 90
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    reply = patch_draft(root, drafts, args)
    with log.open("a") as handle:
        handle.write("done\n")
    return reply


def _detached_sleep(marker: str) -> None:
    """A ``sleep <marker>`` in a session of its own: a process group kill misses it."""
    subprocess.Popen(
        ["setsid", "sleep", str(marker)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )


def leave_setsid(root: Path, drafts: Path, args: dict) -> dict:
    """Returns at once, leaving a daemon in a new session behind."""
    _detached_sleep(args["marker"])
    return {"ok": True, "summary": "left a daemon"}


def double_fork(root: Path, drafts: Path, args: dict) -> dict:
    """The classic daemon: fork, setsid, fork again, the middle one exits; the grandchild
    is an orphan nobody waits for."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", str(args["marker"])])  # noqa: S606 - a test daemon
        os._exit(0)
    os.waitpid(pid, 0)
    return {"ok": True, "summary": "double-forked"}


def linger(root: Path, drafts: Path, args: dict) -> dict:
    """Leaves a daemon, then waits on a child that ignores SIGTERM, for as long as it runs;
    writes the pids of both beside the drafts (the tests check that none is left)."""
    _detached_sleep(args["marker"])
    child = subprocess.Popen(["sh", "-c", f"trap '' TERM; exec sleep {args['marker']}"])
    pids = drafts.parent / f"linger-{drafts.name}.pids"
    pids.write_text(f"{os.getpid()}\n{child.pid}\n")
    child.wait()
    return {"ok": True, "summary": "lingered"}


def tick(root: Path, drafts: Path, args: dict) -> dict:
    """Leaves a daemon, then writes into the workspace (as the shell or publish would)
    every tenth of a second, for ever: each line is one more effect past a stop."""
    _detached_sleep(args["marker"])
    while True:
        with (root / "ticks.txt").open("a") as handle:
            handle.write("tick\n")
        time.sleep(0.1)


def identity(root: Path, drafts: Path, args: dict) -> dict:
    """Where the tool runs: its supervisor (its parent), the supervisor's parent and
    session, its working directory, and whether Django or Celery came with the fork."""
    import sys

    time.sleep(float(args.get("sleep", 0)))  # calls from many threads overlap
    supervisor = os.getppid()
    stat = Path(f"/proc/{supervisor}/stat").read_bytes()
    parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
    heavy = sorted(name for name in sys.modules if name.partition(".")[0] in ("django", "celery"))
    return {
        "ok": True,
        "supervisor": supervisor,
        "supervisor_parent": parent,
        "supervisor_session": os.getsid(supervisor),
        "cwd": os.getcwd(),
        "heavy_modules": heavy,
        "echo": args.get("echo"),
    }
