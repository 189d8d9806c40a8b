"""Fenced effects (SPEC R9): a worker that lost its run's lease can make no effect.

The child never writes; its effects reach the drafts or the workspace only in the fenced
transaction that records the call (``runs.tools.effects``). Here the lease is taken from
the worker at each point of a call — before its journal, while its tool runs — through
the real lease table, and the files show what happened. The live test with a frozen
worker (SIGSTOP) is in test_runs_live.py."""

from __future__ import annotations

import datetime
import os
import threading
from functools import partial

import pytest
from django.db import connections
from django.utils import timezone

from policies.core.default_policy import DEFAULT_POLICY
from policies.core.permissions import Policy, Rule
from policies.models import ToolDefinition
from runs.leases import LeaseLost, fenced, lease_claim
from runs.models import Run, ToolCall, WriteRecord
from runs.tools.call import tool_call_run
from runs.tools.decide import side_effect
from runs.tools.effects import EffectRefused, effects_apply
from runs.tools.recover import tool_call_recover
from tests.conftest import SEEDED

pytestmark = SEEDED
OPEN = Policy("open", "L3", (Rule("all", "*", "allow"),))


def lease_taken_over(run: Run):
    """What another worker does once this one's lease expired: it claims the run."""
    Run.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    taken = lease_claim(run_id=run.pk, worker="the-other-worker")
    assert taken is not None
    return taken


@pytest.fixture
def leased(run):
    run.workspace.root_path.joinpath("docs").mkdir(exist_ok=True)
    run.workspace.root_path.joinpath("docs", "guide.md").write_text("# Guide\n\nPort 8080.\n")
    lease = lease_claim(run_id=run.pk, worker="this-worker")
    assert lease is not None
    return run, lease


def patch(run, lease, **hooks):
    return tool_call_run(
        workspace=run.workspace,
        tool="patchDraft",
        arguments={"path": "docs/guide.md", "search": "8080.", "replace": "8080. Or 9090."},
        policy=DEFAULT_POLICY,
        run=run,
        tool_use_id="toolu_fenced",
        fence=partial(fenced, lease),
        **hooks,
    )


def draft(run) -> str | None:
    path = run.workspace.drafts_path / str(run.pk) / "docs" / "guide.md"
    return path.read_text() if path.exists() else None


def test_a_worker_whose_lease_is_gone_before_the_journal_runs_nothing(leased):
    run, lease = leased

    def taken_over(tool, arguments):
        lease_taken_over(run)
        return None

    with pytest.raises(LeaseLost):
        patch(run, lease, before_run=taken_over)
    assert not ToolCall.objects.filter(run=run).exists()
    assert draft(run) is None


def test_a_worker_that_lost_its_lease_while_the_tool_ran_changes_no_file(leased):
    """Found: a worker frozen past its lease and woken after another re-ran its patchDraft
    applied the patch a second time."""
    run, lease = leased
    holder = {}

    def taken_over(reply):  # after the tool ran, before its effects were applied
        holder["lease"] = lease_taken_over(run)
        return reply

    with pytest.raises(LeaseLost):
        patch(run, lease, transform=taken_over)
    assert draft(run) is None  # the child's patch was never applied
    record = ToolCall.objects.get(run=run, tool_use_id="toolu_fenced")
    assert record.status == "running" and not WriteRecord.objects.filter(tool_call=record)
    # The new holder finds the call unapplied: it may run it, once.
    assert tool_call_recover(record=record) == "rerun"
    again = patch(run, holder["lease"])
    assert again.status == "ok" and draft(run) == "# Guide\n\nPort 8080. Or 9090.\n"


def test_a_commit_by_a_worker_that_lost_the_run_writes_no_file_and_no_record(leased):
    """Found on the embedded default: a late commit left two write records for one commit."""
    run, lease = leased
    drafts = run.workspace.drafts_path / str(run.pk) / "docs"
    drafts.mkdir(parents=True)
    (drafts / "guide.md").write_text("# Guide\n\nPort 9090.\n")

    def taken_over(reply):
        lease_taken_over(run)
        return reply

    with pytest.raises(LeaseLost):
        tool_call_run(
            workspace=run.workspace,
            tool="commitDraft",
            arguments={"path": "docs/guide.md"},
            policy=OPEN,
            run=run,
            tool_use_id="commit:guide",
            fence=partial(fenced, lease),
            transform=taken_over,
        )
    assert (run.workspace.root_path / "docs" / "guide.md").read_text() == "# Guide\n\nPort 8080.\n"
    assert (drafts / "guide.md").exists()  # the draft is still there to commit, once
    assert not WriteRecord.objects.filter(tool_call__run=run).exists()


# --- the effects' own checks -----------------------------------------------------------------
def test_an_effect_never_writes_through_a_link_or_into_a_fifo(workspace, tmp_path):
    root, drafts = workspace.root_path, tmp_path / "drafts"
    outside = tmp_path / "victim.txt"
    outside.write_text("intact")
    os.symlink(outside, root / "trap.md")
    os.mkfifo(root / "pipe.md")
    for path in ("trap.md", "pipe.md"):
        write = {"op": "write", "area": "workspace", "path": path, "data": "eA=="}
        with pytest.raises(EffectRefused, match=r"leads|not a regular file"):
            effects_apply([write], root=root, drafts=drafts)
    assert outside.read_text() == "intact"
    assert not os.path.isfile(root / "pipe.md")


def test_effects_are_all_checked_before_any_is_applied(workspace, tmp_path):
    root = workspace.root_path
    (root / "a.md").write_text("a")
    effects = [
        {"op": "write", "area": "workspace", "path": "a.md", "data": "Yg=="},
        {"op": "remove", "area": "workspace", "path": "missing.md"},
    ]
    with pytest.raises(EffectRefused, match=r"missing\.md does not exist"):
        effects_apply(effects, root=root, drafts=tmp_path)
    assert (root / "a.md").read_text() == "a"


@pytest.mark.parametrize(
    "effect",
    [
        {"op": "write", "area": "workspace", "path": "../escape.md", "data": "eA=="},
        {"op": "write", "area": "elsewhere", "path": "a.md", "data": "eA=="},
        {"op": "write", "area": "workspace", "path": "a.md", "data": "not base64!"},
        {"op": "chmod", "area": "workspace", "path": "a.md"},
        {"op": "move", "area": "workspace", "path": "a.md", "to": "a.md"},
        "rm -rf /",
    ],
)
def test_an_effect_a_tool_cannot_describe_is_refused(workspace, tmp_path, effect):
    (workspace.root_path / "a.md").write_text("a")
    with pytest.raises(EffectRefused):
        effects_apply([effect], root=workspace.root_path, drafts=tmp_path)
    assert (workspace.root_path / "a.md").read_text() == "a"
    assert not (tmp_path.parent / "escape.md").exists()


def test_a_tool_that_may_not_write_has_its_changes_dropped(workspace):
    ToolDefinition.objects.create(
        name="sneakyRead",
        description="Claims to read; returns writes (tests).",
        implementation="tests.runaway_tools:sneaky_write",
        input_schema={"type": "object"},
        permission_level="L1",
        side_effect="none",
    )
    record = tool_call_run(workspace=workspace, tool="sneakyRead", arguments={}, policy=OPEN)
    assert record.status == "error" and "may not change files" in record.error
    assert not (workspace.root_path / "sneaky.md").exists()


# --- every kind of tool call ------------------------------------------------------------------
KINDS = {
    "readSource": {"path": "docs/guide.md"},
    "glob": {"pattern": "docs/*.md"},
    "grep": {"pattern": "Port"},
    "searchDocs": {"query": "port"},
    "runValidation": {"path": "docs/guide.md"},
    "createDraft": {"path": "docs/new.md", "content": "# New\n"},
    "patchDraft": {"path": "docs/guide.md", "search": "8080.", "replace": "8080. Or 9090."},
    "commitDraft": {"path": "docs/guide.md"},
    "deleteFile": {"path": "docs/old.md"},
    "renameFile": {"source": "docs/old.md", "target": "docs/older.md"},
    # Inside the task's write paths (the run's task changes docs/configuration.md).
    "mcp:notes:write_note": {"path": "docs/configuration.md", "text": "changed"},
}


@pytest.fixture
def every_kind(leased):
    """A run whose workspace holds what each kind of call needs."""
    run, lease = leased
    root = run.workspace.root_path
    (root / "docs" / "old.md").write_text("# Old\n")
    (root / "notes").mkdir()
    (root / "notes" / "a.md").write_text("remember the milk")
    drafts = run.workspace.drafts_path / str(run.pk) / "docs"
    drafts.mkdir(parents=True)
    (drafts / "guide.md").write_text("# Guide\n\nPort 9090.\n")
    return run, lease


def notes_server() -> None:
    """The tests' MCP server, serving the workspace's notes/ (started only where needed)."""
    import sys
    from pathlib import Path

    from policies.mcp_servers import mcp_discover
    from policies.models import McpServer

    server = McpServer.objects.create(
        name="notes",
        command=sys.executable,
        args=[str(Path(__file__).parent / "mcp_server.py")],
        allowed_tools=["read_note", "write_note"],
        allowed_paths=["docs/**", "notes/**"],
        forbidden_paths=[],
        rate_limit_per_minute=0,
    )
    mcp_discover(server)


def files(run) -> dict[str, bytes]:
    """Every file of the workspace and of the run's drafts, with its bytes."""
    found = {}
    for base in (run.workspace.root_path, run.workspace.drafts_path / str(run.pk)):
        for path in sorted(base.rglob("*")):
            if path.is_file() and not path.name.startswith("gate"):
                found[str(path)] = path.read_bytes()
    return found


@pytest.mark.parametrize("tool", list(KINDS))
@pytest.mark.parametrize("lost", ["before the journal", "while the tool ran"])
def test_no_kind_of_tool_call_records_or_changes_anything_once_the_lease_is_lost(
    every_kind, tool, lost
):
    """A worker frozen past its lease at each kind of call: built-in reads and writes, the
    in-process search, the harness's verify and commit tools, an MCP tool. Whether it lost
    the run before the call was journalled or while it ran, it records no outcome and, for
    every call whose effects pass through the worker, changes no file."""
    run, lease = every_kind
    if tool.startswith("mcp:"):
        notes_server()
    before = files(run)

    def taken_over_before(tool, arguments):
        lease_taken_over(run)

    def taken_over_after(reply):
        lease_taken_over(run)
        return reply

    hooks = (
        {"before_run": taken_over_before}
        if lost == "before the journal"
        else {"transform": taken_over_after}
    )
    with pytest.raises(LeaseLost):
        tool_call_run(
            workspace=run.workspace,
            tool=tool,
            arguments=KINDS[tool],
            policy=OPEN,
            run=run,
            tool_use_id=f"toolu_{tool}",
            fence=partial(fenced, lease),
            **hooks,
        )
    records = ToolCall.objects.filter(run=run)
    reads_only = side_effect(ToolDefinition.objects.get(name=tool)) == "none"
    if lost == "before the journal" or (reads_only and not tool.startswith("mcp:")):
        assert not records.exists()  # a call that changes nothing is journalled with its end
    else:
        (record,) = records
        assert record.status == "running" and record.output in ({}, None)
        assert not WriteRecord.objects.filter(tool_call=record).exists()
    if not tool.startswith("mcp:"):  # an MCP server's own writes are its own (see the note)
        assert files(run) == before


def test_a_worker_that_cannot_renew_its_lease_stops_its_tool_children(leased):
    """The heartbeat finds the run taken over while a slow tool runs: the tool is stopped
    at once (it does not run on beside the new holder), and the call meets the fence."""
    from runs.leases import Heartbeat

    run, lease = leased
    ToolDefinition.objects.create(
        name="slowRead",
        description="Reads slowly (tests).",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        permission_level="L1",
        side_effect="none",
        implementation="tests.runaway_tools:slow_read",
        timeout_sec=120,
    )
    log = run.workspace.drafts_path / f"slow-read-{run.pk}.log"

    def take_over_once_started() -> None:
        try:
            for _ in range(600):
                if log.exists() and "start" in log.read_text():
                    lease_taken_over(run)
                    return
                threading.Event().wait(0.05)
        finally:
            connections.close_all()

    thief = threading.Thread(target=take_over_once_started)
    thief.start()
    with pytest.raises(LeaseLost), Heartbeat(lease) as beat:
        tool_call_run(
            workspace=run.workspace,
            tool="slowRead",
            arguments={"path": "docs/guide.md", "seconds": 100},
            policy=OPEN,
            run=run,
            tool_use_id="toolu_slow",
            fence=partial(fenced, lease),
        )
    thief.join(10)
    assert beat.lost
    assert "done" not in log.read_text()  # stopped, not finished
    # Its stopped reply never reached a record (a read is journalled with its result).
    assert not ToolCall.objects.filter(run=run, tool_use_id="toolu_slow").exists()


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("readSource", {"path": "../outside.md"}),  # refused by its path
        ("readSource", {"path": "docs/guide.md", "_console": "x"}),  # bad arguments
        ("publish", {}),  # a person is needed, and nobody can be asked here
    ],
)
def test_a_refusal_by_a_worker_that_lost_the_run_is_not_written(leased, tool, arguments):
    """Found by review: refusals were saved outside the fence, so a worker that had lost
    the run could still write (or re-insert) a tool call the new holder then met."""
    run, lease = leased
    lease_taken_over(run)
    with pytest.raises(LeaseLost):
        tool_call_run(
            workspace=run.workspace,
            tool=tool,
            arguments=arguments,
            policy=DEFAULT_POLICY,
            run=run,
            tool_use_id="toolu_refused",
            fence=partial(fenced, lease),
        )
    assert not ToolCall.objects.filter(run=run).exists()
