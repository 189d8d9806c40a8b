"""Runs one tool in a child process with a hard timeout (SPEC T6).

The child gets its own session (process group) and a scrubbed environment. At the timeout
the whole group is killed with SIGKILL — a tool that ignores SIGTERM or started children of
its own is stopped just the same — and the caller gets a tool error, not a hang.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness_console.child_env import scrubbed_env

ROOT = Path(__file__).resolve().parent.parent.parent


def _die_with_parent() -> None:
    """In the child, before exec: the kernel kills it if the worker dies (kill -9 too), so
    a tool never finishes after the run resumed elsewhere — the resumed worker decides
    alone whether the call ran (SPEC R9)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: the timeout still bounds the tool
        pass


PR_SET_PDEATHSIG = 1


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run_isolated(
    *,
    impl: str,
    root: str,
    drafts: str,
    args: dict[str, Any],
    timeout: float,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The tool's reply, or a tool error if it timed out or died. ``context`` is what the
    console (not the model) tells the tool: see ``runs.tools.child_context``."""
    request = json.dumps(
        {"impl": impl, "root": root, "drafts": drafts, "args": args, "context": context or {}}
    )
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
        preexec_fn=_die_with_parent,
    )
    try:
        out, err = process.communicate(request.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        process.communicate()
        return {
            "ok": False,
            "error": f"Timed out after {timeout:g} s; the tool was stopped.",
            "retryable": False,
            "timed_out": True,
        }
    finally:
        _kill_group(process.pid)  # anything the tool left running goes with it
    elapsed = time.monotonic() - started
    if process.returncode != 0:
        detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return {"ok": False, "error": f"The tool process failed ({detail[0]}).", "retryable": False}
    try:
        reply = json.loads(out)
    except json.JSONDecodeError:
        return {"ok": False, "error": "The tool's reply was not JSON.", "retryable": False}
    reply.setdefault("elapsed_ms", round(elapsed * 1000))
    return reply
