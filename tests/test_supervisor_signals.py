"""A tool's supervisor collects everything the tool left, whenever its SIGTERM comes (SPEC
T6). Found under load: a SIGTERM from the worker that arrived as the supervisor's own
deadline passed was raised inside the supervisor's cleanup and skipped it, and a
``setsid`` process of the shell ran on, out of every group the backstops kill. SIGTERM now
only sets a flag and wakes the wait, so no signal can land in the cleanup.

A real supervisor (``python -m runs.tools.child``) runs a real shell; a thread sends it
SIGTERM as fast as it can, from before the tool starts until the supervisor has exited.
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
    """SIGTERM after SIGTERM, as fast as this thread can send them, until it exits."""
    sent = 0
    while process.poll() is None:
        try:
            os.kill(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            break
        sent += 1
    return sent


@pytest.mark.parametrize("round", range(3))
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


def test_sigterms_at_the_supervisors_own_deadline_never_skip_the_collection(tmp_path):
    """The race as found: the worker's SIGTERM and the supervisor's own deadline at once."""
    marker = a_marker()
    process = _supervisor(tmp_path, marker, deadline=1.0)
    try:
        started = time.monotonic()
        while not alive(marker) and time.monotonic() < started + BOUND:
            time.sleep(0.01)
        assert alive(marker), "the tool never started"
        time.sleep(max(0.0, started + 0.9 - time.monotonic()))
        storm = threading.Thread(target=_terms_until_it_ends, args=(process,))
        storm.start()
        code = process.wait(timeout=BOUND)
        storm.join(timeout=BOUND)
        assert code in (*ENDED, child.TIMED_OUT_EXIT), code
        assert gone(marker), "a setsid process of the tool outlived its supervisor"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pid in alive(marker):
            os.kill(pid, signal.SIGKILL)
