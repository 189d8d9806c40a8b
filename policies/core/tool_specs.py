"""The built-in tools' level and side effect (SPEC T2, T3, P1): what the permission engine
needs to know about a tool before it runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .permissions import Level, SideEffect


@dataclass(frozen=True)
class ToolSpec:
    name: str
    level: Level
    side_effect: SideEffect
    takes_path: bool = True


BUILTIN_TOOLS: Final[dict[str, ToolSpec]] = {
    spec.name: spec
    for spec in (
        ToolSpec("searchDocs", "L1", "none", takes_path=False),
        ToolSpec("readSource", "L1", "none"),
        ToolSpec("glob", "L1", "none", takes_path=False),
        ToolSpec("grep", "L1", "none", takes_path=False),
        ToolSpec("runValidation", "L1", "none"),
        ToolSpec("requestApproval", "L1", "none", takes_path=False),
        ToolSpec("createDraft", "L2", "filesystem_write"),
        ToolSpec("patchDraft", "L2", "filesystem_write"),
        ToolSpec("commitDraft", "L2", "filesystem_write"),
        ToolSpec("deleteFile", "L3", "filesystem_write"),
        ToolSpec("renameFile", "L3", "filesystem_write"),
        ToolSpec("publish", "L2", "production_change"),
        ToolSpec("dangerous", "L3", "filesystem_write", takes_path=False),
    )
}
