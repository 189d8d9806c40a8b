"""More of what an MCP server can reach (issue 16, SPEC T12, P2), found by review after
tests/test_mcp_reach.py: a revision that is a path, a git pathspec, a server narrowed by
its allowed paths alone, a folder moved whole, a server rooted above the workspace, and a
hard link. Same servers, same folder (the fixtures of tests/test_mcp_reach.py)."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from policies.core.mcp_checks import McpServerConfig, restricted
from policies.core.mcp_reach import ref_name_problem
from policies.models import ToolDefinition
from runs.tools.decide import Allowed, Refused
from runs.tools.mcp_client import mcp_decide
from tests import test_mcp_reach as base
from tests.test_mcp_reach import (
    EMPTY_TREE,
    FS_TOOLS,
    GIT_TOOLS,
    KEY,
    OPEN,
    assert_no_secret,
    call,
    server,
)

pytestmark = pytest.mark.django_db
served, fs, gitsrv = base.served, base.fs, base.gitsrv  # the same fixtures
CHANGED = "LOCAL CHANGE\n"


def _staged(root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(root), "diff", "--cached", "--name-only"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


@pytest.mark.parametrize(
    "ref",
    [".", "./", "notes/..", "notes/../secrets", "notes/../.env", "notes/./..", "secrets/.",
     "HEAD..notes/../.env", "main...secrets/.", ".env", "secrets", "notes", "secrets/key.txt"],
)  # fmt: skip
def test_a_revision_that_is_a_path_is_refused_not_skipped(gitsrv, served, workspace, ref):
    """The finding: ``git_checkout notes/../secrets`` (or ``.``) reverted forbidden files,
    its token skipped as no path. Not a ref name: refused; a ref name naming something on
    disk (``notes``, which holds links into secrets): checked like a tree."""
    (served / "secrets" / "key.txt").write_text(CHANGED)
    (served / ".env").write_text(CHANGED)
    for tool, key in (("git_checkout", "branch_name"), ("git_diff", "target")):
        record = call(workspace, "git", tool, {"repo_path": ".", key: ref})
        assert record.status == "refused", (tool, ref, record.status)
        assert_no_secret(record)
    assert (served / "secrets" / "key.txt").read_text() == CHANGED
    assert (served / ".env").read_text() == CHANGED


def test_ref_names_follow_gits_rules():
    for good in ("main", "HEAD", "HEAD~1", "HEAD^2", "v1^{commit}", "main@{1}", "@{-1}",
                 "feature/x", EMPTY_TREE, "@"):  # fmt: skip
        assert ref_name_problem(good) is None, good
    for bad in (".", "notes/", "/secrets", "a/.b", "a//b", "x.lock", "x.", "-x", "a{b"):
        assert ref_name_problem(bad), bad


def test_a_plain_branch_still_checks_out(gitsrv, served, workspace):
    record = call(workspace, "git", "git_checkout", {"repo_path": ".", "branch_name": "main"})
    assert record.status == "ok", record.error


PATHSPECS = ["*", ":/", ":(glob)secrets/*", ":(top)secrets", "secret?", "[s]ecrets", "notes/*"]


@pytest.mark.parametrize("spec", PATHSPECS)
def test_a_pathspec_is_no_path(gitsrv, fs, served, workspace, spec):
    """The finding: ``git_add ["*"]`` staged secrets/key.txt, the ``*`` taken as a file."""
    (served / "secrets" / "key.txt").write_text(CHANGED)
    record = call(workspace, "git", "git_add", {"repo_path": ".", "files": [spec]})
    assert record.status == "refused" and "plain path" in record.error, record.error
    assert "secrets/key.txt" not in _staged(served)
    for tool, arguments in (
        ("read_file", {"path": spec}),
        ("list_directory", {"path": spec}),
        ("search_files", {"path": spec, "pattern": "KEY"}),
        ("move_file", {"source": spec, "destination": "notes/x"}),
    ):
        record = call(workspace, "fs", tool, arguments)
        assert record.status == "refused" and "plain path" in record.error, (tool, spec)


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("git_diff", {"repo_path": "notes", "target": EMPTY_TREE}),
        ("git_show", {"repo_path": "notes", "revision": "HEAD~1"}),
        ("git_log", {"repo_path": "notes"}),
    ],
)
def test_whole_root_tools_see_a_server_narrowed_by_allowed_paths(
    served, workspace, tool, arguments
):
    """The finding: allowed ``notes/**`` and nothing forbidden let git_diff against the
    empty tree return .env and secrets/key.txt."""
    server("narrow", ["git", "--repository", str(served)], GIT_TOOLS,
           allowed_paths=["notes/**"], forbidden_paths=[])  # fmt: skip
    record = call(workspace, "narrow", tool, arguments)
    assert record.status == "refused", (record.status, record.error)
    assert "any file" in record.error
    assert_no_secret(record)


def test_a_server_is_restricted_unless_it_allows_the_whole_root_and_forbids_nothing():
    def config(allowed: tuple[str, ...], forbidden: tuple[str, ...] = ()) -> McpServerConfig:
        return McpServerConfig("s", True, frozenset(), allowed, forbidden)

    assert not restricted(config(("**",)))
    assert restricted(config(("**",), ("secrets/**",)))
    assert restricted(config(("notes/**",)))
    assert restricted(config(("**", "notes/**")))
    assert restricted(config(()))


@pytest.fixture
def private(served: Path) -> Path:
    (served / "notes" / "private").mkdir()
    (served / "notes" / "private" / "p.txt").write_text(KEY + "\n")
    server("fs2", ["fs", str(served)], FS_TOOLS, forbidden_paths=["notes/private/**"])
    server("git2", ["git", "--repository", str(served)], GIT_TOOLS,
           forbidden_paths=["notes/private/**"])  # fmt: skip
    return served


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("move_file", {"source": "notes", "destination": "open"}),
        ("move_file", {"source": "./notes/", "destination": "open"}),
        ("move_file", {"source": "notes/.", "destination": "notes2"}),
    ],
)
def test_a_folder_a_tool_changes_is_checked_whole(private, workspace, tool, arguments):
    """The finding: moving ``notes`` moved ``notes/private`` out from under its glob."""
    record = call(workspace, "fs2", tool, arguments)
    assert record.status == "refused" and "notes/private" in record.error, record.error
    assert (private / "notes" / "private" / "p.txt").exists()
    for path in ("open/private/p.txt", "notes2/private/p.txt"):
        after = call(workspace, "fs2", "read_file", {"path": path})
        assert KEY not in json.dumps(after.output)


def test_a_folder_with_nothing_forbidden_still_moves(private, workspace):
    (private / "docs").mkdir()
    (private / "docs" / "d.md").write_text("d\n")
    record = call(workspace, "fs2", "move_file", {"source": "docs", "destination": "docs2"})
    assert record.status == "ok", record.error
    listed = call(workspace, "fs2", "list_directory", {"path": "notes"})  # names only
    assert listed.status == "ok", listed.error


def _decide(workspace, name: str, tool: str, arguments: dict, task: dict):
    definition = ToolDefinition.objects.get(name=f"mcp:{name}:{tool}")
    return mcp_decide(
        definition=definition, workspace=workspace, arguments=arguments, policy=OPEN,
        grants=(), now=datetime.now(UTC), task=task,
    )[1]  # fmt: skip


def test_the_task_boundary_holds_on_a_server_rooted_above_the_workspace(workspace):
    """The finding: a server of the workspace's parent wrote ``workspace/AGENTS.md`` in a
    task that may change docs/a.md only: the boundary was asked only when the roots were
    equal. Paths are now mapped to the workspace, or refused outside it."""
    parent, here = workspace.root_path.parent, workspace.root_path.name
    (parent / "elsewhere").mkdir()
    server("fsp", ["fs", str(parent)], FS_TOOLS, forbidden_paths=[])
    task = {"intent": "doc_update", "boundaries": {"write_paths": ["docs/a.md"]}}
    for tool, arguments in (
        ("write_file", {"path": f"{here}/AGENTS.md", "content": "owned"}),
        ("write_file", {"path": "elsewhere/x.md", "content": "x"}),
        ("write_file", {"path": str(workspace.root_path / "AGENTS.md"), "content": "owned"}),
        ("move_file", {"source": f"{here}/docs/a.md", "destination": f"{here}/AGENTS.md"}),
        ("move_file", {"source": f"{here}/AGENTS.md", "destination": "elsewhere/a.md"}),
    ):
        decided = _decide(workspace, "fsp", tool, arguments, task)
        assert isinstance(decided, Refused) and decided.rule == "task-boundary", (tool, arguments)
    decided = _decide(workspace, "fsp", "write_file",
                      {"path": f"{here}/docs/a.md", "content": "ok"}, task)  # fmt: skip
    assert isinstance(decided, Allowed), decided
    reading = _decide(workspace, "fsp", "read_file", {"path": "elsewhere"}, task)
    assert isinstance(reading, Allowed), reading


@pytest.fixture
def hard_link(served: Path) -> Path:
    (served / "open").mkdir()  # no symbolic links in it: only the hard one is in question
    os.link(served / "secrets" / "key.txt", served / "open" / "hl.txt")
    return served


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("read_file", {"path": "open/hl.txt"}),
        ("read_multiple_files", {"paths": ["notes/a.md", "open/hl.txt"]}),
        ("directory_tree", {"path": "open"}),
        ("search_files", {"path": "open", "pattern": "KEY"}),
        ("move_file", {"source": "open/hl.txt", "destination": "open/b.txt"}),
        ("write_file", {"path": "open/hl.txt", "content": "x"}),
    ],
)
def test_a_hard_link_on_a_restricted_server_is_refused(fs, hard_link, workspace, tool, arguments):
    """The finding: a hard link in notes to secrets/key.txt read the secret (here in open,
    a folder without symbolic links); no glob sees which name is the forbidden one."""
    record = call(workspace, "fs", tool, arguments)
    assert record.status == "refused" and "hard links" in record.error, record.error
    assert_no_secret(record)


def test_a_hard_link_through_git_is_refused(gitsrv, hard_link, workspace):
    record = call(workspace, "git", "git_add", {"repo_path": ".", "files": ["open"]})
    assert record.status == "refused" and "hard links" in record.error, record.error
    assert "open/hl.txt" not in _staged(hard_link)


def test_a_hard_link_on_an_unrestricted_server_is_read(hard_link, workspace):
    server("open", ["fs", str(hard_link)], FS_TOOLS, forbidden_paths=[])
    record = call(workspace, "open", "read_file", {"path": "open/hl.txt"})
    assert record.status == "ok", record.error
