"""Runs one tool in a child process under its deadline, and stops it (SPEC T6).

The child (``runs.tools.child``) is a supervisor in its own session with a scrubbed
environment; it runs the tool in a process of its own and, being a child subreaper,
collects every descendant the tool started (a daemon, ``setsid``, a double fork) before
it answers or exits. It is stopped by one path, whatever the reason — the deadline, a
cancel, a lost lease: SIGTERM to the supervisor, which kills and reaps everything under it;
if it has not exited ``KILL_GRACE_SECONDS`` later, its process group is killed outright.
The caller gets a tool error, never a hang. The deadline is also the supervisor's own: the
request carries the seconds left, and the supervisor stops the tool at them by itself
(exit ``TIMED_OUT_EXIT``), so a worker frozen (SIGSTOP) mid-call, which can neither signal
nor close anything, leaves no tool running past its deadline.

Every tool call in flight in this process is registered under the run it belongs to (the
run a :func:`tool_scope` names; the lease's heartbeat opens one per drive), so
:func:`tool_processes_stop` stops a run's tools from any thread. The supervisor never
relies on ``PR_SET_PDEATHSIG`` (it fires when the *thread* that forked it ends): it knows
the worker is gone when its stdin closes, which only the process's end or the call's
own end does.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from harness_console.child_env import scrubbed_env

ROOT = Path(__file__).resolve().parent.parent.parent
KILL_GRACE_SECONDS = 2.0  # from the stop to SIGKILL of whatever is left
MAX_STDERR_BYTES = 64 * 1024  # enough for the last line, which the error quotes
MAX_REPLY_BYTES = 256 * 1024 * 1024  # past this a reply is cut, so it is no JSON: an error
TIMED_OUT_EXIT = 4  # runs.tools.child.TIMED_OUT_EXIT: the supervisor kept the deadline

_RUN: ContextVar[Any] = ContextVar("tool_run", default=None)
_LOCK = threading.Lock()
_FLIGHTS: dict[Any, set[Flight]] = {}  # run id -> its tool calls in flight here
_SCOPES: dict[Any, int] = {}  # run id -> open scopes
_STOPPING: dict[Any, str] = {}  # run id -> why its tools are being stopped


@dataclass(eq=False)
class Flight:
    """One tool call in flight: ``stop()`` asks it to stop; ``reason`` says why, once asked."""

    stop: Callable[[], None] = lambda: None
    reason: str = ""
    asked: threading.Event = field(default_factory=threading.Event)


@contextlib.contextmanager
def tool_scope(run_id: Any) -> Iterator[None]:
    """The tool calls made in this context (this thread) belong to run ``run_id`` until the
    scope closes. A stop left over from an earlier drive of the run is forgotten."""
    token = _RUN.set(run_id)
    with _LOCK:
        _SCOPES[run_id] = _SCOPES.get(run_id, 0) + 1
        if _SCOPES[run_id] == 1:
            _STOPPING.pop(run_id, None)
    try:
        yield
    finally:
        _RUN.reset(token)
        with _LOCK:
            _SCOPES[run_id] -= 1
            if not _SCOPES[run_id]:
                del _SCOPES[run_id]
                _STOPPING.pop(run_id, None)


def tool_processes_stop(*, run_id: Any, reason: str) -> int:
    """Stop every tool call run ``run_id`` has in flight in this worker process; returns how
    many were asked to stop. Thread-safe, callable from any thread, idempotent.

    Each call's processes get SIGTERM at once (the supervisor kills and reaps every
    descendant) and SIGKILL after ``KILL_GRACE_SECONDS``; each call returns a tool error
    ``Stopped: <reason>``. Until the run's scope closes, a tool call it starts is stopped
    before it starts. Callers: the lease heartbeat on a cancel (``runs.leases.Heartbeat``),
    and on a lost lease.
    """
    with _LOCK:
        if run_id in _SCOPES:
            _STOPPING.setdefault(run_id, reason)
        flights = [f for f in _FLIGHTS.get(run_id, ()) if not f.asked.is_set()]
        for flight in flights:
            flight.reason = reason
            flight.asked.set()
            flight.stop()
    return len(flights)


def tool_calls_in_flight(*, run_id: Any) -> int:
    """How many tool calls of run ``run_id`` are running in this process now."""
    with _LOCK:
        return len(_FLIGHTS.get(run_id, ()))


class Stopped(Exception):
    """The run's tools are being stopped: this call does not start."""


@contextlib.contextmanager
def tool_in_flight(stop: Callable[[], None] | None = None) -> Iterator[Flight]:
    """Register a tool call of the current scope's run while it runs (MCP calls too).
    ``stop`` is called under the registry's lock, once; raises Stopped if the run's tools
    are being stopped already."""
    run_id = _RUN.get()
    flight = Flight() if stop is None else Flight(stop=stop)
    with _LOCK:
        if run_id is not None and run_id in _STOPPING:
            raise Stopped(_STOPPING[run_id])
        _FLIGHTS.setdefault(run_id, set()).add(flight)
    try:
        yield flight
    finally:
        with _LOCK:
            _FLIGHTS[run_id].discard(flight)
            if not _FLIGHTS[run_id]:
                del _FLIGHTS[run_id]


async def until_stopped[T](flight: Flight, work: Callable[[], Awaitable[T]]) -> T:
    """Await ``work()`` (an MCP call) until it ends or ``flight`` is asked to stop: then it
    is cancelled (the SDK's shielded cleanup still stops its server) and Stopped raised."""
    result: list[T] = []

    async def run(group: anyio.abc.TaskGroup) -> None:
        result.append(await work())
        group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(run, group)
        while not flight.asked.is_set():
            await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    if not result:
        raise Stopped(flight.reason)
    return result[0]


def stopped_reply(reason: str) -> dict[str, Any]:
    return {"ok": False, "error": f"Stopped: {reason}.", "retryable": False, "stopped": True}


def _timed_out(timeout: float) -> dict[str, Any]:
    return {
        "ok": False,
        "error": f"Timed out after {timeout:g} s; the tool was stopped.",
        "retryable": False,
        "timed_out": True,
    }


def _signal(pid: int, sig: int, *, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, sig)


def _exited(pid: int) -> bool:
    """Whether the child ended, without reaping it (its pid stays ours to signal)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def run_isolated(
    *,
    impl: str,
    root: str,
    drafts: str,
    args: dict[str, Any],
    timeout: float,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The tool's reply, or a tool error if it timed out, was stopped or died. ``context``
    is what the console (not the model) tells the tool: see ``runs.tools.child_context``."""
    request = {"impl": impl, "root": root, "drafts": drafts, "args": args, "context": context}
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "runs.tools.child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # cwd is the project, never the workspace: a workspace must not shadow our modules.
        cwd=ROOT,
        env=scrubbed_env(),
        start_new_session=True,
    )
    try:
        with tool_in_flight(lambda: _signal(process.pid, signal.SIGTERM)) as flight:
            out, err, why = _exchange(process, request, started + timeout, flight)
    except Stopped as stopped:
        return stopped_reply(str(stopped))
    finally:
        _signal(process.pid, signal.SIGKILL, group=True)  # a backstop: nothing is left
        with contextlib.suppress(OSError):
            process.stdin.close()  # type: ignore[union-attr]
        process.wait()
    return _reply(process, out, err, why, flight, timeout, started)


def _reply(
    process: subprocess.Popen[bytes],
    out: bytes,
    err: bytes,
    why: str,
    flight: Flight,
    timeout: float,
    started: float,
) -> dict[str, Any]:
    """A whole reply counts even if a stop came as it arrived; else the stop's error."""
    try:
        reply = json.loads(out) if out else None
    except json.JSONDecodeError:
        reply = None
    if not isinstance(reply, dict):
        if why == "timeout" or process.returncode == TIMED_OUT_EXIT:
            return _timed_out(timeout)
        if flight.reason:
            return stopped_reply(flight.reason)
        if out:
            return {"ok": False, "error": "The tool's reply was not JSON.", "retryable": False}
        detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return {"ok": False, "error": f"The tool process failed ({detail[0]}).", "retryable": False}
    reply.setdefault("elapsed_ms", round((time.monotonic() - started) * 1000))
    return reply


def _exchange(
    process: subprocess.Popen[bytes], request: dict[str, Any], deadline: float, flight: Flight
) -> tuple[bytes, bytes, str]:
    """Send the request, read the reply until the supervisor exits: (stdout, stderr, why),
    ``why`` being "", "timeout" or "stopped". The stdin stays open: its end is the
    supervisor's sign that the worker is gone. The request tells the supervisor the
    seconds left until ``deadline``: it keeps the deadline too, should this process freeze."""
    assert process.stdin is not None and process.stdout is not None and process.stderr
    out, err = bytearray(), bytearray()
    request = {**request, "deadline_seconds": max(0.0, deadline - time.monotonic())}
    try:
        process.stdin.write(json.dumps(request).encode() + b"\n")
        process.stdin.flush()
    except BrokenPipeError:
        pass  # it died at once: its stderr says why
    streams = {
        process.stdout.fileno(): (out, MAX_REPLY_BYTES),
        process.stderr.fileno(): (err, MAX_STDERR_BYTES),
    }
    selector = selectors.DefaultSelector()
    for fd in streams:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    why, kill_at = "", float("inf")
    while True:
        for key, _ in selector.select(timeout=0.05):
            _drain(key.fd, *streams[key.fd], selector)
        if _exited(process.pid):
            for key in list(selector.get_map().values()):
                _drain(key.fd, *streams[key.fd], selector)
            break
        now = time.monotonic()
        if not why and (flight.asked.is_set() or now >= deadline):
            why = "stopped" if flight.asked.is_set() else "timeout"
            _signal(process.pid, signal.SIGTERM)
            kill_at = now + KILL_GRACE_SECONDS
        if now >= kill_at:  # the supervisor itself is stuck: kill what can be killed
            _signal(process.pid, signal.SIGKILL, group=True)
            _signal(process.pid, signal.SIGKILL)
    selector.close()
    return bytes(out), bytes(err), why


def _drain(fd: int, into: bytearray, cap: int, selector: selectors.BaseSelector) -> None:
    """Read what is there now; past ``cap`` only the last ``cap`` bytes are kept."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            selector.unregister(fd)
            return
        into += chunk
        if len(into) > cap:
            del into[: len(into) - cap]
