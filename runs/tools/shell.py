"""The one raw-shell tool, ``dangerous`` (SPEC T9): level L3, and sandboxed.

Under bubblewrap the command sees the filesystem read-only, the workspace read-write, a
private /tmp, no network and no environment but PATH and LANG; the console's own files
(code, databases, keys) are hidden. Without bubblewrap it refuses to run, unless an admin
allowed unsandboxed execution for this workspace.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from .builtin import Output, ToolFailure
from .context import console

BWRAP = "bwrap"
MAX_OUTPUT = 1_000_000


def sandbox_command(root: Path, command: str, hidden: list[str]) -> list[str]:
    # A private /tmp inside the sandbox, not the host's.
    argv = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]  # noqa: S108
    paths = [Path(p) for p in hidden if Path(p).exists()]
    for path in paths:  # a path inside another hidden one is hidden already
        if not any(path != other and path.is_relative_to(other) for other in paths):
            argv += ["--tmpfs", str(path)]
    argv += [
        "--bind",
        str(root),
        str(root),
        "--chdir",
        str(root),
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/local/bin:/usr/bin:/bin",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "HOME",
        str(root),
        "sh",
        "-c",
        command,
    ]
    return argv


def run_shell(root: Path, drafts: Path, args: dict[str, Any]) -> Output:
    sandbox = console().get("sandbox") or {}
    command = args["command"]
    if shutil.which(BWRAP):
        argv = sandbox_command(root, command, list(sandbox.get("hide", [])))
        env = None
    elif sandbox.get("allow_unsandboxed"):
        argv, env = (
            ["sh", "-c", command],
            {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(root)},
        )
    else:
        raise ToolFailure(
            "bubblewrap is not installed, so the shell refuses to run; an admin "
            "may allow unsandboxed execution for this workspace."
        )
    # The caller's timeout kills this whole process group, sandbox included.
    finished = subprocess.run(argv, cwd=root, env=env, capture_output=True, check=False)
    stdout = finished.stdout[:MAX_OUTPUT].decode("utf-8", "replace")
    stderr = finished.stderr[:MAX_OUTPUT].decode("utf-8", "replace")
    return {
        "ok": finished.returncode == 0,
        "exit_code": finished.returncode,
        "content": stdout,
        "stderr": stderr,
        "summary": f"exit {finished.returncode}" + ("" if env is None else " (unsandboxed)"),
        "error": "" if finished.returncode == 0 else f"The command exited {finished.returncode}.",
        "warnings": [] if env is None else ["ran without a sandbox, as allowed for this workspace"],
    }
