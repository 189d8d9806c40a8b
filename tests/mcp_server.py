"""A real MCP server, written with the official SDK, for the MCP tests (stdio)."""

from __future__ import annotations

from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")


@server.tool()
def read_note(path: str) -> str:
    """Read a note of the workspace."""
    return Path(path).read_text()


@server.tool()
def write_note(path: str, text: str) -> str:
    """Write a note."""
    Path(path).write_text(text)
    return f"wrote {path}"


@server.tool()
def wipe() -> str:
    """Delete every note (never allowed)."""
    return "wiped"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise RuntimeError("the note store is down")


if __name__ == "__main__":
    server.run()
