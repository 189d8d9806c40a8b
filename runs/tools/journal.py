"""One journal for every tool call of a run (SPEC R9): the call is inserted as running
before it runs, with the bytes of the files it may write. The unique (run, tool_use_id)
makes it at most once: a second worker's insert fails (:class:`ToolCallStarted`), and a
resumed worker finds the running row and reconciles it (``recover.py``) instead of
repeating the call."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction

from policies.core.tool_specs import FILE_WRITE_TOOLS
from policies.models import ToolDefinition, Workspace
from policies.regular_files import FileTooLarge, NotRegularFile, read_regular

from ..models import ToolCall
from .decide import builtin_of, side_effect

MAX_PRE_IMAGE_BYTES = 4 * 1024 * 1024


class ToolCallStarted(Exception):
    """Another worker already started this tool_use; it never runs twice."""


def journal_open(
    record: ToolCall,
    definition: ToolDefinition,
    paths: Sequence[str] = (),
    workspace: Workspace | None = None,
    drafts: Path | None = None,
    fence: Callable[[], AbstractContextManager[Any]] = transaction.atomic,
) -> None:
    """Insert the call as running before it runs; a second worker cannot (unique id), nor
    one that lost the run (``fence``: the run's lease, checked in the insert's transaction).
    A write the harness can check afterwards keeps its files' bytes from before, read
    before the transaction."""
    if (
        workspace is not None
        and drafts is not None
        and side_effect(definition) == "filesystem_write"
        and recoverable(definition)
    ):
        record.pre_images = {
            f"{area}:{path}": image(base / path)
            for path in paths
            for area, base in (("workspace", workspace.root_path), ("drafts", drafts))
        }
    record.status = "running"
    try:
        with fence(), transaction.atomic():
            record.save(force_insert=True)
    except IntegrityError:
        raise ToolCallStarted(f"Tool call {record.tool_use_id} was started already.") from None


def recoverable(definition: ToolDefinition) -> bool:
    """A built-in file tool (under any name): its writes can be checked afterwards."""
    try:
        return builtin_of(definition) in FILE_WRITE_TOOLS
    except ValueError:
        return False


def image(path: Any) -> str | None:
    """A file's bytes as the journal keeps them: None where no regular file is, "too-large"
    past the limit (refused from its size), "unreadable" otherwise. Read through the one
    reader of regular files, so a FIFO or a device put in a file's place never blocks it."""
    try:
        return base64.b64encode(read_regular(path, MAX_PRE_IMAGE_BYTES)).decode()
    except (FileNotFoundError, NotADirectoryError, NotRegularFile):
        return None
    except FileTooLarge:
        return "too-large"
    except OSError:
        return "unreadable"


def image_decode(image: str | None) -> bytes | None:
    return None if image is None else base64.b64decode(image)
