"""The child process a tool runs in: one JSON request line on stdin, one JSON reply on
stdout. Imports no Django (nor Celery): the child touches only the workspace.

Two processes, so no tool code can undo the cleanup (a tool may ignore SIGTERM, start
daemons, fork twice):

1. The supervisor (``main``), forked by the worker's fork server (``fork_server.py``) or
   started by ``runs.tools.isolation`` as ``python -m``, runs only this module's code.
   It becomes a child subreaper (``harness_console/reaper.py``), so every process the
   tool starts stays its descendant whatever it does, forks the tool process and waits
   for its reply.
   It stops when the tool has answered, when the worker sends SIGTERM (the deadline, a
   cancel), when its stdin closes (the worker is gone, even killed with -9) or at the
   call's deadline, which the request carries: a worker frozen (SIGSTOP) neither signals
   nor closes anything, so the supervisor keeps the deadline itself. In every case it
   first kills and reaps every descendant, then answers (or not) and exits. SIGTERM (and
   SIGINT) only raise a flag and wake the wait (a byte on a pipe, ``signal.set_wakeup_fd``):
   a handler that raised could land anywhere, the cleanup included, and a SIGTERM arriving
   as the supervisor's own deadline passed skipped the collection, leaving a ``setsid``
   process of the tool running. One that comes while the request line is read is seen once
   it is (the worker writes it whole at once, or closes the pipe), before any fork.
2. The tool process runs the tool and writes its reply to a pipe; its own stdin and stdout
   are /dev/null, so nothing a tool prints can pose as the reply.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import selectors
import signal
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from policies.core.paths import PathRefused

from .builtin import IMPLEMENTATIONS
from .builtin.common import ToolFailure
from .child_context import CONSOLE
from .effects import effects_collect


def _reaper() -> ModuleType:
    """``harness_console/reaper.py`` by its path: imported as ``harness_console.reaper`` it
    would run the package's ``__init__``, which starts the Celery app and imports Django
    (most of a fresh supervisor's start-up, and nothing the fork server should hold)."""
    path = Path(__file__).resolve().parents[2] / "harness_console" / "reaper.py"
    spec = importlib.util.spec_from_file_location("harness_reaper", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reaper = _reaper()
STOPPED_EXIT = 3  # the supervisor was told to stop: no reply, the worker knows why
TIMED_OUT_EXIT = 4  # the supervisor's own deadline passed: no reply, the tool was stopped


class _Stop(Exception):
    """SIGTERM, or the worker went away: collect everything and leave."""


class _TimedOut(_Stop):
    """The call's deadline passed, whether or not the worker could still say so."""


def _implementation(name: str):
    if name in IMPLEMENTATIONS:
        return IMPLEMENTATIONS[name]
    module, _, function = name.partition(":")
    if not module or not function:
        raise ToolFailure(f"No implementation named {name!r}.")
    return getattr(importlib.import_module(module), function)


def handle(request: dict[str, Any]) -> dict[str, Any]:
    CONSOLE.set(request.get("context") or {})
    effects = effects_collect()
    try:
        function = _implementation(request["impl"])
        reply = function(Path(request["root"]), Path(request["drafts"]), request["args"])
        if effects and reply.get("ok"):  # applied by the worker, under the run's fence
            reply["effects"] = effects
        return reply
    except PathRefused as error:
        return {"ok": False, "error": str(error), "retryable": False}
    except ToolFailure as error:
        return {"ok": False, "error": str(error), "retryable": error.retryable}
    except OSError as error:
        return {
            "ok": False,
            "error": f"{type(error).__name__}: {error.strerror or error}",
            "retryable": False,
        }


def _reply_of(request: dict[str, Any]) -> bytes:
    try:
        return json.dumps(handle(request)).encode()
    except Exception as error:  # a bug in a tool is still a tool error, never a crash
        message = f"internal error: {type(error).__name__}: {error}"
        return json.dumps({"ok": False, "error": message, "retryable": False}).encode()


def _tool_process(request: dict[str, Any], reply_fd: int, wake: tuple[int, int]) -> None:
    """In the forked tool process; never returns. ``wake``: the supervisor's wake-up
    pipe, which is not this process's."""
    code = 1
    try:
        reaper.die_with_parent()
        signal.set_wakeup_fd(-1)
        for fd in wake:
            os.close(fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        data = memoryview(_reply_of(request))
        while data:
            data = data[os.write(reply_fd, data) :]
        code = 0
    finally:
        os._exit(code)


def _await_reply(pid: int, reply_fd: int, deadline: float, woken: int) -> bytes:
    """The tool's reply, read as it comes (it may be larger than a pipe holds) until the
    tool process has ended (its pidfd turns readable: no polling); raises _Stop if the
    worker goes away or sends SIGTERM meanwhile (``woken``: the signals' wake-up pipe),
    _TimedOut once ``deadline`` (monotonic) has passed without a whole reply."""
    chunks: list[bytes] = []
    pidfd = os.pidfd_open(pid)  # not reaped yet: it is the tool process
    selector = selectors.DefaultSelector()
    selector.register(reply_fd, selectors.EVENT_READ)
    selector.register(0, selectors.EVENT_READ)
    selector.register(pidfd, selectors.EVENT_READ)
    selector.register(woken, selectors.EVENT_READ)
    os.set_blocking(reply_fd, False)
    while True:
        ended = False
        _stop_if_asked()
        for key, _ in selector.select(timeout=max(0.0, min(1.0, deadline - time.monotonic()))):
            if key.fd == woken:
                while _read_some(woken):
                    pass
            elif key.fd == 0:
                if not os.read(0, 4096):
                    raise _Stop  # the worker closed our stdin: it is gone
            elif key.fd == pidfd:
                ended = True
            else:
                while chunk := _read_some(reply_fd):
                    chunks.append(chunk)
                if chunk is None:  # end of the pipe
                    selector.unregister(reply_fd)
        if ended:
            os.waitpid(pid, 0)
            while chunk := _read_some(reply_fd):  # whatever it wrote before it ended
                chunks.append(chunk)
            return b"".join(chunks)
        if time.monotonic() >= deadline:
            raise _TimedOut


def _deadline(request: dict[str, Any]) -> float:
    """When this call must be over, on this process's monotonic clock: the seconds the
    worker had left when it sent the request, counted from now that it arrived (a little
    later than the worker's own deadline, never earlier). None given: no deadline here."""
    seconds = request.get("deadline_seconds")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool):
        return time.monotonic() + max(0.0, float(seconds))
    return float("inf")


def _read_some(fd: int) -> bytes | None:
    """b"" when nothing is there now, None at the end of the pipe."""
    try:
        return os.read(fd, 65536) or None
    except BlockingIOError:
        return b""
    except OSError:
        return None


_term_asked = False


def _on_term(signum: int, frame: Any) -> None:
    """SIGTERM or SIGINT: noted, never raised (the module's docstring says why)."""
    global _term_asked
    _term_asked = True


def _stop_if_asked() -> None:
    if _term_asked:
        raise _Stop


def _wake_on_signals() -> tuple[int, int]:
    """A pipe the interpreter writes a byte on whenever a signal comes, so that a wait
    (on its read end, the first) wakes at once to see the flag."""
    woken, wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake, warn_on_full_buffer=False)
    return woken, wake


def main() -> None:
    signal.signal(signal.SIGTERM, _on_term)  # first: no descendant exists before this
    signal.signal(signal.SIGINT, _on_term)  # the fork server's default raises
    pipe = _wake_on_signals()
    woken = pipe[0]
    reaper.become_subreaper()
    reply, code = b"", 1
    try:
        request = json.loads(sys.stdin.buffer.readline())
        deadline = _deadline(request)
        _stop_if_asked()
        reply_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(reply_fd)
            _tool_process(request, write_fd, pipe)
        os.close(write_fd)
        reply = _await_reply(pid, reply_fd, deadline, woken)
    except _TimedOut:
        reply, code = b"", TIMED_OUT_EXIT
    except _Stop:
        reply, code = b"", STOPPED_EXIT
    else:
        code = 0 if reply else 1
    finally:
        reaper.collect_descendants()  # no signal raises here: SIGTERM only sets the flag
    if reply:
        sys.stdout.buffer.write(reply)
        sys.stdout.buffer.flush()
    elif code == 1:
        sys.stderr.write("The tool process ended without a reply.\n")
    sys.exit(code)


if __name__ == "__main__":
    main()
