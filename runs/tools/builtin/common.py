"""What every built-in tool shares: the failure the model sees, bounded reads of regular
files only that never follow a link swapped in late, and paths resolved again at the
moment of use (SPEC T3, T5, T6, R8). Writes are described, not made: ``runs.tools.effects``."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from policies.paths import WorkspacePath, resolve_in_workspace
from policies.regular_files import FileTooLarge, NotRegularFile, read_regular

from ..child_context import console

Output = dict[str, Any]

MAX_READ_BYTES = 2 * 1024 * 1024

MAX_RECORD_BYTES = 20 * 1024 * 1024  # a write keeps a copy of the file: bounded

MAX_MATCHES = 2000


class ToolFailure(Exception):
    """A failure the model should see as a tool error; ``retryable`` for transient ones."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def read_bounded(path: Path, limit: int = MAX_RECORD_BYTES) -> bytes | None:
    """The file's bytes (None if there is none), for every tool's read: a regular file
    only (a FIFO, a device, a socket or a last-moment link is refused, never opened for a
    blocking read), never more than ``limit`` (``policies.regular_files``)."""
    try:
        return read_regular(path, limit)
    except FileNotFoundError:
        return None
    except FileTooLarge:
        raise ToolFailure(f"{path.name} is over {limit} bytes: too large for this tool.") from None
    except NotRegularFile as error:
        raise ToolFailure(str(error)) from None
    except OSError as error:
        raise ToolFailure(f"{path.name} cannot be opened ({error.strerror}).") from None


def resolve_at_use(root: Path, args: dict, key: str) -> WorkspacePath:
    """Resolve again at the moment of use; if the console decided on another file (a link
    swapped in between), do nothing."""
    resolved = resolve_in_workspace(root, args[key])
    decided = console().get("decided", {}).get(key)
    if decided is not None and decided != resolved.relative:
        raise ToolFailure(
            f"{args[key]} now leads to {resolved.relative}, not to {decided} as "
            "when it was decided; nothing was done."
        )
    return resolved


def utf8_text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ToolFailure(f"{where} is not UTF-8 text (byte {error.start}).") from None


def draft_path(drafts: Path, relative: str) -> Path:
    target = (drafts / relative).resolve()
    if not target.is_relative_to(drafts.resolve()):
        raise ToolFailure("That draft path leads outside the drafts area.")
    return target


def write_record(relative: str, before: bytes | None, after: bytes | None) -> dict[str, Any]:
    return {"path": relative, "before": b64(before), "after": b64(after)}
