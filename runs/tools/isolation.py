"""Runs one tool in a child process under its deadline, and stops it (SPEC T6).

The child (``runs.tools.child``) is a supervisor in its own session with a scrubbed
environment; it runs the tool in a process of its own and, being a child subreaper,
collects every descendant the tool started (a daemon, ``setsid``, a double fork) before
it answers or exits. It is stopped by one path, whatever the reason — the deadline, a
cancel, a lost lease: SIGTERM to the supervisor, which kills and reaps everything under it;
if it has not exited ``KILL_GRACE_SECONDS`` later, it is killed outright, and its process
group with it. The caller gets a tool error, never a hang. The deadline is also the
supervisor's own: the request carries the seconds left, and the supervisor stops the tool
at them by itself (exit ``TIMED_OUT_EXIT``), so a worker frozen (SIGSTOP) mid-call, which
can neither signal nor close anything, leaves no tool running past its deadline.

The supervisor is forked by this process's fork server (``fork_server.py``: imports done
once, ~2 ms a call where a fresh interpreter took ~70), started on the first call from
whichever thread makes it, restarted when it died, and never shared with a process forked
from this one. The server is a child of this process, the supervisors are its children: it
reaps them and says how each ended, and this process signals each through a pidfd, never
a pid that may have been reused. A server that does not answer within ``REPLY_SECONDS``
(frozen) is replaced, and the call is a tool error; a call whose server dies is stopped,
and is one too. Should the server not start, each call starts a fresh interpreter, as
:func:`run_spawned` always does.

Every tool call in flight in this process is registered under the scope it was made in
(a :func:`tool_scope`; the lease's heartbeat opens one per drive of a run, named by the
run and its lease token), so :func:`tool_processes_stop` stops one drive's tools from any
thread, and never those of a later drive of the same run. Neither the supervisor
nor the server relies on ``PR_SET_PDEATHSIG`` (it fires when the *thread* that forked it
ends, and the calls come from a pool of threads): the supervisor knows the worker is gone
when its stdin closes, the server when its channel does; only this process holds their
other ends, so only its end or the call's own end closes them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from ..connections import connection_return
from .supervisors import SERVER_LOST, ServerFailed, _Spawned, _Supervisor, fork_server

logger = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent.parent
KILL_GRACE_SECONDS = 2.0  # from the stop to SIGKILL of whatever is left
MAX_STDERR_BYTES = 64 * 1024  # enough for the last line, which the error quotes
MAX_REPLY_BYTES = 256 * 1024 * 1024  # past this a reply is cut, so it is no JSON: an error
TIMED_OUT_EXIT = 4  # runs.tools.child.TIMED_OUT_EXIT: the supervisor kept the deadline

_SCOPE: ContextVar[Any] = ContextVar("tool_scope", default=None)
_LOCK = threading.Lock()
_FLIGHTS: dict[Any, set[Flight]] = {}  # scope -> its tool calls in flight here
_SCOPES: dict[Any, int] = {}  # scope -> how many times it is open
_STOPPING: dict[Any, str] = {}  # scope -> why its tools are being stopped


@dataclass(eq=False)
class Flight:
    """One tool call in flight: ``stop()`` asks it to stop; ``reason`` says why, once asked."""

    stop: Callable[[], None] = lambda: None
    reason: str = ""
    asked: threading.Event = field(default_factory=threading.Event)


@contextlib.contextmanager
def tool_scope(scope: Any) -> Iterator[None]:
    """The tool calls made in this context (this thread) belong to ``scope`` until it
    closes. The heartbeat names one drive of a run by ``(run id, lease token)``: a stop
    meant for a drive that ended (a keeper's late beat) cannot reach the run's next drive.
    A stop is kept only while its scope is open: it goes when the scope closes."""
    token = _SCOPE.set(scope)
    with _LOCK:
        _SCOPES[scope] = _SCOPES.get(scope, 0) + 1
    try:
        yield
    finally:
        _SCOPE.reset(token)
        with _LOCK:
            _SCOPES[scope] -= 1
            if not _SCOPES[scope]:
                del _SCOPES[scope]
                _STOPPING.pop(scope, None)


def tool_processes_stop(*, scope: Any, reason: str) -> int:
    """Stop every tool call ``scope`` has in flight in this worker process; returns how
    many were asked to stop. Thread-safe, callable from any thread, idempotent.

    Each call's processes get SIGTERM at once (the supervisor kills and reaps every
    descendant) and SIGKILL after ``KILL_GRACE_SECONDS``; each call returns a tool error
    ``Stopped: <reason>``. Until the scope closes, a tool call it starts is stopped
    before it starts. Callers: the lease heartbeat on a cancel (``runs.leases.Heartbeat``),
    and on a lost lease.
    """
    with _LOCK:
        if scope in _SCOPES:
            _STOPPING.setdefault(scope, reason)
        flights = [f for f in _FLIGHTS.get(scope, ()) if not f.asked.is_set()]
        for flight in flights:
            flight.reason = reason
            flight.asked.set()
            flight.stop()
    return len(flights)


def tool_calls_in_flight(*, scope: Any) -> int:
    """How many tool calls of ``scope`` are running in this process now."""
    with _LOCK:
        return len(_FLIGHTS.get(scope, ()))


class Stopped(Exception):
    """The run's tools are being stopped: this call does not start."""


@contextlib.contextmanager
def tool_in_flight(stop: Callable[[], None] | None = None) -> Iterator[Flight]:
    """Register a tool call of the current scope while it runs (MCP calls too). ``stop``
    is called under the registry's lock, once; raises Stopped if the scope's tools are
    being stopped already."""
    scope = _SCOPE.get()
    flight = Flight() if stop is None else Flight(stop=stop)
    connection_return()  # the tool's seconds are not the pool's
    with _LOCK:
        if scope is not None and scope in _STOPPING:
            raise Stopped(_STOPPING[scope])
        _FLIGHTS.setdefault(scope, set()).add(flight)
    try:
        yield flight
    finally:
        with _LOCK:
            _FLIGHTS[scope].discard(flight)
            if not _FLIGHTS[scope]:
                del _FLIGHTS[scope]


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
    is what the console (not the model) tells the tool: see ``runs.tools.child_context``.
    The supervisor is forked by this process's fork server (``fork_server.py``); if that
    cannot start, it is a fresh interpreter."""
    return _run(impl, root, drafts, args, timeout, context, spawn=False)


def run_spawned(
    *,
    impl: str,
    root: str,
    drafts: str,
    args: dict[str, Any],
    timeout: float,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`run_isolated` with a fresh interpreter for the supervisor, as before the fork
    server: what ``bench/tool_calls.py`` compares it with."""
    return _run(impl, root, drafts, args, timeout, context, spawn=True)


def _run(
    impl: str,
    root: str,
    drafts: str,
    args: dict[str, Any],
    timeout: float,
    context: dict[str, Any] | None,
    *,
    spawn: bool,
) -> dict[str, Any]:
    request = {"impl": impl, "root": root, "drafts": drafts, "args": args, "context": context}
    started = time.monotonic()
    holder: list[_Supervisor] = []  # a stop may come before the supervisor exists

    def stop() -> None:
        if holder:
            holder[0].signal(signal.SIGTERM)

    returncode: int | None = None
    # The seconds left until the deadline: the supervisor keeps it too, should this
    # process freeze.
    line = json.dumps({**request, "deadline_seconds": timeout}).encode() + b"\n"
    try:
        with tool_in_flight(stop) as flight:
            server = None if spawn else fork_server()
            try:
                supervisor = _Spawned() if server is None else server.start(line)
            except ServerFailed as failed:
                return {"ok": False, "error": str(failed), "retryable": False}
            holder.append(supervisor)
            if flight.asked.is_set():
                supervisor.signal(signal.SIGTERM)
            try:
                out, err, why = _exchange(supervisor, line, started + timeout, flight)
            finally:
                supervisor.signal(signal.SIGKILL)  # a backstop: nothing is left
                supervisor.close_stdin()  # also its sign to stop, should it live on
    except Stopped as stopped:
        return stopped_reply(str(stopped))
    finally:
        if holder:  # out of the registry now: no stop signals it any more
            returncode = holder[0].finish()
    return _reply(returncode, out, err, why, flight, timeout, started)


def _reply(
    returncode: int | None,
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
        if why == "timeout" or returncode == TIMED_OUT_EXIT:
            return _timed_out(timeout)
        if flight.reason:
            return stopped_reply(flight.reason)
        if why == "lost":
            return {"ok": False, "error": SERVER_LOST, "retryable": False}
        if out:
            return {"ok": False, "error": "The tool's reply was not JSON.", "retryable": False}
        detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return {"ok": False, "error": f"The tool process failed ({detail[0]}).", "retryable": False}
    reply.setdefault("elapsed_ms", round((time.monotonic() - started) * 1000))
    return reply


def _exchange(
    supervisor: _Supervisor, request: bytes, deadline: float, flight: Flight
) -> tuple[bytes, bytes, str]:
    """Send the rest of the request, read the reply until the supervisor exits: (stdout,
    stderr, why), ``why`` being "", "timeout", "stopped" or "lost" (the fork server ended
    meanwhile). The stdin stays open: its end is the supervisor's sign that the worker is
    gone."""
    out, err = bytearray(), bytearray()
    data = memoryview(request)[supervisor.sent :]
    try:
        while data:  # blocking: a request larger than the pipe is read as it is written
            data = data[os.write(supervisor.stdin, data) :]
    except BrokenPipeError:
        pass  # it died at once: its stderr says why
    streams = {
        supervisor.stdout: (out, MAX_REPLY_BYTES),
        supervisor.stderr: (err, MAX_STDERR_BYTES),
    }
    selector = selectors.DefaultSelector()
    for fd in streams:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    selector.register(supervisor.pidfd, selectors.EVENT_READ)  # readable once it ended
    why, kill_at, ended = "", float("inf"), False
    while not ended:
        for key, _ in selector.select(timeout=0.05):
            if key.fd == supervisor.pidfd:
                ended = True
            else:
                _drain(key.fd, *streams[key.fd], selector)
        now = time.monotonic()
        if not why and (flight.asked.is_set() or now >= deadline or supervisor.lost()):
            why = "stopped" if flight.asked.is_set() else "timeout" if now >= deadline else "lost"
            supervisor.signal(signal.SIGTERM)
            kill_at = now + KILL_GRACE_SECONDS
        if now >= kill_at:  # the supervisor itself is stuck: kill it (its group goes too)
            supervisor.signal(signal.SIGKILL)
    for key in list(selector.get_map().values()):  # whatever it wrote before it ended
        if key.fd != supervisor.pidfd:
            _drain(key.fd, *streams[key.fd], selector)
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
