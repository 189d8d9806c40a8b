"""Whitelisted MCP servers as configuration (SPEC T12): how one is started, and what its tools
are. Discovering them puts each tool in the registry (``mcp:<server>:<tool>``) for admins
to enable; calling one is the run's business (``runs.tools.mcp_client``)."""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, TextIO

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from harness_console.child_env import scrubbed_env

from .core.tool_specs import MAX_DESCRIPTION
from .models import McpServer, ToolDefinition

PREFIX = "mcp"


def registry_name(server: str, tool: str) -> str:
    return f"{PREFIX}:{server}:{tool}"


def split_name(name: str) -> tuple[str, str]:
    _, server, tool = name.split(":", 2)
    return server, tool


def server_parameters(server: McpServer, cwd: str | None) -> StdioServerParameters:
    env = scrubbed_env()
    env.pop("PYTHONPATH", None)
    return StdioServerParameters(command=server.command, args=list(server.args), env=env, cwd=cwd)


def errlog() -> TextIO:
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
            stdio_client(server_parameters(server, None), errlog=errlog()) as (read, write),
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
                for_evals=server.for_evals,
            )
        else:  # an admin's choices (enabled, level, side effect, timeout) are kept
            existing.description, existing.input_schema = description, tool.input_schema
            existing.save(update_fields=["description", "input_schema"])
        names.append(name)
    ToolDefinition.objects.filter(name__startswith=f"{PREFIX}:{server.name}:").exclude(
        name__in=names
    ).update(enabled=False)
    return names
