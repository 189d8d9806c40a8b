"""Instruction files on disk (SPEC C5): recursion, .git, links, broken files — and how each
is reported in the assembly."""

from __future__ import annotations

import os

import pytest

from policies.context import context_build
from policies.core.instructions import MAX_INSTRUCTION_BYTES
from policies.instruction_files import read_instruction_files

pytestmark = pytest.mark.django_db


def tree(root, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def test_it_reads_every_folder_recursively_and_skips_git(tmp_path):
    tree(
        tmp_path,
        {
            "AGENTS.md": b"root",
            "a/b/c/AGENTS.md": b"deep",
            ".git/AGENTS.md": b"no",
            "a/.git/x/AGENTS.md": b"no",
            "a/agents.md": b"wrong case",
        },
    )
    found = {f.relative_path: f.content for f in read_instruction_files(tmp_path)}
    assert found == {"AGENTS.md": b"root", "a/b/c/AGENTS.md": b"deep"}


def test_a_link_out_of_the_workspace_is_never_followed(tmp_path):
    outside = tmp_path / "outside"
    tree(outside, {"AGENTS.md": b"secret instructions", "dir/AGENTS.md": b"secret too"})
    workspace = tmp_path / "ws"
    tree(workspace, {"AGENTS.md": b"root", "inside.md": b"linked inside"})
    (workspace / "sub").mkdir()
    os.symlink(outside / "AGENTS.md", workspace / "sub" / "AGENTS.md")
    os.symlink(outside / "dir", workspace / "linked-dir")
    (workspace / "ok").mkdir()
    os.symlink(workspace / "inside.md", workspace / "ok" / "AGENTS.md")
    found = {f.relative_path: (f.content, f.problem) for f in read_instruction_files(workspace)}
    assert found["sub/AGENTS.md"] == (None, "a link pointing outside the workspace")
    assert found["ok/AGENTS.md"] == (b"linked inside", "")
    assert "linked-dir/AGENTS.md" not in found


def test_a_huge_file_is_not_even_read(tmp_path):
    with open(tmp_path / "AGENTS.md", "wb") as handle:
        handle.truncate(MAX_INSTRUCTION_BYTES * 40)
    [found] = read_instruction_files(tmp_path)
    assert found.content is None and found.size == MAX_INSTRUCTION_BYTES * 40


def test_a_folder_named_like_the_file_and_an_unreadable_file_are_reported(tmp_path):
    (tmp_path / "x" / "AGENTS.md").mkdir(parents=True)
    tree(tmp_path, {"y/AGENTS.md": b"fine"})
    found = {f.relative_path: f.problem for f in read_instruction_files(tmp_path)}
    assert found == {"y/AGENTS.md": ""}  # a folder is not a file: os.walk lists it as a folder


def test_every_broken_file_is_reported_in_the_assembly_and_the_rest_still_loads(tmp_path, agent):
    tree(
        tmp_path,
        {
            "AGENTS.md": b"\xc3\x28 invalid",
            "empty/AGENTS.md": b"\n\n",
            "good/AGENTS.md": b"Use short sentences.",
        },
    )
    with open(tmp_path / "huge.bin", "wb") as handle:
        handle.truncate(MAX_INSTRUCTION_BYTES + 1)
    (tmp_path / "big").mkdir()
    os.symlink(tmp_path / "huge.bin", tmp_path / "big" / "AGENTS.md")
    paths = ["good/a.md", "empty/a.md"]  # big/ and the root's are off the path or not
    built = context_build(agent=agent, workspace_path=tmp_path, paths=paths)
    layer = built.assembly.layer("instruction_files")
    assert [k.source_id for k in layer.kept] == ["file:good/AGENTS.md"]
    reasons = {d.source_id: d.reason for d in layer.dropped}
    assert reasons["file:AGENTS.md"] == "not valid UTF-8 (byte 0)"
    assert reasons["file:empty/AGENTS.md"] == "empty"
    assert reasons["file:big/AGENTS.md"].startswith("too large")
