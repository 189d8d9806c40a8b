"""Whitelisted MCP servers as configuration (SPEC T12): how one is started, and what its tools
are. Discovering them puts each tool in the registry (``mcp:<server>:<tool>``) for admins
to enable; calling one is the run's business (``runs.tools.mcp_client``).

The SDK is imported where a server is started, not with this module: its import costs
about 0.8 s of CPU, and the admin (which every process of the console loads as Django
starts) reaches this module."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from harness_console import mcp_supervisor
from harness_console.child_env import scrubbed_env

from .config_stamp import config_changed
from .core.mcp_reach import reach_from_schema, root_from_args
from .core.tool_specs import MAX_DESCRIPTION
from .models import McpServer, ToolDefinition

if TYPE_CHECKING:
    from mcp import StdioServerParameters

PREFIX = "mcp"


def registry_name(server: str, tool: str) -> str:
    return f"{PREFIX}:{server}:{tool}"


def split_name(name: str) -> tuple[str, str]:
    _, server, tool = name.split(":", 2)
    return server, tool


SUPERVISOR = str(Path(mcp_supervisor.__file__).resolve())
DEADLINE_GRACE_SECONDS = 5.0


def server_parameters(server: McpServer, cwd: str | None) -> StdioServerParameters:
    """How a server is started, for a call and for discovery alike: its command under the
    supervisor (``harness_console/mcp_supervisor.py``), so that whatever it leaves running
    ends with it, in a scrubbed environment."""
    from mcp import StdioServerParameters

    env = scrubbed_env()
    env.pop("PYTHONPATH", None)
    return StdioServerParameters(
        command=sys.executable,
        # The supervisor keeps the call's deadline itself, a little after the SDK's own:
        # a server outlives it not even while its worker is frozen.
        args=[
            SUPERVISOR,
            "--deadline",
            str(float(server.timeout_sec) + DEADLINE_GRACE_SECONDS),
            server.command,
            *[str(arg) for arg in server.args],
        ],
        env=env,
        cwd=cwd,
    )


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


def server_root(server: McpServer, started_in: str | os.PathLike[str]) -> str:
    """The folder the server serves, against which its paths are resolved and its globs
    matched: the admin's ``root``, else its launch arguments (``--repository``, the first
    absolute folder), else the folder it is started in. Never the calling run's workspace
    by accident: only a server that names no folder of its own serves the one it is
    started in."""
    if server.root:
        return server.root
    found = root_from_args([str(a) for a in server.args or ()], os.path.isdir)
    return found if found else os.fspath(started_in)


def _annotations(tool: Any) -> dict[str, Any]:
    """The server's hints as MCP names them (readOnlyHint, destructiveHint, ...)."""
    hints = getattr(tool, "annotations", None)
    if hints is None:
        return {}
    return hints.model_dump(by_alias=True, exclude_none=True)


def _side_effect(annotations: dict[str, Any]) -> str:
    """A tool the server marks read-only has no side effect; any other may write (MCP's
    own default: not read-only, destructive). An admin may say otherwise."""
    return "none" if annotations.get("readOnlyHint") is True else "external_api"


async def _list_tools(server: McpServer) -> list[Any]:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    with anyio.fail_after(server.timeout_sec):
        async with (
            stdio_client(server_parameters(server, None), errlog=errlog()) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return list((await session.list_tools()).tools)


def mcp_tools_list(server: McpServer) -> list[Any]:
    """The tools the server offers, as it says when started as every call starts it."""
    return anyio.run(_list_tools, server)


def mcp_discover(server: McpServer, tools: list[Any] | None = None) -> list[str]:
    """Put the server's new tools in the registry and refresh the descriptions, schemas
    and hints of known ones; tools it no longer offers are disabled. Never re-enables a
    tool. Each tool's reach (argument kinds, whole-root) is prefilled from its schema; an
    admin's kinds are kept, and so are their side effect, level and timeout. ``tools``:
    what :func:`mcp_tools_list` said of a server started the same way (the eval set's
    cases each name their own copy of one script); else the server is started and asked."""
    if tools is None:
        tools = mcp_tools_list(server)
    names = []
    for tool in tools:
        name = registry_name(server.name, tool.name)
        description = (tool.description or tool.name).strip()
        if len(description) > MAX_DESCRIPTION:
            description = description[: MAX_DESCRIPTION - 1] + "…"
        annotations = _annotations(tool)
        existing = ToolDefinition.objects.filter(name=name).first()
        if existing is None:
            reach = reach_from_schema(tool.name, tool.input_schema)
            ToolDefinition.objects.create(
                name=name,
                description=description,
                input_schema=tool.input_schema,
                permission_level=server.permission_level,
                side_effect=_side_effect(annotations),
                timeout_sec=server.timeout_sec,
                source="mcp",
                enabled=True,
                for_evals=server.for_evals,
                argument_kinds=dict(reach.arguments),
                whole_root=reach.whole_root,
                annotations=annotations,
            )
        else:
            _refresh(existing, tool, description, annotations)
        names.append(name)
    ToolDefinition.objects.filter(name__startswith=f"{PREFIX}:{server.name}:").exclude(
        name__in=names
    ).update(enabled=False)
    config_changed()
    return names


def _refresh(existing: ToolDefinition, tool: Any, description: str, hints: dict[str, Any]) -> None:
    """A known tool's description, schema and hints, afresh. An admin's choices (enabled,
    level, side effect, timeout, argument kinds) are kept; a row from before reaches or
    hints were recorded gets the prefill for what it never had."""
    declared = existing.argument_kinds or {}
    first_hints = not existing.annotations and bool(hints)
    reach = reach_from_schema(tool.name, tool.input_schema, declared)
    existing.description, existing.input_schema = description, tool.input_schema
    existing.annotations, existing.argument_kinds = hints, dict(reach.arguments)
    if not declared:
        existing.whole_root = reach.whole_root
    if first_hints:
        existing.side_effect = _side_effect(hints)
    existing.save(
        update_fields=[
            "description",
            "input_schema",
            "annotations",
            "argument_kinds",
            "whole_root",
            "side_effect",
        ]
    )
