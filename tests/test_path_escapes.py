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
