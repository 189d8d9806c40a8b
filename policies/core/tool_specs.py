"""The built-in tools' definitions (SPEC T1–T3): what the model is told, and what the
permission engine needs to know, before a tool runs. The registry in the admin starts from
these; an admin may then edit descriptions, timeouts and retries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from .permissions import Level, SideEffect

MAX_DESCRIPTION: Final = 250
# The built-in tools that write files (drafts or formal ones): a task's write paths bound
# them, and the journal keeps the bytes they may change, so a call interrupted after its
# write is recorded from disk instead of repeated.
SHELL_TOOL: Final = "dangerous"  # the one raw shell (SPEC T9)
MAX_COMMAND: Final = 1000  # under the 1024 characters an approver's typed confirmation holds
FILE_WRITE_TOOLS: Final = frozenset(
    {"createDraft", "patchDraft", "commitDraft", "deleteFile", "renameFile"}
)

_PATH = {
    "type": "string",
    "minLength": 1,
    "maxLength": 1024,
    "description": "A path relative to the workspace.",
}


def _schema(required: list[str], **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class ToolSpec:
    name: str
    level: Level
    side_effect: SideEffect
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    takes_path: bool = True
    timeout_sec: int = 30
    retry: int = 0
    approval_required: bool = False


BUILTIN_TOOLS: Final[dict[str, ToolSpec]] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "readSource",
            "L1",
            "none",
            "Read one text file of the workspace.",
            _schema(["path"], path=_PATH),
        ),
        ToolSpec(
            "glob",
            "L1",
            "none",
            "List workspace files matching a glob such as docs/**/*.md.",
            _schema(["pattern"], pattern={"type": "string", "minLength": 1, "maxLength": 500}),
            takes_path=False,
        ),
        ToolSpec(
            "grep",
            "L1",
            "none",
            "Search workspace files for a regular expression, optionally within a glob.",
            _schema(
                ["pattern"],
                pattern={"type": "string", "minLength": 1, "maxLength": 500},
                glob={"type": "string", "maxLength": 500},
            ),
            takes_path=False,
        ),
        ToolSpec(
            "createDraft",
            "L2",
            "filesystem_write",
            "Write a draft of a file; the workspace itself is not changed.",
            _schema(
                ["path", "content"], path=_PATH, content={"type": "string", "maxLength": 2_000_000}
            ),
        ),
        ToolSpec(
            "patchDraft",
            "L2",
            "filesystem_write",
            "Change a draft (or start one from the file) with a unified diff or an exact "
            "search and replace.",
            _schema(
                ["path"],
                path=_PATH,
                patch={"type": "string"},
                search={"type": "string", "minLength": 1},
                replace={"type": "string"},
            ),
        ),
        ToolSpec(
            "commitDraft",
            "L2",
            "filesystem_write",
            "Replace the workspace file with its draft, after approval where needed.",
            _schema(["path"], path=_PATH),
            approval_required=True,
        ),
        ToolSpec(
            "deleteFile",
            "L3",
            "filesystem_write",
            "Delete one workspace file.",
            _schema(["path"], path=_PATH),
            approval_required=True,
        ),
        ToolSpec(
            "renameFile",
            "L3",
            "filesystem_write",
            "Rename or move one workspace file; never overwrites.",
            _schema(["source", "target"], source=_PATH, target=_PATH),
            approval_required=True,
        ),
        ToolSpec(
            "searchDocs",
            "L1",
            "none",
            "Search the workspace documentation.",
            _schema(["query"], query={"type": "string", "minLength": 1}),
            takes_path=False,
        ),
        ToolSpec(
            "runValidation",
            "L1",
            "none",
            "Check that a file is well formed.",
            _schema(["path"], path=_PATH),
        ),
        ToolSpec(
            "requestApproval",
            "L1",
            "none",
            "Ask a person to approve a plan.",
            _schema(["summary"], summary={"type": "string", "minLength": 1}),
            takes_path=False,
        ),
        ToolSpec(
            "publish",
            "L2",
            "production_change",
            "Publish the workspace.",
            _schema([]),
            takes_path=False,
            approval_required=True,
        ),
        ToolSpec(
            "dangerous",
            "L3",
            "filesystem_write",
            "Run a shell command, sandboxed.",
            # A person types the command to approve it: all of it, so it is bounded.
            _schema(
                ["command"], command={"type": "string", "minLength": 1, "maxLength": MAX_COMMAND}
            ),
            takes_path=False,
            approval_required=True,
        ),
    )
}
