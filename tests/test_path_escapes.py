"""Path escapes (SPEC P2, T3): every variant refused before any rule is matched, and
nothing outside the workspace is read."""

from __future__ import annotations

import os

import pytest

from policies.core.paths import PathRefused
from policies.paths import resolve_in_workspace


@pytest.fixture
def world(tmp_path):
    workspace = tmp_path / "ws"
    (workspace / "docs" / "deep" / "er").mkdir(parents=True)
    (workspace / "docs" / "a.md").write_text("inside")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET")
    os.symlink(outside / "secret.txt", workspace / "docs" / "link-to-secret")
    os.symlink(outside, workspace / "link-to-outside-dir")
    os.symlink("/etc", workspace / "etc")
    os.symlink(workspace / "docs" / "a.md", workspace / "alias.md")
    return workspace, outside


ESCAPES = [
    "../outside/secret.txt",
    "docs/../../outside/secret.txt",
    "docs/deep/../../../outside/secret.txt",
    "docs/deep/er/../../../../outside/secret.txt",
    "./../outside/secret.txt",
    "docs/./../..",
    "..",
    "../",
    "/etc/passwd",
    "//etc/passwd",
    "/",
    "~/.ssh/id_rsa",
    "~root/.bashrc",
    "docs/link-to-secret",
    "link-to-outside-dir/secret.txt",
    "link-to-outside-dir",
    "etc/passwd",
    "%2e%2e/outside/secret.txt",
    "%2E%2E%2Foutside%2Fsecret.txt",
    "docs/%2e%2e/%2e%2e/outside/secret.txt",
    "..%2foutside/secret.txt",
    "%252e%252e/outside",
    "\uff0e\uff0e/outside/secret.txt",  # fullwidth dots
    "docs\u2215..\u2215..\u2215outside",  # division slash look-alike
    "\u2024\u2024/outside/secret.txt",  # one-dot leaders
    "docs/\u202etxt.md",  # right-to-left override: shows one name, opens another
    "docs/a\u200b.md",  # zero-width space
    "..\\outside\\secret.txt",
    "docs\\..\\..\\outside",
    "",
    "   ",
    ".",
    "./",
    "docs/a.md\x00.png",
    "\x00",
    "docs/\nfile",
    "docs/a.md\x7f",
    "a" * 2000,
    None,
    123,
    ["docs/a.md"],
]


@pytest.mark.parametrize("raw", ESCAPES, ids=lambda raw: repr(raw)[:40])
def test_every_escape_is_refused(world, raw):
    workspace, _ = world
    with pytest.raises(PathRefused):
        resolve_in_workspace(workspace, raw)


def test_there_are_at_least_thirty_variants():
    assert len(ESCAPES) >= 30


def test_a_link_created_mid_run_is_seen_at_the_next_use(world):
    workspace, outside = world
    resolved = resolve_in_workspace(workspace, "docs/later.md")
    assert resolved.relative == "docs/later.md"  # not there yet: fine, it would be created
    os.symlink(outside / "secret.txt", workspace / "docs" / "later.md")
    with pytest.raises(PathRefused, match="outside the workspace"):
        resolve_in_workspace(workspace, "docs/later.md")


def test_links_inside_the_workspace_resolve_to_their_real_target(world):
    workspace, _ = world
    resolved = resolve_in_workspace(workspace, "alias.md")
    assert resolved.relative == "docs/a.md"  # rules match the file really touched
    assert resolved.absolute.read_text() == "inside"


@pytest.mark.parametrize("raw", ["docs/a.md", "./docs/a.md", "docs//a.md", "docs/deep/er/new.md"])
def test_plain_paths_inside_are_accepted(world, raw):
    workspace, _ = world
    resolved = resolve_in_workspace(workspace, raw)
    assert resolved.absolute.is_relative_to(workspace.resolve())


# --- a server's folder (issue 16): the same escapes, resolved against the root it serves ---
NAMING_THE_ROOT = (".", "./", "/")


@pytest.mark.parametrize(
    "raw", [r for r in ESCAPES if r not in NAMING_THE_ROOT], ids=lambda raw: repr(raw)[:40]
)
def test_every_escape_is_refused_against_a_servers_root(world, raw):
    from policies.paths import resolve_in_root

    workspace, _ = world
    with pytest.raises(PathRefused):
        resolve_in_root(workspace, raw)


def test_dot_and_the_roots_absolute_path_name_the_root(world):
    from policies.core.paths import ROOT
    from policies.paths import resolve_in_root

    workspace, _ = world
    for raw in (".", "./", str(workspace), str(workspace) + "/", str(workspace / "docs" / "..")):
        if ".." in raw.split("/"):
            with pytest.raises(PathRefused):
                resolve_in_root(workspace, raw)
        else:
            assert resolve_in_root(workspace, raw) == ROOT
    assert resolve_in_root(workspace, str(workspace / "docs" / "a.md")) == "docs/a.md"
    assert resolve_in_root(workspace, "alias.md") == "docs/a.md"  # links followed
    with pytest.raises(PathRefused, match="outside the folder"):
        resolve_in_root(workspace, "/")


def test_a_tree_is_walked_with_its_links_resolved(world):
    from policies.paths import tree_entries

    workspace, _ = world
    with pytest.raises(PathRefused, match="outside the folder"):
        list(tree_entries(workspace, "."))  # docs/link-to-secret leads out
    assert sorted(tree_entries(workspace, "docs/deep")) == ["docs/deep/er"]
    assert list(tree_entries(workspace, "docs/a.md")) == []  # a file: nothing under it


# --- built-in tools against a forbidden folder named directly (issue 16) ------------------
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("readSource", {"path": "secrets"}),
        ("readSource", {"path": "Secrets"}),
        ("readSource", {"path": "secrets/"}),
        ("readSource", {"path": "./secrets"}),
        ("runValidation", {"path": "secrets"}),
        ("createDraft", {"path": "secrets", "content": "x"}),
        ("readSource", {"path": ".git"}),
    ],
)
def test_a_forbidden_folder_named_directly_is_denied(workspace, tool, arguments):
    from policies.core.permissions import Policy, Rule
    from runs.tools.call import tool_call_run

    (workspace.root_path / "secrets").mkdir()
    (workspace.root_path / ".git").mkdir()
    policy = Policy(
        "p",
        "L3",
        (
            Rule("no-secrets", "*", "deny", "secrets/**"),
            Rule("no-git", "*", "deny", ".git/**"),
            Rule("all", "*", "allow"),
        ),
    )
    record = tool_call_run(workspace=workspace, tool=tool, arguments=arguments, policy=policy)
    assert (record.status, record.decision) == ("refused", "deny")
    assert record.rule in {"no-secrets", "no-git"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("glob", {"pattern": "secrets"}),
        ("glob", {"pattern": "secrets/**"}),
        ("glob", {"pattern": "**"}),
        ("glob", {"pattern": "{secrets,docs}/**"}),
        ("grep", {"pattern": "KEY", "glob": "secrets"}),
        ("grep", {"pattern": "KEY", "glob": "secrets/**"}),
        ("grep", {"pattern": "KEY"}),
    ],
)
def test_listing_tools_never_show_a_forbidden_folder(workspace, tool, arguments):
    from policies.core.permissions import Policy, Rule
    from runs.tools.call import tool_call_run

    (workspace.root_path / "secrets").mkdir()
    (workspace.root_path / "secrets" / "key.txt").write_text("KEY-1234")
    policy = Policy("p", "L3", (Rule("no", "*", "deny", "secrets/**"), Rule("a", "*", "allow")))
    record = tool_call_run(workspace=workspace, tool=tool, arguments=arguments, policy=policy)
    assert record.status == "ok", record.error
    assert "secrets/key.txt" not in str(record.output) and "KEY-1234" not in str(record.output)
