"""The built-in tools (SPEC T3, T9), run in a child process by name: file tools, the
sandboxed shell, validation and approval requests. Framework-free."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .common import Output
from .files import (
    commit_draft,
    create_draft,
    delete_file,
    glob_files,
    grep_files,
    patch_draft,
    publish,
    read_source,
    rename_file,
)
from .shell import run_shell
from .validation import request_approval, run_validation

IMPLEMENTATIONS: dict[str, Callable[[Path, Path, dict], Output]] = {
    "dangerous": run_shell,
    "publish": publish,
    "runValidation": run_validation,
    "requestApproval": request_approval,
    "readSource": read_source,
    "glob": glob_files,
    "grep": grep_files,
    "createDraft": create_draft,
    "patchDraft": patch_draft,
    "commitDraft": commit_draft,
    "deleteFile": delete_file,
    "renameFile": rename_file,
}
