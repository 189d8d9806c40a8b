"""Calling a tool of an MCP server with the official ``mcp`` SDK over stdio (SPEC T12).

The server's tools are in the same registry as the built-in ones (``policies.mcp_servers``
discovers them), and every call passes the six checks of ``policies.core.mcp_checks``
before the server hears of it, its paths resolved against the folder the server serves
(``server_root``), never the calling run's workspace by accident. A server is started per
call, in that folder, with a scrubbed environment, and stopped at the call's timeout.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any

import anyio

from policies.core.mcp_checks import McpRefusal, check_mcp_call, restricted
from policies.core.mcp_reach import ArgumentRefused, reach_paths
from policies.core.permissions import (
    LimitContext,
    Policy,
    Verdict,
    counted_keys,
    decide_paths,
    level_of,
    side_effect_of,
    within_limits,
)
from policies.mcp_servers import errlog, server_parameters, server_root, split_name
from policies.models import McpServer, ToolDefinition
from policies.paths import resolve_in_root, tree_entries
from policies.rate_limits import rate_exceeded, rate_release

from ..core.intake.boundaries import side_effect_outside
from .decide import Allowed, NeedsApproval, Refused
from .isolation import Stopped, stopped_reply, tool_in_flight, until_stopped


async def _call(server: McpServer, tool: str, arguments: dict[str, Any], cwd: str) -> Any:
    from mcp import ClientSession  # imported by the calls only: policies.mcp_servers says why
    from mcp.client.stdio import stdio_client

    with anyio.fail_after(server.timeout_sec):
        async with (
            stdio_client(server_parameters(server, cwd), errlog=errlog()) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool(tool, arguments)


def mcp_decide(
    *,
    definition: ToolDefinition,
    workspace: Any,
    arguments: dict[str, Any],
    policy: Policy,
    grants: Any,
    now: datetime,
    limits: LimitContext | None = None,
    task: Mapping[str, Any] | None = None,
    approved_by: Any = None,
) -> tuple[McpServer | None, Refused | NeedsApproval | Allowed]:
    """The six checks of SPEC T12, in order: server whitelisted, tool allowed, arguments
    within range (each declared in the tool's reach, each path resolved once against the
    server's root), then the task's boundaries (a read-only task uses no MCP tool with a
    side effect; a writing one, on a server that serves its workspace, changes only the
    files it names), approval needed (a policy's ask of an MCP call is refused: no person is
    asked; a whole-root tool its server sets to ask is), rate limit, change window. Every
    path is decided; the strictest verdict stands, then its rule's own window and rate
    (``limits``), as for a built-in tool."""
    server_name, tool = split_name(definition.name)
    server = McpServer.objects.filter(name=server_name).first()
    effect = side_effect_of(definition.side_effect)
    root = server_root(server, workspace.root) if server else str(workspace.root)
    config = server.as_config() if server else None
    one_name = config is not None and restricted(config)

    def resolve(value: Any) -> str:
        return resolve_in_root(root, value, one_name=one_name)

    def exists(path: str) -> bool:
        return os.path.lexists(os.path.join(os.path.realpath(root), path))

    try:
        named = reach_paths(definition.reach(), arguments, resolve, exists)
        resolved = [path for _, path in named]
    except ArgumentRefused:
        resolved = []  # check 3 refuses it, with the reason

    def boundary() -> str | None:
        if task is None:
            return None
        return _task_boundary(task, definition.name, effect, root, workspace.root, resolved)

    decided = [
        decide_paths(
            policy,
            definition.name,
            level_of(definition.permission_level),
            effect,
            resolved,
            list(grants or ()),
        )
    ]

    def decision() -> tuple[str, str]:
        if limits is not None:  # the rule's window and rate, for a call that got this far
            decided[0] = within_limits(policy, decided[0], limits)
        return decided[0].decision, decided[0].reason

    refusal = check_mcp_call(
        config,
        tool,
        arguments,
        reach=definition.reach(),
        decision=decision,
        # Only asked of a whitelisted server (check 1 refuses any other first).
        rate_exceeded=lambda limit: rate_exceeded(f"mcp:{server_name}", limit, now),
        now=now,
        server_name=server_name,
        resolve=resolve,
        entries=lambda path: tree_entries(root, path, one_name=one_name),
        exists=exists,
        changes=effect != "none",
        approved=approved_by is not None,
        boundary=boundary,
    )
    if refusal is not None:
        _give_back(refusal, decided[0], limits, config, server_name, now)
    return server, _outcome(decided[0], refusal, resolved)


def _give_back(
    refusal: McpRefusal,
    verdict: Verdict,
    limits: LimitContext | None,
    config: Any,
    server_name: str,
    now: datetime,
) -> None:
    """A refused call never ran: the rule's rate gets back what it counted, and so does
    the server's when its window refused a call its rate had counted."""
    if limits is not None and limits.rate_release is not None:
        for key in counted_keys(verdict):
            limits.rate_release(key)
    if refusal.check == "change_window" and config is not None and config.rate_limit_per_minute:
        rate_release(f"mcp:{server_name}", now)


def _task_boundary(
    task: Mapping[str, Any],
    tool: str,
    effect: str,
    root: str,
    workspace_root: Any,
    resolved: list[str],
) -> str | None:
    """The task's boundary over the paths as the workspace sees them, whatever folder the
    server serves: a path inside the workspace is checked, relative to it, against the
    write paths; one outside it is no file the task named, so a task that names its files
    may not change it. Asking only when the server's root was the workspace's let a server
    of its parent write ``workspace/AGENTS.md``."""
    real_root, real_workspace = os.path.realpath(root), os.path.realpath(workspace_root)
    inside, outside = [], []
    for path in resolved:
        full = os.path.normpath(os.path.join(real_root, path))
        if full == real_workspace or full.startswith(real_workspace.rstrip(os.sep) + os.sep):
            inside.append(os.path.relpath(full, real_workspace))
        else:
            outside.append(path)
    writes = (task.get("boundaries") or {}).get("write_paths")
    if outside and writes and effect != "none":
        return (
            f"{', '.join(outside)} is outside this task's workspace: it may change "
            f"{', '.join(writes)}"
        )
    return side_effect_outside(task, tool, effect, inside)


def _outcome(
    verdict: Verdict, refusal: McpRefusal | None, resolved: list[str]
) -> Refused | NeedsApproval | Allowed:
    """The checks' answer as the one door's values. An approval refusal of a call the
    policy allowed is a whole-root tool on a server set to ask: a person is asked."""
    rule, first = verdict.rule or "", (resolved[0] if resolved else "")
    if refusal is not None and refusal.check == "approval" and verdict.decision == "allow":
        asked = Verdict("ask", verdict.human_only, "whole-root", refusal.reason)
        return NeedsApproval(asked, tuple(resolved))
    if refusal is not None and refusal.check == "task_boundary":
        return Refused(f"deny: {refusal.reason}", "deny", "task-boundary", first)
    turned = [o for o in verdict.limits if o.turned is not None]
    if refusal is not None and refusal.check == "approval" and turned:
        # The rule's own window or rate turned the decision, not an approval setting.
        refused = f"{turned[-1].check}: {verdict.decision}: {verdict.reason}"
        return Refused(refused, verdict.decision, rule, first, verdict.human_only)
    if refusal is not None:
        refused = f"{refusal.check}: {refusal.reason}"
        decision = "deny" if refusal.check != "approval" else verdict.decision
        return Refused(refused, decision, rule, first, verdict.human_only)
    return Allowed(verdict.decision, rule, verdict.reason, tuple(resolved), verdict.human_only)


def mcp_call(
    *,
    server: McpServer,
    definition: ToolDefinition,
    arguments: dict[str, Any],
    workspace: Any,
    now: datetime,
) -> dict[str, Any]:
    """The call through the SDK, under the server's timeout; a failure is a tool error, and
    the reply keeps a request id for the call (SPEC T11)."""
    server_name, tool = split_name(definition.name)
    started_in = server_root(server, workspace.root)  # relative paths land where checked
    work = partial(_call, server, tool, arguments, started_in)
    try:  # registered in flight, so a cancel of the run stops it (``isolation.py``)
        with tool_in_flight() as flight:
            result = anyio.run(until_stopped, flight, work)
    except Stopped as stopped:
        return stopped_reply(str(stopped))
    except TimeoutError:
        return {
            "ok": False,
            "timed_out": True,
            "error": f"Timed out after {server.timeout_sec} s; the server was stopped.",
        }
    except Exception as error:  # the server crashed or spoke nonsense: a tool error
        return {
            "ok": False,
            "error": f"The MCP server failed: {type(error).__name__}: {error}",
        }
    text = "\n".join(getattr(item, "text", "") for item in result.content)
    if result.is_error:
        return {"ok": False, "error": text or "The MCP tool reported an error."}
    return {
        "ok": True,
        "content": text,
        "summary": f"{tool} on {server_name} answered.",
        "request_id": f"{server_name}:{tool}:{now.timestamp():.6f}",
    }


__all__ = ["mcp_call", "mcp_decide"]
