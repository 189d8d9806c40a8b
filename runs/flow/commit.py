"""Commit (SPEC T5, R8): each draft is written to the workspace by commitDraft, under the
approval that allowed it (held against what its approvers saw first), each with its write
record; then the run is complete."""

from __future__ import annotations

from approvals.models import ApprovalRequest
from approvals.selectors import approval_in_force

from ..models import Run, ToolCall
from .approval import approval_holds, edited_note
from .checkpoints import checkpoint, drafts_of, run_complete, run_fail, step_begin, step_end
from .config import run_config
from .driver_state import Driver
from .harness_calls import harness_call, path_id
from .outcomes import NEXT, StageOutcome


def commit_stage(driver: Driver, run: Run) -> StageOutcome:
    approval = approval_in_force(run_id=run.pk, kind=ApprovalRequest.Kind.COMMIT)
    if approval is not None and approval.status != ApprovalRequest.Status.APPROVED:
        approval = None
    paths = list(approval.paths) if approval else drafts_of(run)
    started = ToolCall.objects.filter(run=run, tool_use_id__startswith="commit:").exists()
    # The files, the drafts or the policy changed since the person saw them: ask again.
    version = run_config(driver, run).policy.version
    if approval is not None and not started:
        held = approval_holds(driver, run, approval, version, then={"stage": "approval"})
        if held is not True:
            return NEXT if held is False else held
    with checkpoint(driver):
        step = step_begin(run, "commit", {"paths": paths})
    committed = []
    for path in paths:
        record = harness_call(
            driver,
            run,
            "commitDraft",
            {"path": path},
            f"commit:{path_id(path)}",
            approved_by=approval.decided_by if approval else None,
        )
        if record.status != "ok":
            with checkpoint(driver):
                step_end(step, status="failed", error=record.error)
            return run_fail(driver, f"committing {path} failed: {record.error}")
        if approval is not None and approval.edited_diff and "approver_note" not in record.output:
            edited_note(record, approval)
        committed.append(path)
    with checkpoint(driver):
        step_end(step, output={"committed": committed}, output_artifacts=committed)
    return run_complete(driver, run)
