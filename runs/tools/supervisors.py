"""The supervisors of tool calls as this process holds them (``isolation.py`` runs them):
one forked by this process's warm fork server (``fork_server.py``), or, when that cannot
start, a fresh interpreter. Each is held by its pipes and a pidfd, never by a pid."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from harness_console.child_env import scrubbed_env

logger = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent.parent
START_SECONDS = 30.0  # for the fork server's imports, on a machine under load
REPLY_SECONDS = 5.0  # for the fork server to fork a call or report its end: past it, frozen
RETRY_START_SECONDS = 30.0  # after the fork server failed to start, spawn meanwhile


class _Supervisor:
    """One call's supervisor, however it was started: the worker's ends of its three pipes
    and a pidfd, through which it is signalled (never by a pid, which may be reused once
    it is reaped) and whose readability says it ended. A stop may signal it from another
    thread at any time: signalling and closing hold a lock, and a closed descriptor is -1,
    so no number the process has reused since is ever signalled or closed."""

    def __init__(self, stdin: int, stdout: int, stderr: int, pidfd: int) -> None:
        self.stdin, self.stdout, self.stderr, self.pidfd = stdin, stdout, stderr, pidfd
        self.lock = threading.Lock()
        self.closed = False
        self.sent = 0  # how much of the request is in its stdin already

    def signal(self, sig: int) -> None:
        with self.lock, contextlib.suppress(ProcessLookupError, OSError):
            if self.pidfd >= 0:
                signal.pidfd_send_signal(self.pidfd, sig)

    def lost(self) -> bool:
        """Whether whoever reaps it is gone, so its exit status will never be known."""
        return False

    def finish(self) -> int | None:
        """Once it has ended (or been killed): the backstop, its exit status, every
        descriptor closed. None: the status could not be had."""
        raise NotImplementedError

    def close_stdin(self) -> None:
        """The supervisor's sign that the call is over, or the worker gone."""
        with self.lock:
            _HELD.discard(self.stdin)
            self.stdin = _closed(self.stdin)

    def close(self) -> None:
        self.close_stdin()
        with self.lock:
            self.stdout, self.stderr = _closed(self.stdout), _closed(self.stderr)
            self.pidfd, self.closed = _closed(self.pidfd), True


def _closed(fd: int) -> int:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
    return -1


class _Spawned(_Supervisor):
    """A fresh interpreter per call (``python -m runs.tools.child``): the way before the
    fork server, kept for when it cannot start and for the bench to compare."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "runs.tools.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # cwd is the project, never the workspace: a workspace must not shadow our modules.
            cwd=ROOT,
            env=scrubbed_env(),
            start_new_session=True,
        )
        fds = []
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            assert stream is not None
            fds.append(os.dup(stream.fileno()))  # ours to close once, as the forked ones
            stream.close()
        stdin, stdout, stderr = fds
        super().__init__(stdin, stdout, stderr, os.pidfd_open(self.process.pid))
        _HELD.add(stdin)

    def finish(self) -> int | None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # unreaped yet: the group is ours
        self.process.wait()
        self.close()
        return self.process.returncode


class ServerFailed(Exception):
    """The fork server did not take the call: its message is the tool error."""


SERVER_LOST = "The tool server ended during the call; the tool was stopped."


class _Forked(_Supervisor):
    """A supervisor the fork server forked: its status comes from the server, which
    reaps it."""

    def __init__(
        self, server: _ForkServer, call: int, stdin: int, stdout: int, stderr: int
    ) -> None:
        super().__init__(stdin, stdout, stderr, -1)
        self.server, self.call = server, call
        self.forked, self.exited = threading.Event(), threading.Event()
        self.pid: int | None = None
        self.status: int | None = None
        self.error = ""

    def lost(self) -> bool:
        return self.server.gone.is_set() and not self.exited.is_set()

    def finish(self) -> int | None:
        """The server reaps it, killing its group first, and says how it ended."""
        give_up = time.monotonic() + REPLY_SECONDS
        while not self.exited.wait(0.05) and not self.server.gone.is_set():
            if time.monotonic() >= give_up:
                self.server.discard("it did not say how a tool's supervisor ended")
        self.server.forget(self.call)
        self.close()
        return self.status


class _ForkServer:
    """This process's end of its fork server (``fork_server.py``): one channel that any
    thread sends calls on, and a thread that hands each answer to its call."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "runs.tools.fork_server", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd=ROOT,  # the project, never a workspace
                env=scrubbed_env(),
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.owner = os.getpid()
        self.channel = ours
        self.gone = threading.Event()
        self._lock = threading.Lock()
        self._calls: dict[int, _Forked] = {}
        self._ids = itertools.count()
        ready, _, _ = select.select([ours], [], [], START_SECONDS)
        if not ready or ours.recv(64) != b"ready":
            self.process.kill()
            self.process.wait()
            ours.close()
            raise ServerFailed("The tool server did not start.")
        self._reader = threading.Thread(target=self._read, name="tool-fork-server", daemon=True)
        self._reader.start()

    def start(self, request: bytes) -> _Forked:
        """Have a supervisor forked for a call: its pipes are made here and sent over,
        with as much of the ``request`` in its stdin as the pipe holds (all of it, most
        often), so the supervisor need not wait for the answer to reach this process."""
        child_in, stdin = os.pipe()
        stdout, child_out = os.pipe()
        stderr, child_err = os.pipe()
        call = _Forked(self, next(self._ids), stdin, stdout, stderr)
        _HELD.add(stdin)
        os.set_blocking(stdin, False)
        with contextlib.suppress(BlockingIOError):
            call.sent = os.write(stdin, request)
        os.set_blocking(stdin, True)
        with self._lock:
            self._calls[call.call] = call
        message = json.dumps({"id": call.call, "env": scrubbed_env()}).encode()
        try:
            try:  # never blocks: a server that does not read is not waited for here
                socket.send_fds(
                    self.channel, [message], [child_in, child_out, child_err], socket.MSG_DONTWAIT
                )
            finally:
                for fd in (child_in, child_out, child_err):  # the message holds copies
                    os.close(fd)
            if not call.forked.wait(REPLY_SECONDS):
                self.discard("it did not answer")
                raise ServerFailed(
                    f"The tool server did not answer within {REPLY_SECONDS:g} s;"
                    " it is restarted for the next call."
                )
            if call.error:
                raise ServerFailed(f"The tool process could not start ({call.error}).")
        except (OSError, ServerFailed) as error:
            self.forget(call.call)
            call.close()
            if isinstance(error, ServerFailed):
                raise
            self.discard(f"its channel failed: {error}")
            raise ServerFailed("The tool server could not be reached.") from error
        return call

    def forget(self, call: int) -> None:
        with self._lock:
            self._calls.pop(call, None)

    def discard(self, why: str) -> None:
        """Let this server go (the next call starts another): killed, its channel shut so
        the reader sees the end; the calls in flight see ``gone``."""
        if self.gone.is_set():
            return
        logger.warning("The tool fork server (pid %s) is discarded: %s.", self.process.pid, why)
        self.gone.set()
        self.process.kill()  # our unreaped child: the pid is the server's
        with contextlib.suppress(OSError):
            self.channel.shutdown(socket.SHUT_RDWR)

    def _read(self) -> None:
        try:
            while True:
                try:
                    data, fds, _, _ = socket.recv_fds(self.channel, 4096, 1)
                except OSError:
                    break
                if not data:
                    break
                self._deliver(json.loads(data), fds)
        finally:
            self.gone.set()
            with self._lock:
                calls = list(self._calls.values())
            for call in calls:  # none waits for an answer that will never come
                call.error = call.error or "the tool server ended"
                call.forked.set()
            self.channel.close()
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()

    def _deliver(self, message: dict[str, Any], fds: list[int]) -> None:
        with self._lock:
            call = self._calls.get(message.get("id", -1))
        if call is None or "pid" not in message or not fds:
            for fd in fds:
                os.close(fd)
        if call is None:
            return
        if "pid" in message:
            with call.lock:  # the call may have given up on it meanwhile, and closed
                if call.closed:
                    _closed(fds[0]) if fds else None
                else:
                    call.pid, call.pidfd = message["pid"], fds[0] if fds else -1
            call.error = "" if fds else "no pidfd came with it"
            call.forked.set()
        elif "error" in message:
            call.error = str(message["error"])
            call.forked.set()
        elif "status" in message:
            call.status = message["status"]
            call.exited.set()


_HELD: set[int] = set()  # the stdin of every supervisor in flight: the worker's end
_SERVER_LOCK = threading.Lock()
_SERVER: _ForkServer | None = None
_FAILED_AT = -float("inf")  # when the fork server last failed to start


def fork_server() -> _ForkServer | None:
    """This process's fork server, started on first use and again if it ended; None (a
    fresh interpreter per call) while it cannot start. A process forked from this one
    (Celery's prefork pool) starts its own: the parent's is never shared."""
    global _SERVER, _FAILED_AT
    with _SERVER_LOCK:
        server = _SERVER
        if server is not None and server.owner == os.getpid() and not server.gone.is_set():
            return server
        if time.monotonic() < _FAILED_AT + RETRY_START_SECONDS:
            return None
        try:
            _SERVER = _ForkServer()
        except (OSError, ServerFailed) as error:
            logger.warning("The tool fork server could not start (%s); spawning instead.", error)
            _SERVER, _FAILED_AT = None, time.monotonic()
        return _SERVER


def _after_fork_in_child() -> None:
    """In a process just forked from this one: the parent's server, its channel and the
    stdin of its supervisors are the parent's alone. Closed here, so that they still
    end with the parent (the channel's end, the stdin's end), whatever this child does."""
    global _SERVER, _SERVER_LOCK
    if _SERVER is not None:
        with contextlib.suppress(OSError):
            os.close(_SERVER.channel.detach())
    _SERVER, _SERVER_LOCK = None, threading.Lock()
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
