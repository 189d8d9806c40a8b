"""Instruction sources in increasing priority (SPEC C5, ADR 0006).

Root ``AGENTS.md`` first, then each folder's, shallower before deeper (the deepest, most
specific, wins), then the agent's instructions from the database last: on conflict the last
wins, and ``drop_whole_units`` drops from the head, the least authoritative first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from .assembler import Rejected, Unit

INSTRUCTION_FILE: Final = "AGENTS.md"
MAX_INSTRUCTION_BYTES: Final = 256 * 1024
DATABASE_SOURCE: Final = "db:instructions"


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
