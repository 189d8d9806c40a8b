"""Reads a workspace's AGENTS.md files from disk (the I/O half of SPEC C5).

Recursive, skipping ``.git``; folders that are links are not entered, and a file that is a
link is read only when it resolves inside the workspace. Problems (a link out, a file too
large, unreadable) become part of the result, never an exception.
"""

from __future__ import annotations

import os
from pathlib import Path

from .core.instructions import INSTRUCTION_FILE, MAX_INSTRUCTION_BYTES, InstructionFile
from .regular_files import FileTooLarge, NotRegularFile, read_regular

SKIPPED_DIRS = frozenset({".git"})


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def read_file_within(
    root: str, full: str, relative: str, *, parent_is_real: bool = False
) -> InstructionFile:
    """One file's bytes, read only if it really lies inside ``root`` and is not huge.

    ``parent_is_real``: the walk reached this folder without following a link, so only the
    file itself can lead elsewhere, and one ``lstat`` replaces resolving the whole path.
    """
    real = full if parent_is_real and not os.path.islink(full) else os.path.realpath(full)
    if not _inside(real, root):
        return InstructionFile(relative, problem="a link pointing outside the workspace")
    try:
        # Regular files only, never more than the limit: a FIFO named AGENTS.md must not
        # hang the assembly, a sparse file of gigabytes is refused from its size.
        return InstructionFile(relative, content=read_regular(real, MAX_INSTRUCTION_BYTES))
    except FileTooLarge as error:
        return InstructionFile(relative, size=error.size)
    except NotRegularFile as error:
        return InstructionFile(relative, problem=f"{error.what}, not a regular file")
    except OSError as error:
        return InstructionFile(relative, problem=f"unreadable ({error.strerror or error})")


def read_instruction_files(root: Path | str) -> list[InstructionFile]:
    real_root = os.path.realpath(root)
    if not os.path.isdir(real_root):
        raise FileNotFoundError(f"The workspace folder {root} does not exist.")
    found: list[InstructionFile] = []
    prefix = len(real_root.rstrip(os.sep)) + 1
    for dirpath, dirnames, filenames in os.walk(real_root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        if INSTRUCTION_FILE in filenames:
            full = f"{dirpath}{os.sep}{INSTRUCTION_FILE}"
            # os.walk yields real_root + sub-paths, so the relative path is a plain slice.
            relative = full[prefix:].replace(os.sep, "/")
            found.append(read_file_within(real_root, full, relative, parent_is_real=True))
    return found
