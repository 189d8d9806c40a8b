"""Running an allowed tool call (SPEC T6, T8): every tool's file and process work happens
in a tool child under the call's deadline (``isolation.py``: stopped at it, every
descendant collected), retried with backoff only for failures the tool marks retryable.
searchDocs is the one tool with a console half: its files are read in a child under the
same deadline, then the index is written and searched here, with no file read inside the
database transaction (``doc_search.py``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from policies.core.permissions import Call, Grant, Policy, decide
from policies.models import ToolDefinition, Workspace

from .child_context import policy_to_context
from .doc_search import SCAN_TIMEOUT_SECONDS, search_docs
from .isolation import run_isolated

BACKOFF_SECONDS = 0.2


def child_context_build(
    *,
    tool: str,
    definition: ToolDefinition,
    side_effect: str,
    policy: Policy,
    grants: Sequence[Grant],
    decided: dict[str, str],
    workspace: Workspace,
) -> dict[str, Any]:
    """What the child is told beside the arguments (``child_context.py``)."""
    return {
        "policy": policy_to_context(policy),
        "tool": {"name": tool, "level": definition.permission_level, "side_effect": side_effect},
        "grants": [[g.tool, g.path, g.granted_by] for g in grants],
        "decided": decided,
        "sandbox": {"allow_unsandboxed": workspace.allow_unsandboxed_shell},
        "publish_root": workspace.publish_root,
    }


def execute(
    *,
    tool: str,
    definition: ToolDefinition,
    workspace: Workspace,
    drafts: Path,
    arguments: dict[str, Any],
    policy: Policy,
    grants: Sequence[Grant],
    context: dict[str, Any],
) -> tuple[dict[str, Any], int]:
    """(the tool's reply, how many attempts it took). Every reply carries how long the tool
    took (``elapsed_ms``, the harness's measure, never shown to the model), whichever
    process ran it: ``run_isolated`` times a child's, this the console's own half."""
    if tool in IN_PROCESS:
        timeout = float(definition.timeout_sec)
        started = time.monotonic()
        reply = IN_PROCESS[tool](workspace, arguments, policy, grants, timeout=timeout)
        elapsed = round((time.monotonic() - started) * 1000)
        return {**reply, "elapsed_ms": elapsed}, 1  # the whole call's, a scan's failure too
    return _isolated(definition, workspace, str(drafts), arguments, context)


def _isolated(
    definition: ToolDefinition,
    workspace: Workspace,
    drafts: str,
    arguments: dict[str, Any],
    context: dict[str, Any],
) -> tuple[dict[str, Any], int]:
    attempts = 0
    while True:
        attempts += 1
        reply = run_isolated(
            impl=definition.implementation or definition.name,
            root=workspace.root,
            drafts=drafts,
            args=arguments,
            timeout=float(definition.timeout_sec),
            context=context,
        )
        if reply.get("ok") or not reply.get("retryable") or attempts > definition.retry:
            return reply, attempts
        time.sleep(BACKOFF_SECONDS * 2 ** (attempts - 1))


def _search_docs(
    workspace: Workspace,
    arguments: dict[str, Any],
    policy: Policy,
    grants: Sequence[Grant],
    *,
    timeout: float = SCAN_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """The files are read in a child under the tool's timeout; the index is the console's."""

    def readable(path: str) -> bool:
        call = Call("readSource", "L1", "none", path)
        return decide(policy, call, grants).decision != "deny"

    return search_docs(workspace, arguments["query"], readable=readable, timeout=timeout)


# Tools with a half in the console's process (the database); their files are still read
# in a child under the deadline.
IN_PROCESS = {"searchDocs": _search_docs}
