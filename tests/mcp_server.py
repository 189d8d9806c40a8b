"""Real MCP servers, written with the official SDK, for the MCP tests (stdio).

- ``mcp_server.py``: the note store, served from the folder it is started in.
- ``mcp_server.py fs DIR``: a filesystem-like server bound to DIR, as the official one is:
  relative paths land in DIR, absolute ones are taken as they are, links are followed, and
  it knows nothing of forbidden paths (the console's job).
- ``mcp_server.py linger``: a server whose tool leaves a ``setsid`` daemon behind.
- ``mcp_server.py git --repository DIR``: a git-like server on the repository DIR, whose
  content tools take revisions (``HEAD:.env``) and run the real ``git``.

Each trusts the console completely, as a careless real server would: whatever the
console lets through is really read or written, so a test sees any leak.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

READS = ToolAnnotations(read_only_hint=True)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True)


def notes_server() -> MCPServer:
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

    return server


def fs_server(root: Path) -> MCPServer:
    server = MCPServer("fs")

    def at(path: str) -> Path:
        return (root / path).resolve()  # absolute paths replace root, as in os.path.join

    @server.tool(annotations=READS)
    def read_file(path: str) -> str:
        """Read a file."""
        return at(path).read_text()

    @server.tool(annotations=READS)
    def read_multiple_files(paths: list[str]) -> str:
        """Read several files."""
        return "\n".join(at(p).read_text() for p in paths)

    @server.tool(annotations=READS)
    def list_directory(path: str) -> str:
        """List a folder."""
        return "\n".join(sorted(p.name for p in at(path).iterdir()))

    @server.tool(annotations=READS)
    def directory_tree(path: str) -> str:
        """Every file under a folder, with its first line."""
        files = sorted(p for p in at(path).rglob("*") if p.is_file())
        return "\n".join(f"{p}: {p.read_text().splitlines()[:1]}" for p in files)

    @server.tool(annotations=READS)
    def search_files(path: str, pattern: str) -> str:
        """Files under a folder whose text contains the pattern, with the matching lines."""
        hits = []
        for p in sorted(at(path).rglob("*")):
            if p.is_file():
                hits += [f"{p}: {line}" for line in p.read_text().splitlines() if pattern in line]
        return "\n".join(hits)

    @server.tool(annotations=WRITES)
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        at(path).write_text(content)
        return f"wrote {path}"

    @server.tool(annotations=WRITES)
    def move_file(source: str, destination: str) -> str:
        """Move a file."""
        at(source).rename(at(destination))
        return f"moved {source}"

    return server


def git_server(repository: Path) -> MCPServer:
    server = MCPServer("git")

    def git(repo_path: str, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repository / repo_path), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout + done.stderr

    @server.tool(annotations=READS)
    def git_status(repo_path: str) -> str:
        """The working tree's status."""
        return git(repo_path, "status", "--short")

    @server.tool(annotations=READS)
    def git_show(repo_path: str, revision: str) -> str:
        """Show a revision (a commit, or rev:path for a file's contents)."""
        return git(repo_path, "show", revision)

    @server.tool(annotations=READS)
    def git_diff(repo_path: str, target: str) -> str:
        """The differences between the working tree and a target revision."""
        return git(repo_path, "diff", target)

    @server.tool(annotations=READS)
    def git_log(repo_path: str, max_count: int = 10) -> str:
        """The commit log, with patches."""
        return git(repo_path, "log", "-p", f"--max-count={max_count}")

    @server.tool(annotations=WRITES)
    def git_add(repo_path: str, files: list[str]) -> str:
        """Stage files."""
        return git(repo_path, "add", *files)

    @server.tool(annotations=WRITES)
    def git_commit(repo_path: str, message: str) -> str:
        """Commit what is staged."""
        return git(repo_path, "commit", "-m", message)

    @server.tool(annotations=WRITES)
    def git_checkout(repo_path: str, branch_name: str) -> str:
        """Check a branch out."""
        return git(repo_path, "checkout", branch_name)

    return server


def lingering_server() -> MCPServer:
    """A server whose tool leaves a daemon in a session of its own behind: ``sleep N``."""
    server = MCPServer("lingering")

    @server.tool(annotations=READS)
    def leave_daemon(seconds: int) -> str:
        """Start a background sleep that outlives this call."""
        subprocess.Popen(
            ["setsid", "sleep", str(seconds)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return "left a daemon"

    return server


def main(argv: list[str]) -> None:
    if argv[:1] == ["fs"]:
        fs_server(Path(argv[1])).run()
    elif argv[:1] == ["linger"]:
        lingering_server().run()
    elif argv[:1] == ["git"]:
        git_server(Path(argv[argv.index("--repository") + 1])).run()
    else:
        notes_server().run()


if __name__ == "__main__":
    main(sys.argv[1:])
