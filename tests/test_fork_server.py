"""The warm fork server (``runs/tools/fork_server.py``): each tool call's supervisor is
forked from it, not started as a fresh interpreter, and keeps every isolation property of
SPEC T6/T9: its own session, the scrubbed environment, killed whole at the deadline, gone
with its worker. The server itself goes with its worker, is restarted when it dies, and a
frozen one never hangs a call. Real processes and real signals throughout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness_console.child_env import scrubbed_env
from runs.tools import isolation
from runs.tools.isolation import ROOT, fork_server, run_isolated
from tests.test_nothing_hangs import BOUND, _quiet, a_marker, alive, bounded, gone


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, Path]:
    root, drafts = tmp_path / "root", tmp_path / "drafts"
    root.mkdir()
    drafts.mkdir()
    return root, drafts


def call(place: tuple[Path, Path], impl: str, timeout: float = 30, **args: Any) -> dict:
    root, drafts = place
    return bounded(
        lambda: run_isolated(
            impl=f"tests.runaway_tools:{impl}",
            root=str(root),
            drafts=str(drafts),
            args=args,
            timeout=timeout,
        )
    )


def ended(pid: int) -> bool:
    """No such process, or a zombie (it ended; its parent has not reaped it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(b")") + 2 :].split()[0] in (b"Z", b"X")


def all_end(pids: list[int]) -> bool:
    deadline = time.monotonic() + BOUND / 6
    while not all(ended(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return all(ended(pid) for pid in pids)


def children(pid: int) -> list[int]:
    """The live children of ``pid``, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and not ended(int(entry)):
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except FileNotFoundError:
                continue
            if int(stat[stat.rindex(b")") + 2 :].split()[1]) == pid:
                found.append(int(entry))
    return found


def started(pid_file: Path) -> list[int]:
    """The pids ``linger`` wrote (the tool process, its child), once it wrote them."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        if pid_file.exists() and len(pid_file.read_text().split()) == 2:
            return [int(pid) for pid in pid_file.read_text().split()]
        time.sleep(0.02)
    raise AssertionError("the tool never started")


def supervisor_of(tool_pid: int) -> int:
    stat = Path(f"/proc/{tool_pid}/stat").read_bytes()
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


# --- where a tool runs ---------------------------------------------------------------------


def test_the_supervisor_is_forked_by_the_server_in_a_session_of_its_own(place):
    reply = call(place, "identity")
    server = fork_server()
    assert server is not None
    assert reply["supervisor_parent"] == server.process.pid  # not a fresh interpreter of ours
    assert reply["supervisor_session"] == reply["supervisor"]  # setsid: it leads its session
    assert reply["supervisor_session"] not in (os.getsid(0), os.getsid(server.process.pid))
    assert reply["cwd"] == str(ROOT)  # the project, never the workspace
    assert reply["heavy_modules"] == []  # the server holds no Django, no Celery
    assert os.readlink(f"/proc/{server.process.pid}/cwd") == str(ROOT)
    assert os.getsid(server.process.pid) == server.process.pid  # its own session too
    again = call(place, "identity")
    assert again["supervisor_parent"] == server.process.pid  # one server, reused
    assert again["supervisor"] != reply["supervisor"]


def test_the_tool_sees_the_scrubbed_environment_of_the_call(place, monkeypatch):
    call(place, "identity")  # the server is up before the secrets are set
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://secret")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")  # a safe key set after the server started
    reply = call(place, "environment")
    assert reply["keys"] == sorted(scrubbed_env())
    assert "LC_ALL" in reply["keys"] and "ANTHROPIC_API_KEY" not in reply["keys"]
    server = fork_server()
    assert server is not None
    environ = Path(f"/proc/{server.process.pid}/environ").read_bytes()
    assert b"sk-secret" not in environ and b"postgres://" not in environ


@pytest.mark.parametrize("tool", ["linger", "double_fork", "leave_setsid"])
def test_a_tool_is_killed_whole_whatever_it_started(place, tool):
    """``linger`` runs past its deadline (a daemon, and a child that ignores SIGTERM); the
    other two return at once, leaving a daemon behind."""
    marker = a_marker()
    reply = call(place, tool, timeout=2, marker=marker)
    if tool == "linger":
        assert reply["timed_out"] is True, reply
    else:
        assert reply["ok"] is True, reply
    assert gone(marker)
    server = fork_server()
    assert server is not None and children(server.process.pid) == []  # reaped


def test_a_stuck_supervisor_is_killed_with_its_group_after_the_grace(place):
    """The supervisor itself frozen (SIGSTOP): the worker's SIGTERM at the deadline waits,
    its SIGKILL (by pidfd) ``KILL_GRACE_SECONDS`` later does not, and the server kills the
    supervisor's process group before it reaps it: the tool's child that ignores SIGTERM
    goes too."""
    marker = a_marker()
    replies: list[dict] = []
    thread = threading.Thread(
        target=lambda: replies.append(call(place, "ignore_term", timeout=3, marker=marker)),
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + BOUND
    while not alive(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    (sleeper,) = alive(marker)
    supervisor = supervisor_of(supervisor_of(sleeper))
    server = fork_server()
    assert server is not None and supervisor_of(supervisor) == server.process.pid
    os.kill(supervisor, signal.SIGSTOP)
    thread.join(BOUND)
    assert not thread.is_alive(), "the call hung"
    assert replies[0]["timed_out"] is True, replies
    assert gone(marker)
    assert all_end([supervisor])


# --- a worker that dies or freezes -------------------------------------------------------

DRIVER = """
import json, sys
sys.path.insert(0, {project!r})
from runs.tools.isolation import fork_server, run_isolated
print(fork_server().process.pid, flush=True)
reply = run_isolated(impl={impl!r}, root={root!r}, drafts={drafts!r}, args={args!r},
                     timeout={timeout!r})
print(json.dumps(reply), flush=True)
"""


def driver(tmp_path: Path, place: tuple[Path, Path], impl: str, timeout: float, **args: Any):
    """A worker-like process that makes one tool call; (the process, its server's pid)."""
    root, drafts = place
    script = tmp_path / "driver.py"
    script.write_text(
        DRIVER.format(
            project=str(ROOT),
            impl=f"tests.runaway_tools:{impl}",
            root=str(root),
            drafts=str(drafts),
            args=args,
            timeout=timeout,
        )
    )
    worker = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    return worker, int(worker.stdout.readline())


def test_a_worker_killed_with_9_leaves_no_supervisor_tool_or_server(tmp_path, place):
    marker = a_marker()
    worker, server = driver(tmp_path, place, "linger", 600, marker=marker)
    try:
        tool, its_child = started(place[1].parent / f"linger-{place[1].name}.pids")
        supervisor = supervisor_of(tool)
        assert supervisor_of(supervisor) == server
        worker.kill()
        worker.wait(timeout=BOUND)
        assert gone(marker)  # the daemon the tool left, and its child
        assert all_end([server, supervisor, tool, its_child])
    finally:
        worker.kill()
        for pid in alive(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_frozen_worker_s_supervisor_keeps_the_deadline(tmp_path, place):
    """The worker is frozen (SIGSTOP) before the deadline: the server's child stops the
    tool and everything it started by itself, and the server reaps it meanwhile."""
    marker = a_marker()
    worker, server = driver(tmp_path, place, "tick", 1, marker=marker)
    ticks = place[0] / "ticks.txt"
    try:
        deadline = time.monotonic() + BOUND
        while not ticks.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ticks.exists(), "the tool never started"
        os.kill(worker.pid, signal.SIGSTOP)
        assert _quiet(ticks, marker), "the tool ran on past its deadline"
        assert all_end(children(server))  # no supervisor left, though nobody signalled
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        out, _ = worker.communicate(timeout=BOUND)
        for pid in alive(marker):
            os.kill(pid, signal.SIGKILL)
    assert json.loads(out)["timed_out"] is True


# --- a server that dies or freezes ---------------------------------------------------------


def test_a_call_whose_server_is_killed_gets_an_error_and_the_next_starts_another(place):
    marker = a_marker()
    first = fork_server()
    assert first is not None
    replies: list[dict] = []
    thread = threading.Thread(
        target=lambda: replies.append(call(place, "linger", timeout=600, marker=marker)),
        daemon=True,
    )
    thread.start()
    started(place[1].parent / f"linger-{place[1].name}.pids")
    os.kill(first.process.pid, signal.SIGKILL)
    thread.join(BOUND)
    assert not thread.is_alive(), "the call hung"
    assert replies == [{"ok": False, "error": isolation.SERVER_LOST, "retryable": False}]
    assert gone(marker)  # its supervisor was stopped, and collected everything
    reply = call(place, "identity")
    second = fork_server()
    assert second is not None and second is not first
    assert reply["supervisor_parent"] == second.process.pid != first.process.pid


def test_a_frozen_server_never_hangs_a_call(place):
    first = fork_server()
    assert first is not None
    os.kill(first.process.pid, signal.SIGSTOP)
    try:
        reply = call(place, "identity")
    finally:  # a discarded server is killed, and may be collected already
        with contextlib.suppress(ProcessLookupError):
            os.kill(first.process.pid, signal.SIGCONT)
    assert reply["ok"] is False and "did not answer" in reply["error"], reply
    assert first.gone.is_set()
    reply = call(place, "identity")
    second = fork_server()
    assert second is not None and reply["supervisor_parent"] == second.process.pid
    assert all_end([first.process.pid])


# --- many threads, and forked workers ----------------------------------------------------


def test_twenty_threads_at_once_each_get_their_own_reply(place):
    replies: dict[int, dict] = {}
    barrier = threading.Barrier(20)

    def one(index: int) -> None:
        barrier.wait()
        replies[index] = call(place, "identity", echo=index, sleep=0.2)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    assert sorted(replies) == list(range(20))
    assert all(reply["ok"] and reply["echo"] == i for i, reply in replies.items()), replies
    assert len({reply["supervisor"] for reply in replies.values()}) == 20
    assert len({reply["supervisor_parent"] for reply in replies.values()}) == 1


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_worker_starts_its_own_server(place):
    """Celery's prefork pool forks its workers: a child never uses its parent's server
    (their answers would cross), and holds none of its descriptors."""
    parent = fork_server()
    assert parent is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked child; it reports through the pipe
        code = 1
        try:
            try:
                os.fstat(parent.channel.fileno())
                held = True
            except OSError:
                held = False
            reply = call(place, "identity")
            os.write(write, json.dumps({"held": held, "reply": reply}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = json.loads(pipe.read() or "{}")
    os.waitpid(pid, 0)
    assert report["held"] is False
    assert report["reply"]["ok"] is True
    assert report["reply"]["supervisor_parent"] != parent.process.pid
    assert call(place, "identity")["supervisor_parent"] == parent.process.pid  # still ours
