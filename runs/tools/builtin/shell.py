"""The one raw-shell tool, ``dangerous`` (SPEC T9): level L3, and sandboxed.

Under bubblewrap the command sees only the system's programs and libraries (read-only),
the workspace (read-write) and a private /tmp: no other file of the machine (the
console's code, databases and keys, home folders, local servers' sockets), no network, no
environment but PATH, LANG and HOME. Without bubblewrap it refuses to run, unless an admin
allowed unsandboxed execution for this workspace.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from ..child_context import console
from .common import Output, ToolFailure

BWRAP = "bwrap"
MAX_OUTPUT = 1_000_000
OUTPUT_GRACE_SECONDS = 0.5  # after the command exits, for the rest of its output


# What a command needs to run, read-only; nothing else of the machine is mounted (no /var,
# /run, /home, /root, /opt: no sockets of local servers, no credentials lying around).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
ETC_ENTRIES = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
)


def _system_mounts() -> list[str]:
    argv: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for path in ETC_ENTRIES:
        argv += ["--ro-bind-try", path, path]
    return argv


def sandbox_command(root: Path, command: str) -> list[str]:
    return [
        BWRAP,
        *_system_mounts(),
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",  # noqa: S108 - a private /tmp inside the sandbox, not the host's
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


MAX_FILE_BYTES = 256 * 1024 * 1024  # no single file the command writes may grow past this


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))


def run_capped(
    argv: list[str], *, cwd: Path, env: dict[str, str] | None
) -> tuple[int, bytes, bytes, int]:
    """Run, keeping at most MAX_OUTPUT bytes of each stream and draining the rest, so a
    command that prints forever cannot fill the worker's memory before its timeout."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_limit_file_size,
    )  # no threads yet in this process
    kept: dict[str, bytearray] = {"out": bytearray(), "err": bytearray()}
    dropped = [0]

    def drain(stream: Any, name: str) -> None:
        while chunk := stream.read(65536):
            room = MAX_OUTPUT - len(kept[name])
            kept[name] += chunk[: max(0, room)]
            dropped[0] += max(0, len(chunk) - max(0, room))

    readers = [
        threading.Thread(target=drain, args=(process.stdout, "out"), daemon=True),
        threading.Thread(target=drain, args=(process.stderr, "err"), daemon=True),
    ]
    for reader in readers:
        reader.start()
    returncode = process.wait()
    for reader in readers:
        # A process left in the background keeps the pipes open: the call still ends when
        # the command does, and the tool's supervisor collects what it left running.
        reader.join(timeout=OUTPUT_GRACE_SECONDS)
    return returncode, bytes(kept["out"]), bytes(kept["err"]), dropped[0]


def run_shell(root: Path, drafts: Path, args: dict[str, Any]) -> Output:
    sandbox = console().get("sandbox") or {}
    command = args["command"]
    if shutil.which(BWRAP):
        argv = sandbox_command(root, command)
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
    # The caller's deadline stops this whole call, sandbox included, and every process the
    # command left behind is collected when it returns (``runs.tools.child``).
    returncode, out, err, dropped = run_capped(argv, cwd=root, env=env)
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    return {
        "ok": returncode == 0,
        "exit_code": returncode,
        "content": stdout,
        "stderr": stderr,
        "summary": f"exit {returncode}" + ("" if env is None else " (unsandboxed)"),
        "error": "" if returncode == 0 else f"The command exited {returncode}.",
        "warnings": (
            [] if env is None else ["ran without a sandbox, as allowed for this workspace"]
        )
        + ([f"{dropped} bytes of output beyond {MAX_OUTPUT} were dropped"] if dropped else []),
    }
