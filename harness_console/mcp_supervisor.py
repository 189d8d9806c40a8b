"""The process an MCP server runs under (SPEC T6): when the server ends, so does everything
it started.

The SDK starts a stdio server as one process and, when the call is over, closes its stdin
and terminates it; a server that left a daemon behind (``setsid``, a double fork) would
leave it running, out of the process group's reach. So the console starts this small
supervisor instead, with the server's command after it. It becomes a child subreaper
(every orphan of the server stays its descendant), runs the server with the same stdin,
stdout and stderr (the protocol passes straight through), passes SIGTERM on to it, and when
the server has exited kills and reaps every descendant (``reaper.py``) before it exits
with the server's status. The kernel kills it if the worker thread that started it goes
(``PR_SET_PDEATHSIG``), and the server's stdin closes with it, so nothing outlives a killed
worker either.

A worker frozen (SIGSTOP) does neither: it keeps the server's stdin open and its thread
alive. So the supervisor can keep the call's deadline itself: started as
``mcp_supervisor.py --deadline SECONDS COMMAND...``, it kills the server and every
descendant once SECONDS have passed and exits ``TIMED_OUT_EXIT``, whatever the worker does.

Started by path, not as a module: the server's working directory is its root and its
environment has no PYTHONPATH, so only the standard library and ``reaper.py`` (beside this
file, standard library only) are imported.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from types import ModuleType

TIMED_OUT_EXIT = 124  # as timeout(1): the deadline passed, the server was stopped here


def _reaper() -> ModuleType:
    """``reaper.py`` from beside this file, without the project on the path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")
    spec = importlib.util.spec_from_file_location("harness_reaper", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _deadline(argv: list[str]) -> tuple[float | None, list[str]]:
    """``--deadline SECONDS`` before the command, if given: (seconds, the command)."""
    if argv[:1] != ["--deadline"]:
        return None, argv
    try:
        return max(0.0, float(argv[1])), argv[2:]
    except (IndexError, ValueError):
        return None, []


def main(argv: list[str]) -> int:
    deadline, argv = _deadline(argv)
    if not argv:
        sys.stderr.write("usage: mcp_supervisor.py [--deadline SECONDS] COMMAND [ARG...]\n")
        return 2
    reaper = _reaper()
    reaper.die_with_parent()
    reaper.become_subreaper()
    # Installed before the server starts: a signal between its start and these would have
    # ended this supervisor without its collection, the server left running.
    started: list[subprocess.Popen[bytes]] = []
    stopped: list[int] = []

    def forward(signum: int, frame: object) -> None:
        """Passed on to the server; one that comes before it started, once it has."""
        if not started:
            stopped.append(signum)
        elif started[0].poll() is None:
            started[0].send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        server = subprocess.Popen(argv)
    except OSError as error:
        sys.stderr.write(f"The MCP server could not start: {error}\n")
        return 127
    started.append(server)
    if stopped:
        server.send_signal(stopped[0])
    try:
        code = server.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
        server.kill()  # the collection below takes the rest
        code = None
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # nothing interrupts the collection
        reaper.collect_descendants()
    if code is None:
        return TIMED_OUT_EXIT
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
