"""The warm fork server of one worker process: it forks each tool call's supervisor
(``runs.tools.child``) from an interpreter that has imported it once, instead of starting
a fresh ``python -m`` per call (~70 ms of start-up and imports; a fork is ~2 ms).

Started by ``runs.tools.isolation`` as ``python -m runs.tools.fork_server FD`` in its own
session, with the scrubbed environment (``harness_console/child_env.py``) and the project
as its working directory; FD is its end of a ``SOCK_SEQPACKET`` socket pair, its only
channel to the worker. It imports the supervisor's code and the built-in tools, and
nothing of Django or Celery (``child.py`` loads ``reaper.py`` without its package).
Single-threaded: a fork from it copies no lock another thread held.

Each message from the worker is one call: ``{"id", "env"}`` plus three descriptors (the
supervisor's stdin, stdout and stderr, pipes the worker made). The server forks; the
child makes a session of its own (``setsid``), puts the pipes on 0, 1 and 2, closes every
other descriptor (the channel, the other calls' pidfds), takes ``env`` as its whole
environment, and runs ``child.main``. The server closes the three descriptors at once,
so the worker stays the only writer of the supervisor's stdin: its end is still the
supervisor's sign that the worker is gone. It answers ``{"id", "pid"}`` with a pidfd of
the child (the worker signals through it, never a pid that may be reused), and when the
child ends it kills the child's process group (the backstop: the pid is not reaped yet, so
the group cannot be another's), reaps it and answers ``{"id", "status"}`` (the exit code,
negative for a signal). A fork that fails answers ``{"id", "error"}``.

It exits when the channel closes: the worker's end goes with the worker, even killed with
-9, so it never relies on ``PR_SET_PDEATHSIG`` (which fires when the forking *thread*
ends). The supervisors it leaves keep their own deadline and stop when their stdin closes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from . import child
from .builtin import doc_scan  # noqa: F401 - searchDocs's scan, imported once here too

ROOT = Path(__file__).resolve().parent.parent.parent
MAX_MESSAGE_BYTES = 1024 * 1024  # a call's message: its id and environment
READY = b"ready"


def _supervise(env: dict[str, str], fds: list[int]) -> None:
    """In the forked child: become the call's supervisor; never returns."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the channel, pidfds, the received fds
        os.environ.clear()
        os.environ.update(env)
        os.chdir(ROOT)  # the project, never a workspace
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            child.main()
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _send(channel: socket.socket, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
    """Blocking: a worker frozen mid-read holds this server too, which then forks nothing
    for it; its supervisors keep their own deadlines meanwhile."""
    with contextlib.suppress(OSError):  # the worker is gone: the loop sees the end next
        socket.send_fds(channel, [json.dumps(message).encode()], list(fds))


def _fork(
    channel: socket.socket, selector: selectors.BaseSelector, data: bytes, fds: list[int]
) -> None:
    try:
        request = json.loads(data)
        call, env = request["id"], dict(request["env"])
    except (ValueError, KeyError, TypeError):
        for fd in fds:
            os.close(fd)
        return
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        _send(channel, {"id": call, "error": "the call's pipes did not arrive"})
        return
    try:
        pid = os.fork()
    except OSError as error:
        for fd in fds:
            os.close(fd)
        _send(channel, {"id": call, "error": f"fork failed: {error.strerror or error}"})
        return
    if pid == 0:
        _supervise(env, fds)
    for fd in fds:  # at once: the worker stays the only writer of the supervisor's stdin
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    selector.register(pidfd, selectors.EVENT_READ, (call, pid))
    _send(channel, {"id": call, "pid": pid}, (pidfd,))


def _reap(
    channel: socket.socket, selector: selectors.BaseSelector, pidfd: int, call: Any, pid: int
) -> None:
    """The supervisor ended: the backstop, then its status."""
    selector.unregister(pidfd)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # still unreaped: the group is this call's
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    _send(channel, {"id": call, "status": os.waitstatus_to_exitcode(status)})


def serve(channel: socket.socket) -> None:
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ, None)
    channel.sendall(READY)
    while True:
        for key, _ in selector.select():
            if key.data is not None:
                _reap(channel, selector, key.fd, *key.data)
                continue
            try:
                data, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE_BYTES, 3)
            except OSError:
                return
            if not data:
                return  # the worker is gone, or let this server go
            _fork(channel, selector, data, fds)


def main(argv: list[str]) -> None:
    # The terminal's signals are the worker's: this server ends when its channel does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = socket.socket(fileno=int(argv[0]))
    gc.freeze()  # what was imported stays out of the children's collections: fewer copies
    serve(channel)


if __name__ == "__main__":
    main(sys.argv[1:])
