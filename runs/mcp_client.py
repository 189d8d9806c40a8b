"""MCP servers reached with the official ``mcp`` SDK over stdio (SPEC T12).

Their tools enter the same registry as the built-in ones (``mcp:<server>:<tool>``) and
every call passes the six checks of ``policies.core.mcp_checks`` before the server hears
of it. A server is started per call, in the workspace, with a scrubbed environment, and
stopped at the call's timeout.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from datetime import datetime
from typing import Any, TextIO

import anyio
from django.core.cache import cache
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from policies.core.mcp_checks import check_mcp_call, path_arguments
from policies.core.paths import PathRefused
from policies.core.permissions import Grant, Policy, decide_paths
from policies.core.tool_specs import MAX_DESCRIPTION
from policies.models import McpServer, ToolDefinition
from policies.paths import resolve_in_workspace

from .tools.isolation import scrubbed_env

PREFIX = "mcp"


def registry_name(server: str, tool: str) -> str:
    return f"{PREFIX}:{server}:{tool}"


def split_name(name: str) -> tuple[str, str]:
    _, server, tool = name.split(":", 2)
    return server, tool


def _parameters(server: McpServer, cwd: str | None) -> StdioServerParameters:
    env = scrubbed_env()
    env.pop("PYTHONPATH", None)
    return StdioServerParameters(command=server.command, args=list(server.args), env=env, cwd=cwd)


def _errlog() -> TextIO:
    """Where the server's stderr goes: the process's real stderr. The SDK's default is the
    ``sys.stderr`` of the moment it was imported, which inside a Celery worker is a logging
    proxy with no file descriptor, so every call there failed before the server started."""
    stream = sys.__stderr__
    try:
        if stream is not None:
            stream.fileno()
            return stream
    except (OSError, ValueError):
        pass
    return _devnull()


@functools.cache
def _devnull() -> TextIO:
    return open(os.devnull, "w")  # one for the process, never closed


async def _list_tools(server: McpServer) -> list[Any]:
    with anyio.fail_after(server.timeout_sec):
        async with (
            stdio_client(_parameters(server, None), errlog=_errlog()) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return list((await session.list_tools()).tools)


def mcp_discover(server: McpServer) -> list[str]:
    """Put the server's new tools in the registry and refresh the descriptions and schemas
    of known ones; tools it no longer offers are disabled. Never re-enables a tool."""
    tools = anyio.run(_list_tools, server)
    names = []
    for tool in tools:
        name = registry_name(server.name, tool.name)
        description = (tool.description or tool.name).strip()
        if len(description) > MAX_DESCRIPTION:
            description = description[: MAX_DESCRIPTION - 1] + "…"
        existing = ToolDefinition.objects.filter(name=name).first()
        if existing is None:
            ToolDefinition.objects.create(
                name=name,
                description=description,
                input_schema=tool.input_schema,
                permission_level=server.permission_level,
                side_effect="external_api",
                timeout_sec=server.timeout_sec,
                source="mcp",
                enabled=True,
            )
        else:  # an admin's choices (enabled, level, side effect, timeout) are kept
            existing.description, existing.input_schema = description, tool.input_schema
            existing.save(update_fields=["description", "input_schema"])
        names.append(name)
    ToolDefinition.objects.filter(name__startswith=f"{PREFIX}:{server.name}:").exclude(
        name__in=names
    ).update(enabled=False)
    return names


async def _call(server: McpServer, tool: str, arguments: dict[str, Any], cwd: str) -> Any:
    with anyio.fail_after(server.timeout_sec):
        async with (
            stdio_client(_parameters(server, cwd), errlog=_errlog()) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool(tool, arguments)


def _count_this_minute(server: McpServer, now: datetime) -> int:
    """The calls in the last sixty seconds before this one, shared by every process
    through the cache: this minute's count plus the previous minute's weighted by how much
    of it the last sixty seconds still cover (a sliding window). Counting calendar minutes
    alone let twice the limit through across a minute's turn, a burst the eval set's
    rate-limit case caught when its calls straddled one."""
    minutes = now.timestamp() / 60
    window = math.floor(minutes)
    key = f"mcp-rate:{server.name}:{window}"
    cache.add(key, 0, timeout=180)
    try:
        current = cache.incr(key) - 1  # the calls before this one
    except ValueError:  # evicted between add and incr: count this call as the first
        cache.set(key, 1, timeout=180)
        current = 0
    previous = cache.get(f"mcp-rate:{server.name}:{window - 1}") or 0
    return current + math.ceil(previous * (1 - (minutes - window)))


def mcp_run(
    *,
    definition: ToolDefinition,
    workspace: Any,
    arguments: dict[str, Any],
    policy: Policy,
    grants: Any,
    now: datetime,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(decision facts, reply): the six checks, then the call; a refusal is a reply too."""
    server_name, tool = split_name(definition.name)
    server = McpServer.objects.filter(name=server_name).first()

    def resolve(value: Any) -> str:
        return resolve_in_workspace(workspace.root, value).relative

    resolved: list[str] = []
    for value in path_arguments(arguments):
        with contextlib.suppress(PathRefused):  # check 3 refuses it, with the reason
            resolved.append(resolve(value))
    # Every path is decided; the strictest verdict stands (a rename into .env is a deny).
    verdict = decide_paths(
        policy,
        definition.name,
        definition.permission_level,
        definition.side_effect,
        resolved,
        list(grants or ()),
    )
    first = resolved[0] if resolved else None
    facts = {
        "decision": verdict.decision,
        "rule": verdict.rule or "",
        "reason": verdict.reason,
        "human_only": verdict.human_only,
        "path": first or "",
    }
    refusal = check_mcp_call(
        server.as_config() if server else None,
        tool,
        arguments,
        decision=verdict.decision,
        decision_reason=verdict.reason,
        calls_this_minute=lambda: _count_this_minute(server, now),
        now=now,
        server_name=server_name,
        resolve=resolve,
    )
    if refusal is not None:
        facts["refused"] = f"{refusal.check}: {refusal.reason}"
        return facts, {}
    try:
        result = anyio.run(_call, server, tool, arguments, str(workspace.root))
    except TimeoutError:
        return facts, {
            "ok": False,
            "timed_out": True,
            "error": f"Timed out after {server.timeout_sec} s; the server was stopped.",
        }
    except Exception as error:  # the server crashed or spoke nonsense: a tool error
        return facts, {
            "ok": False,
            "error": f"The MCP server failed: {type(error).__name__}: {error}",
        }
    text = "\n".join(getattr(item, "text", "") for item in result.content)
    if result.is_error:
        return facts, {"ok": False, "error": text or "The MCP tool reported an error."}
    return facts, {
        "ok": True,
        "content": text,
        "summary": f"{tool} on {server_name} answered.",
        "request_id": f"{server_name}:{tool}:{now.timestamp():.6f}",
    }


__all__ = ["Grant", "mcp_discover", "mcp_run", "registry_name"]
