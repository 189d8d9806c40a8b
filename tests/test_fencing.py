"""Fenced effects (SPEC R9): a worker that lost its run's lease can make no effect.

The child never writes; its effects reach the drafts or the workspace only in the fenced
transaction that records the call (``runs.tools.effects``). Here the lease is taken from
the worker at each point of a call — before its journal, while its tool runs — through
the real lease table, and the files show what happened. The live test with a frozen
worker (SIGSTOP) is in test_runs_live.py."""

from __future__ import annotations

import datetime
import os
from functools import partial

import pytest
from django.utils import timezone

from policies.core.default_policy import DEFAULT_POLICY
from policies.core.permissions import Policy, Rule
from policies.models import ToolDefinition
from runs.leases import LeaseLost, fenced, lease_claim
from runs.models import Run, ToolCall, WriteRecord
from runs.tools.call import tool_call_run
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
