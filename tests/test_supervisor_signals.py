"""A tool's supervisor collects everything the tool left, whenever its SIGTERM comes (SPEC
T6). Found under load: a SIGTERM from the worker that arrived as the supervisor's own
deadline passed was raised inside the supervisor's cleanup and skipped it, and a
``setsid`` process of the shell ran on, out of every group the backstops kill. SIGTERM now
only sets a flag and wakes the wait, so no signal can land in the cleanup.

A real supervisor (``python -m runs.tools.child``) runs a real shell; a thread sends it
SIGTERM as fast as it can, from once the tool runs until the supervisor has exited: one of
them lands in the cleanup (the supervisor before this fix leaked in every run of this).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from harness_console.child_env import scrubbed_env
from runs.tools import child
from runs.tools.isolation import ROOT
from tests.test_nothing_hangs import BOUND, a_marker, alive, gone

# How a stopped supervisor ends: its own exit, or the signal's default once the interpreter,
# shutting down after the collection, has put the default handlers back.
ENDED = (child.STOPPED_EXIT, -signal.SIGTERM)
LEAVES = "setsid sleep {m} > /dev/null 2>&1 & setsid sleep {m} & sleep 600"


def _supervisor(tmp_path, marker: str, deadline: float) -> subprocess.Popen:
    env = scrubbed_env() | {"PATH": "/nonexistent"}  # the tool finds no bubblewrap
    process = subprocess.Popen(
        [sys.executable, "-m", "runs.tools.child"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    request = {
        "impl": "dangerous",
        "root": str(tmp_path),
        "drafts": str(tmp_path),
        "args": {"command": LEAVES.format(m=marker)},
        "context": {"sandbox": {"allow_unsandboxed": True}},
        "deadline_seconds": deadline,
    }
    assert process.stdin is not None
    process.stdin.write(json.dumps(request).encode() + b"\n")
    process.stdin.flush()  # and kept open: the worker is still there
    return process


def _terms_until_it_ends(process: subprocess.Popen) -> int:
    """SIGTERM after SIGTERM, as fast as this thread can send them, until it exits:
    through a pidfd, never a pid that the test's wait() may have freed for another."""
    sent, pidfd = 0, os.pidfd_open(process.pid)
    try:
        while True:
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            sent += 1
    except ProcessLookupError:  # it has exited
        return sent
    finally:
        os.close(pidfd)


@pytest.mark.parametrize("round", range(5))
def test_a_storm_of_sigterms_never_skips_the_collection(tmp_path, round):
    """The supervisor stops (no reply, the stopped exit) and leaves nothing running,
    however many SIGTERMs come and wherever they land."""
    marker = a_marker()
    process = _supervisor(tmp_path, marker, deadline=BOUND)
    try:
        started = time.monotonic()
        while not alive(marker) and time.monotonic() < started + BOUND:
            time.sleep(0.01)
        assert alive(marker), "the tool never started"
        sent: list[int] = []
        storm = threading.Thread(target=lambda: sent.append(_terms_until_it_ends(process)))
        storm.start()
        code = process.wait(timeout=BOUND)
        storm.join(timeout=BOUND)
        assert code in ENDED, code
        assert sent and sent[0] >= 1
        assert gone(marker), "a setsid process of the tool outlived its supervisor"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pid in alive(marker):
            os.kill(pid, signal.SIGKILL)
