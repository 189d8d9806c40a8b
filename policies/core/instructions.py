"""Instruction sources in increasing priority (SPEC C5, ADR 0006), scoped to the task.

Root ``AGENTS.md`` first, then each folder's, shallower before deeper (the deepest, most
specific, wins), then the agent's instructions from the database last: on conflict the last
wins, and ``drop_whole_units`` drops from the head, the least authoritative first.

Only the files on the task's path are candidates, as Codex CLI and Claude Code load
instructions along the working path: the root's, and those of the folders from the root to
each file the task may touch. A repository's other folders speak of other code; sending
them would crowd out the files that matter (a backend's twenty files outweighing the one
frontend file the task is about). A task that names no path gets the root's alone.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from .assembler import Rejected, Unit

INSTRUCTION_FILE: Final = "AGENTS.md"
MAX_INSTRUCTION_BYTES: Final = 256 * 1024
DATABASE_SOURCE: Final = "db:instructions"
NOT_ON_PATH: Final = "not on the task's path"
# The rule that orders the instruction layer, as the inspection names it for a file dropped
# over budget (the assembler's ``Layer.drop_order``).
DROP_ORDER: Final = "the least specific files (the root's, then shallower folders')"
_WILDCARDS: Final = frozenset("*?[")


@dataclass(frozen=True)
class InstructionFile:
    """A file as read from disk: its path relative to the workspace, and bytes or a problem."""

    relative_path: str
    content: bytes | None = None
    problem: str = ""
    size: int = 0


def source_id_for(relative_path: str) -> str:
    return f"file:{relative_path}"


def _priority(file: InstructionFile) -> tuple[int, str]:
    """Shallower first (the root has depth 0); ties by path, so the order is deterministic."""
    return (file.relative_path.count("/"), file.relative_path)


def decode_instruction(file: InstructionFile) -> tuple[str | None, str]:
    """The text of a file, or the reason it cannot be used: deterministic, never raising."""
    if file.problem:
        return None, file.problem
    content = file.content or b""
    if len(content) > MAX_INSTRUCTION_BYTES or file.size > MAX_INSTRUCTION_BYTES:
        size = max(len(content), file.size)
        return None, f"too large: {size} bytes (the limit is {MAX_INSTRUCTION_BYTES})"
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, f"not valid UTF-8 (byte {error.start})"
    text = text.removeprefix("\ufeff")
    if not text.strip():
        return None, "empty"
    return text.strip(), ""


def instruction_units(
    files: Iterable[InstructionFile], database_text: str = ""
) -> tuple[tuple[Unit, ...], tuple[Rejected, ...]]:
    """Order the sources by priority and turn each into a unit tagged with its source."""
    units: list[Unit] = []
    rejected: list[Rejected] = []
    for file in sorted(files, key=_priority):
        source = source_id_for(file.relative_path)
        text, problem = decode_instruction(file)
        if text is None:
            rejected.append(Rejected(source, problem, file.relative_path))
            continue
        header = f"<!-- instructions from {file.relative_path} -->"
        units.append(
            Unit(source, f"{header}\n{text}", title=file.relative_path, path=file.relative_path)
        )
    if database_text.strip():
        header = "<!-- instructions from the console (highest priority) -->"
        units.append(
            Unit(DATABASE_SOURCE, f"{header}\n{database_text.strip()}", title="Agent instructions")
        )
    return tuple(units), tuple(rejected)


def _folder(relative_path: str) -> str:
    """The folder of an instruction file, relative to the workspace ("" for the root)."""
    return relative_path.rpartition("/")[0]


def _task_folders(paths: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """Folders on the task's path, and the folders below which a glob may reach anything.

    A named path contributes every folder from the root to it (and itself, should it be a
    folder); a glob contributes the folders to its literal prefix, and everything under
    that prefix when its wildcards may cross a folder (``src/**/*.py``, ``src/*/x.py``).
    """
    on_path: set[str] = {""}
    below: list[str] = []
    for raw in paths:
        # "docs/../app/x.py" is in app/; what is not inside the workspace names nothing
        path = posixpath.normpath(raw.strip().replace("\\", "/"))
        parts = [part for part in path.split("/") if part not in ("", ".")]
        if ".." in parts or path.startswith(("/", "~")) or (parts and parts[0].endswith(":")):
            continue  # not relative to the workspace (absolute, home, a drive): no folder
        literal: list[str] = []
        for index, part in enumerate(parts):
            if _WILDCARDS & set(part):
                if index < len(parts) - 1 or "**" in part:  # reaches into folders below
                    below.append("/".join(literal))
                break
            literal.append(part)
        for depth in range(1, len(literal) + 1):
            on_path.add("/".join(literal[:depth]))
    return frozenset(on_path), tuple(below)


def on_task_path(relative_path: str, paths: Iterable[str]) -> bool:
    """Whether the instruction file at ``relative_path`` speaks of what the task touches."""
    on_path, below = _task_folders(paths)
    return _on(_folder(relative_path), on_path, below)


def _on(folder: str, on_path: frozenset[str], below: tuple[str, ...]) -> bool:
    if folder in on_path:
        return True
    return any(not prefix or folder.startswith(prefix + "/") for prefix in below)


def scope_to_task(
    units: tuple[Unit, ...], rejected: tuple[Rejected, ...], paths: Iterable[str]
) -> tuple[tuple[Unit, ...], tuple[Rejected, ...]]:
    """The candidates of a task: the units on its path and the database's, in the same
    order; every other file reported as not on the task's path, so the inspection lists
    it. A file its loader refused keeps its own reason wherever it lies."""
    named = sorted({p.strip() for p in paths if p.strip()})
    on_path, below = _task_folders(named)
    where = f" ({', '.join(named)})" if named else " (the task names no file)"
    kept: list[Unit] = []
    elsewhere: list[Rejected] = []
    for unit in units:
        if unit.source_id == DATABASE_SOURCE or _on(_folder(unit.path), on_path, below):
            kept.append(unit)
        else:
            elsewhere.append(Rejected(unit.source_id, NOT_ON_PATH + where, unit.path))
    return tuple(kept), (*rejected, *elsewhere)
