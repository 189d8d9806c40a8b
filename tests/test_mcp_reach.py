"""An MCP server is bound to the folder it serves (issue 16, SPEC T12, P2): a filesystem-like
and a git-like server (tests/mcp_server.py, real SDK over stdio, real git) with forbidden
paths, driven through every tool they offer with hostile arguments. Each call is refused
(or asked), and no secret reaches the record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from policies.core.permissions import Policy, Rule
from policies.mcp_servers import mcp_discover
from policies.models import McpServer, ToolDefinition
from runs.models import ToolCall
from runs.tools.call import tool_call_run

pytestmark = pytest.mark.django_db
OPEN = Policy("open", "L3", (Rule("all", "*", "allow"),))
SCRIPT = str(Path(__file__).parent / "mcp_server.py")
KEY, ENV, GITCONFIG, OUTSIDE = "KEY-0f9a1c", "ENV-7d3b2e", "GITCONFIG-5a8e", "OUTSIDE-99b1"
SECRETS = (KEY, ENV, GITCONFIG, OUTSIDE)
FORBIDDEN = ["secrets/**", "**/.env", ".git/**"]
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
FS_TOOLS = [
    "read_file",
    "read_multiple_files",
    "list_directory",
    "directory_tree",
    "search_files",
    "write_file",
    "move_file",
]
GIT_TOOLS = [
    "git_status",
    "git_show",
    "git_diff",
    "git_log",
    "git_add",
    "git_commit",
    "git_checkout",
]


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def served(tmp_path: Path) -> Path:
    """The folder the servers serve, not the workspace: a repository whose history holds
    the secrets, and links from its notes into the forbidden areas and out of it."""
    root = tmp_path / "served"
    (root / "notes").mkdir(parents=True)
    (root / "secrets").mkdir()
    (root / "notes" / "a.md").write_text("hello notes\n")
    (root / "secrets" / "key.txt").write_text(KEY + "\n")
    (root / ".env").write_text(f"TOKEN={ENV}\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.invalid")
    git(root, "config", "user.name", "T")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "secrets and notes")
    (root / "notes" / "a.md").write_text("hello notes, again\n")
    git(root, "commit", "-q", "-am", "second")
    git(root, "config", "harness.token", GITCONFIG)
    (tmp_path / "outside.txt").write_text(OUTSIDE + "\n")
    os.symlink("../secrets/key.txt", root / "notes" / "key")
    os.symlink("../.git/config", root / "notes" / "gitconfig")
    os.symlink("../secrets", root / "notes" / "secrets-dir")
    os.symlink(tmp_path / "outside.txt", root / "notes" / "out")
    return root


def server(name: str, args: list[str], tools: list[str], **fields) -> McpServer:
    defaults = {"allowed_paths": ["**"], "forbidden_paths": FORBIDDEN}
    row = McpServer.objects.create(
        name=name,
        command=sys.executable,
        args=[SCRIPT, *args],
        allowed_tools=tools,
        **{**defaults, **fields},
    )
    mcp_discover(row)
    return row


@pytest.fixture
def fs(served: Path) -> McpServer:
    return server("fs", ["fs", str(served)], FS_TOOLS)


@pytest.fixture
def gitsrv(served: Path) -> McpServer:
    return server("git", ["git", "--repository", str(served)], GIT_TOOLS)


@pytest.fixture
def demo(workspace, served: Path):
    """The calling run's workspace, with links of its own into the served folder: none of
    them may decide what the server's paths mean."""
    os.symlink(served / "secrets" / "key.txt", workspace.root_path / "link.txt")
    (workspace.root_path / "notes").mkdir()
    os.symlink(served / "secrets" / "key.txt", workspace.root_path / "notes" / "key")
    return workspace


def call(workspace, server: str, tool: str, arguments: dict, policy: Policy = OPEN) -> ToolCall:
    return tool_call_run(
        workspace=workspace, tool=f"mcp:{server}:{tool}", arguments=arguments, policy=policy
    )


def assert_no_secret(record: ToolCall) -> None:
    stored = json.dumps(list(ToolCall.objects.filter(pk=record.pk).values()), default=str)
    for secret in SECRETS:
        assert secret not in stored, f"{secret} is in the record of {record.tool}"


def hostile_paths(root: Path) -> list[str]:
    return [
        "secrets/key.txt",
        "Secrets/Key.txt",
        "secrets",
        "secrets/",
        "./secrets",
        ".env",
        "./.env",
        "notes/../.env",
        "notes/key",  # a link in the served folder into a forbidden one
        "notes/gitconfig",
        "notes/secrets-dir/key.txt",
        "notes/secrets-dir",
        "notes/out",  # a link out of the served folder
        ".git/config",
        ".git",
        str(root / "secrets" / "key.txt"),
        str(root / ".env"),
        str(root / "notes" / "key"),
        str(root.parent / "outside.txt"),
        "/etc/passwd",
        "~/.ssh/id_rsa",
        "../outside.txt",
        "-rf",
        "file:///etc/passwd",
        f"file://{root}/secrets/key.txt",
        "HEAD:.env",
    ]


def hostile_fs(root: Path) -> list[tuple[str, dict]]:
    cases: list[tuple[str, dict]] = []
    for p in hostile_paths(root):
        cases += [
            ("read_file", {"path": p}),
            ("read_multiple_files", {"paths": ["notes/a.md", p]}),
            ("list_directory", {"path": p}),
            ("directory_tree", {"path": p}),
            ("search_files", {"path": p, "pattern": "TOKEN"}),
            ("write_file", {"path": p, "content": "overwritten"}),
            ("move_file", {"source": p, "destination": "notes/stolen.txt"}),
            ("move_file", {"source": "notes/a.md", "destination": p}),
        ]
    for tree in (".", str(root), "notes", "./notes"):  # every tree holds a forbidden path
        cases += [
            ("directory_tree", {"path": tree}),
            ("search_files", {"path": tree, "pattern": "KEY"}),
        ]
    cases += [
        ("read_file", {"path": "notes/a.md", "encoding": "utf-8"}),  # unknown argument
        ("write_file", {"path": "notes/b.md", "content": "x", "mode": "a"}),
        ("read_multiple_files", {"paths": "secrets/key.txt"}),
        ("read_multiple_files", {"paths": [["secrets/key.txt"]]}),
    ]
    return cases


def hostile_git(root: Path) -> list[tuple[str, dict]]:
    cases: list[tuple[str, dict]] = []
    for repo in (".git", "secrets", "notes/secrets-dir", "/etc", "..", str(root.parent), "-C"):
        for tool in GIT_TOOLS:
            cases.append((tool, {"repo_path": repo, **_git_extra(tool)}))
    for revision in (
        "HEAD:.env",
        "HEAD~1:secrets/key.txt",
        "HEAD^:secrets/key.txt",
        ":0:.env",
        ":.env",
        "main:./.env",
        "HEAD:notes/../.env",
        "HEAD:",
        "HEAD",
        "HEAD -- secrets/key.txt",
        "HEAD -- .env",
        "--output=/tmp/x",
        "-p",
        "secrets/key.txt",
        ".env",
        EMPTY_TREE,
        f"{EMPTY_TREE}..HEAD",
    ):
        cases.append(("git_show", {"repo_path": ".", "revision": revision}))
        cases.append(("git_diff", {"repo_path": ".", "target": revision}))
        if revision not in ("HEAD", "HEAD:", EMPTY_TREE) and not revision.startswith(EMPTY_TREE):
            cases.append(("git_checkout", {"repo_path": ".", "branch_name": revision}))
    cases += [
        ("git_log", {"repo_path": "."}),
        ("git_log", {"repo_path": str(root), "max_count": 50}),
        ("git_status", {"repo_path": ".", "porcelain": True}),  # unknown argument
        ("git_commit", {"repo_path": ".", "message": "m", "amend": True}),
        ("git_checkout", {"repo_path": ".", "branch_name": "--", "paths": ["secrets"]}),
    ]
    for files in (
        ["secrets/key.txt"],
        [".env"],
        ["notes/key"],
        ["."],
        ["notes", "secrets"],
        ["-f", "secrets"],
        ["--", ".env"],
        [str(root)],
    ):
        cases.append(("git_add", {"repo_path": ".", "files": files}))
    return cases


def _git_extra(tool: str) -> dict:
    return {
        "git_show": {"revision": "HEAD"},
        "git_diff": {"target": "HEAD"},
        "git_add": {"files": ["notes/a.md"]},
        "git_commit": {"message": "m"},
        "git_checkout": {"branch_name": "main"},
    }.get(tool, {})


def test_every_fs_tool_is_driven_with_every_hostile_path(fs, demo, served):
    cases = hostile_fs(served)
    assert {tool for tool, _ in cases} == set(FS_TOOLS)
    passed = []
    for tool, arguments in cases:
        record = call(demo, "fs", tool, arguments)
        assert_no_secret(record)
        if record.status != "refused":
            passed.append((tool, arguments, record.status))
    assert passed == []
    assert (served / "secrets" / "key.txt").read_text() == KEY + "\n"  # nothing moved
    assert (served / ".env").read_text() == f"TOKEN={ENV}\n"


def test_every_git_tool_is_driven_with_every_hostile_revision(gitsrv, demo, served):
    cases = hostile_git(served)
    assert {tool for tool, _ in cases} == set(GIT_TOOLS)
    passed = []
    for tool, arguments in cases:
        record = call(demo, "git", tool, arguments)
        assert_no_secret(record)
        if record.status != "refused":
            passed.append((tool, arguments, record.status))
    assert passed == []


def test_a_link_in_the_served_folder_is_resolved_against_that_folder(fs, demo):
    """The finding: the console resolved notes/gitconfig in the workspace (nothing there),
    the server read it in its own folder (a link to the forbidden .git/config)."""
    for path in ("notes/gitconfig", "notes/key", "notes/secrets-dir/key.txt"):
        record = call(demo, "fs", "read_file", {"path": path})
        assert record.status == "refused" and "forbidden path of fs" in record.error
        assert_no_secret(record)


def test_a_revision_naming_a_forbidden_file_is_refused_even_on_a_narrow_tool(gitsrv, demo):
    """git_show is whole-root; declared otherwise, HEAD:.env still names .env."""
    ToolDefinition.objects.filter(name="mcp:git:git_show").update(whole_root=False)
    for revision in ("HEAD:.env", "HEAD~1:secrets/key.txt", "secrets/key.txt"):
        record = call(demo, "git", "git_show", {"repo_path": ".", "revision": revision})
        assert record.status == "refused" and "forbidden path of git" in record.error
        assert_no_secret(record)


def test_whole_root_tools_ask_when_the_server_says_so(gitsrv, demo):
    gitsrv.whole_root_tools = "ask"
    gitsrv.save()
    record = call(demo, "git", "git_diff", {"repo_path": ".", "target": EMPTY_TREE})
    assert (record.status, record.decision, record.rule) == ("refused", "ask", "whole-root")
    assert "forbidden paths" in record.error  # outside a run nobody is there to ask
    assert_no_secret(record)


def test_the_root_is_named_by_dot_and_by_its_absolute_path(fs, gitsrv, demo, served):
    for repo in (".", str(served), "./"):
        record = call(demo, "git", "git_status", {"repo_path": repo})
        assert record.status == "ok", record.error
    record = call(demo, "fs", "list_directory", {"path": "."})
    assert record.status == "ok", record.error
    assert record.output["content"].split() == [".env", ".git", "notes", "secrets"]


def test_allowed_calls_still_work_inside_the_served_folder(fs, gitsrv, demo, served):
    record = call(demo, "fs", "read_file", {"path": "notes/a.md"})
    assert (record.status, record.output["content"]) == ("ok", "hello notes, again\n")
    record = call(demo, "fs", "read_file", {"path": str(served / "notes" / "a.md")})
    assert record.status == "ok", record.error
    record = call(demo, "fs", "write_file", {"path": "notes/b.md", "content": "new"})
    assert record.status == "ok" and (served / "notes" / "b.md").read_text() == "new"
    record = call(demo, "git", "git_add", {"repo_path": ".", "files": ["notes/b.md"]})
    assert record.status == "ok", record.error


def test_whole_root_tools_work_where_nothing_is_forbidden(served, demo):
    server("open-git", ["git", "--repository", str(served)], GIT_TOOLS, forbidden_paths=[])
    record = call(demo, "open-git", "git_show", {"repo_path": ".", "revision": "HEAD:notes/a.md"})
    assert (record.status, record.output["content"]) == ("ok", "hello notes, again\n")


def test_discovery_declares_each_tools_reach_and_side_effect(fs, gitsrv):
    kinds = dict(ToolDefinition.objects.values_list("name", "argument_kinds"))
    assert kinds["mcp:fs:read_file"] == {"path": "path"}
    assert kinds["mcp:fs:directory_tree"] == {"path": "tree"}
    assert kinds["mcp:fs:search_files"] == {"path": "tree", "pattern": "text"}
    assert kinds["mcp:fs:move_file"] == {"source": "path", "destination": "path"}
    assert kinds["mcp:git:git_show"] == {"repo_path": "path", "revision": "revision"}
    assert kinds["mcp:git:git_diff"] == {"repo_path": "path", "target": "revision"}
    assert kinds["mcp:git:git_add"] == {"repo_path": "path", "files": "tree"}
    assert kinds["mcp:git:git_commit"] == {"repo_path": "path", "message": "text"}
    whole = set(ToolDefinition.objects.filter(whole_root=True).values_list("name", flat=True))
    assert whole == {"mcp:git:git_show", "mcp:git:git_diff", "mcp:git:git_log"}
    effects = dict(ToolDefinition.objects.filter(source="mcp").values_list("name", "side_effect"))
    assert effects["mcp:fs:read_file"] == "none" and effects["mcp:git:git_status"] == "none"
    assert effects["mcp:fs:write_file"] == "external_api"
    assert effects["mcp:git:git_commit"] == "external_api"
    hints = ToolDefinition.objects.get(name="mcp:fs:write_file").annotations
    assert hints == {"readOnlyHint": False, "destructiveHint": True}


def test_a_count_or_a_flag_is_text_whatever_its_name():
    from policies.core.mcp_reach import reach_from_schema

    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "head": {"type": "integer"},
            "tail": {"type": "number"},
            "dryRun": {"type": "boolean"},
            "excludePatterns": {"type": "array", "items": {"type": "string"}},
        },
    }
    reach = reach_from_schema("read_text_file", schema)
    assert dict(reach.arguments) == {
        "path": "path",
        "head": "text",
        "tail": "text",
        "dryRun": "text",
    }  # excludePatterns: undeclared, refused until an admin says what it is
    assert not reach.whole_root


def test_rediscovery_keeps_an_admins_declaration(fs):
    ToolDefinition.objects.filter(name="mcp:fs:read_file").update(argument_kinds={"path": "tree"})
    mcp_discover(fs)
    assert ToolDefinition.objects.get(name="mcp:fs:read_file").argument_kinds == {"path": "tree"}


def test_an_undeclared_argument_is_refused_whatever_its_name(fs, demo):
    ToolDefinition.objects.filter(name="mcp:fs:read_file").update(argument_kinds={})
    record = call(demo, "fs", "read_file", {"path": "notes/a.md"})
    assert record.status == "refused" and "not declared in the tool's reach" in record.error


def test_a_server_root_comes_from_the_admin_field_first(served, demo, tmp_path):
    other = tmp_path / "other"
    (other / "secrets").mkdir(parents=True)
    (other / "secrets" / "key.txt").write_text("other")
    row = server("fs2", ["fs", str(other)], FS_TOOLS, root=str(served))
    assert row.root == str(served)
    # Resolved against the admin's root, notes/key is the link to a forbidden file.
    record = call(demo, "fs2", "read_file", {"path": "notes/key"})
    assert record.status == "refused" and "forbidden" in record.error


# --- the pure pieces: revisions, roots, declarations ----------------------------------------
@pytest.mark.parametrize(
    ("revision", "tokens", "path"),
    [
        ("HEAD", ["HEAD"], None),
        ("HEAD:.env", ["HEAD"], ".env"),
        ("HEAD~1:secrets/key.txt", ["HEAD~1"], "secrets/key.txt"),
        (":0:.env", [], ".env"),
        ("HEAD:", ["HEAD"], "."),
        ("main..HEAD", ["main", "HEAD"], None),
        ("secrets/key.txt", ["secrets/key.txt"], None),
    ],
)
def test_a_revision_says_what_it_could_name_on_disk(revision, tokens, path):
    from policies.core.mcp_reach import revision_names

    assert revision_names(revision) == (tokens, path)


@pytest.mark.parametrize(
    "revision", ["", "-p", "--output=/tmp/x", "HEAD -- .env", "HEAD--", "a b", "HEAD;rm", None, 1]
)
def test_options_separators_and_strangers_are_no_revisions(revision):
    from policies.core.mcp_reach import ArgumentRefused, revision_names

    with pytest.raises(ArgumentRefused):
        revision_names(revision)


def test_a_servers_root_is_read_from_its_launch_arguments(tmp_path):
    from policies.core.mcp_reach import root_from_args

    def is_dir(path: str) -> bool:
        return path == str(tmp_path)

    assert root_from_args(["mcp-server-git", "--repository", "/r"], is_dir) == "/r"
    assert root_from_args(["--repository=/r"], is_dir) == "/r"
    assert root_from_args(["-r", "/r"], is_dir) == "/r"
    assert root_from_args(["-y", "@x/server-filesystem", str(tmp_path), "/b"], is_dir) == str(
        tmp_path
    )
    assert root_from_args([SCRIPT], is_dir) is None  # a script is no folder
