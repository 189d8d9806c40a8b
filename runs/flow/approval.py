"""Approval (SPEC P3, P5, A3): the commit of a run's drafts waits for a person when the
policy or the intake says so; and every approval, of a tool call or of a commit, is held
against what its approvers were shown before the action it allows runs.

The request in force comes from one selector (``approvals.selectors.approval_in_force``);
whether it still holds is decided here, once, by ``approval_holds``.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from approvals.core.fingerprint import accepted_digest, fingerprint_changes
from approvals.core.hunks import hunks_reviewed, verdict_text
from approvals.core.patch import PatchError, apply_patch
from approvals.fingerprint import (
    file_bytes,
    fingerprint_now,
    fingerprint_recorded,
    originals_for,
)
from approvals.models import ApprovalRequest
from approvals.selectors import approval_in_force
from policies.core.permissions import Policy, Verdict, decide_paths, level_of
from policies.models import ToolDefinition
from policies.rate_limits import limit_context

from ..approval_outcomes import approval_ask, approval_invalidate
from ..core import status as run_status
from ..events import run_event_append
from ..lifecycle import run_transition
from ..models import Run, ToolCall
from .checkpoints import (
    checkpoint,
    drafts_of,
    run_complete,
    run_fail,
    run_fields_write,
    step_begin,
    step_end,
    username,
)
from .config import run_config
from .driver_state import Driver
from .outcomes import NEXT, StageOutcome, Waits
from .rebase import drafts_rebase
from .retry import model_told, turns_left


def approval_stage(driver: Driver, run: Run) -> StageOutcome:
    """1. No drafts: the run is complete. 2. An approved commit request that still holds:
    on to Commit; a rejected, expired or cancelled one fails the run. 3. Drafts that read
    as their files are dropped. 4. The policy decides each draft's commit; a deny fails the
    run. 5. Ask a person when a rule or the intake says so, else commit."""
    paths = drafts_of(run)
    if not paths:
        return run_complete(driver, run)
    policy = run_config(driver, run).policy
    existing = approval_in_force(run_id=run.pk, kind=ApprovalRequest.Kind.COMMIT)
    if existing is not None and existing.status == ApprovalRequest.Status.APPROVED:
        held = approval_holds(driver, run, existing, policy.version, paths=paths)
        if held is not True and held is not False:
            return held  # back to the model with a conflict, or failed
        if held is False:
            existing = None
            paths = drafts_of(run)  # a rebase may leave a file with nothing to commit
            if not paths:
                return run_complete(driver, run)
    if existing is not None and existing.status == ApprovalRequest.Status.APPROVED:
        with checkpoint(driver):
            step = run.steps.filter(name="approval", status="running").last()
            if step is not None:
                step_end(step, output={"approval": str(existing.pk), "decision": "approved"})
            run_fields_write(run, stage="commit")
        return NEXT
    if existing is not None and not existing.is_pending:
        who = username(existing.decided_by)
        reason = f"{existing.status} by {who}: {existing.comment or 'no reason given'}"
        return run_fail(driver, reason)
    paths = _drafts_that_change(driver, run, paths)  # before asking: never about nothing
    if not paths:
        return run_complete(driver, run)
    return _commit_asked(driver, run, paths, policy)


def _drafts_that_change(driver: Driver, run: Run, paths: list[str]) -> list[str]:
    """The drafts that would change their file. One that reads exactly as its file (the
    model wrote what was there, or another run committed the same text) changes nothing:
    it is removed and the timeline says so, so no approver is asked about a change with
    no content and nothing is committed twice."""
    drafts = run.workspace.drafts_path / str(run.pk)
    root = run.workspace.root_path
    same = [
        path
        for path in paths
        if (draft := file_bytes(drafts, path)) is not None and draft == file_bytes(root, path)
    ]
    if not same:
        return paths
    with checkpoint(driver):
        run_event_append(
            run_id=run.pk,
            type="drafts.unchanged",
            payload={"paths": same, "reason": "the file already reads so: nothing to commit"},
        )
    for path in same:
        (drafts / path).unlink(missing_ok=True)
    return [path for path in paths if path not in same]


def _commit_verdicts(
    run: Run, paths: list[str], policy: Policy, *, counted: bool
) -> list[Verdict | None]:
    """Each draft's commit as the policy decides it now, its rule's window and rate
    included; ``counted``: each commit asked about counts against the rate here, since
    the approved commit later runs uncounted (a person said yes within the rate)."""
    definition = ToolDefinition.objects.filter(name="commitDraft", enabled=True).first()
    if definition is None:
        return [None for _ in paths]
    limits = limit_context(
        now=timezone.now(),
        run_id=run.pk,
        agent_id=run.agent_id,
        workspace_id=run.workspace_id,
        counted=counted,
    )
    level = level_of(definition.permission_level)
    return [
        decide_paths(policy, "commitDraft", level, "filesystem_write", [p], (), limits)
        for p in paths
    ]


def _commit_refused(
    driver: Driver, paths: list[str], verdicts: list[Verdict | None]
) -> StageOutcome | None:
    for path, verdict in zip(paths, verdicts, strict=True):
        if verdict is None or verdict.decision == "deny":
            why = verdict.reason if verdict else "commitDraft is not an enabled tool"
            return run_fail(driver, f"committing {path} is refused by policy: {why}")
    return None


def _commit_asked(driver: Driver, run: Run, paths: list[str], policy: Policy) -> StageOutcome:
    verdicts = _commit_verdicts(run, paths, policy, counted=False)
    if refused := _commit_refused(driver, paths, verdicts):
        return refused
    intake_approval = (run.task or {}).get("approval") or {}
    if not any(v and v.decision in ("ask", "ask_strong") for v in verdicts) and not (
        intake_approval.get("required")
    ):
        with checkpoint(driver):
            run_fields_write(run, stage="commit")
        return NEXT  # each commit counts against the rate when it runs
    verdicts = _commit_verdicts(run, paths, policy, counted=True)  # a person is asked
    if refused := _commit_refused(driver, paths, verdicts):
        return refused
    asks = [v for v in verdicts if v is not None and v.decision in ("ask", "ask_strong")]
    strong = [p for p, v in zip(paths, verdicts, strict=True) if v and v.decision == "ask_strong"]
    reason = asks[0].reason if asks else intake_approval.get("reason", "")
    rebased = (run.loop or {}).get("rebased", "")
    if rebased:  # this request is the rebase of an earlier one: its approvers hear so
        reason = f"{rebased} {reason}".strip()
    # What the approvers will see, read before the checkpoint's lock.
    fingerprint = fingerprint_now(
        run=run,
        kind=ApprovalRequest.Kind.COMMIT,
        tool="commitDraft",
        arguments={"paths": paths},
        paths=paths,
        policy_version=policy.version,
    )
    with checkpoint(driver):
        step = step_begin(run, "approval", {"paths": paths})
        approval = approval_ask(
            run=run,
            fingerprint=fingerprint,
            tool_use_id=f"commit:{fingerprint.digest[:16]}",
            paths=paths,
            summary=f"Commit {len(paths)} file(s): {', '.join(paths)}",
            rule=(asks[0].rule or "") if asks else "intake",
            reason=reason,
            strong_confirmation=bool(strong),
            confirm_text=strong[0] if strong else "",
        )
        step.output = {"approval": str(approval.pk)}
        step.save(update_fields=["output"])
        if rebased:
            run_fields_write(run, loop={k: v for k, v in run.loop.items() if k != "rebased"})
        run_transition(
            run_id=run.pk,
            to=run_status.WAITING_FOR_APPROVAL,
            detail={"waiting_for": "approval", "approval": str(approval.pk)},
        )
    return Waits("approval")


def approval_holds(
    driver: Driver,
    run: Run,
    approval: ApprovalRequest,
    policy_version: int,
    *,
    paths: list[str] | None = None,
    then: dict[str, Any] | None = None,
) -> bool | StageOutcome:
    """Whether an approval still allows its action: the files, the arguments, the diff and
    the policy version are what its approvers were shown (and, given ``paths``, the set of
    drafts a commit was asked about). One that does not hold is invalidated, saying what
    changed, so the harness asks again — in the same checkpoint as ``then``, the run's
    fields that send it back to asking; nothing is written on a stale approval. An approved
    edit is written into the drafts here, once it is certain the files it was validated
    against are unchanged.

    A commit whose files another run changed meanwhile is rebased onto them
    (``rebase.py``) and asked again, saying so (False, as for any request asked again); one
    that does not merge goes back to the model with the conflict, or fails the run with no
    turn left: that outcome is returned for the caller to return."""
    if paths is not None and approval.paths != paths:
        changes = ["the set of drafts to commit changed since the request"]
    else:
        changes = _changes(run, approval, policy_version)
    if not changes:
        return True
    rebase = drafts_rebase(run, approval) if approval.policy_version == policy_version else None
    with checkpoint(driver):
        approval_invalidate(approval=approval, changes=rebase.changes if rebase else changes)
        if rebase is not None and rebase.conflict and turns_left(run):
            model_told(driver, run, rebase.conflict, {"rebase": "conflict"})
            return NEXT
        if rebase is not None and not rebase.conflict:
            run_fields_write(run, **(then or {}), loop={**(run.loop or {}), "rebased": rebase.note})
        elif then:
            run_fields_write(run, **then)
    if rebase is not None and rebase.conflict:  # and no turn left to resolve it
        return run_fail(driver, rebase.conflict)
    return False


def _changes(run: Run, approval: ApprovalRequest, policy_version: int) -> list[str]:
    now = fingerprint_now(
        run=run,
        kind=approval.kind,
        tool=approval.tool,
        arguments=approval.arguments,
        paths=approval.paths,
        policy_version=policy_version,
    )
    shown = fingerprint_recorded(approval)
    changes = fingerprint_changes(shown, now, diff_replaced=bool(approval.edited_diff))
    bound = accepted_digest(approval.digest, approval.edited_diff, approval.rejected_hunks)
    if approval.accepted_digest and bound != approval.accepted_digest:
        changes.append("what was approved (the edit, or the hunks kept) differs from its record")
    if not changes and approval.edited_diff and (problem := _edit_apply(run, approval)):
        changes = [problem]
    return changes


def _edit_apply(run: Run, approval: ApprovalRequest) -> str:
    """Write the approver's edited version (or the hunks they accepted) into the run's
    drafts, which the commit then writes; a file none of whose hunks was accepted gets
    its draft back to the file's own bytes, so its commit changes nothing. Returns a
    problem, or "" (it was validated against these very files)."""
    drafts = run.workspace.drafts_path / str(run.pk)
    try:
        edited = apply_patch(
            originals_for(run, approval.paths), approval.edited_diff, approval.paths
        )
    except PatchError as error:
        return f"The approved edit no longer applies: {error}"
    for path in approval.rejected_hunks:
        current = file_bytes(run.workspace.root_path, path)
        if path not in edited and path in approval.paths and current is not None:
            target = (drafts / path).resolve()
            if target.is_relative_to(drafts.resolve()):
                target.write_bytes(current)
    for path, text in edited.items():
        target = (drafts / path).resolve()
        if not target.is_relative_to(drafts.resolve()):
            return f"The edit names {path}, outside the drafts."
        if text is None:
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return ""


def edited_note(record: ToolCall, approval: ApprovalRequest) -> None:
    """The model hears that what ran is not what it asked for (issue 6, A3), hunk by hunk
    (B7): which hunks its approver rejected, which they modified and to what."""
    who = username(approval.decided_by)
    try:
        verdicts = hunks_reviewed(approval.diff, approval.edited_diff, approval.rejected_hunks)
    except PatchError:  # the proposed diff had no hunks to name: the patch says it all
        verdicts = []
    if record.path:  # a commit writes one file per record: its own hunks
        verdicts = [v for v in verdicts if v.ref.path == record.path]
    changed = [verdict_text(v) for v in verdicts if v.verdict != "accepted"]
    did = "approved only part of" if approval.rejected_hunks else "edited"
    record.output = {
        **(record.output or {}),
        "modified_by_approver": who,
        "approver_note": (
            f"{who} {did} your change before approving it; what was committed is the "
            "applied_patch, not your draft." + (f" {'; '.join(changed)}." if changed else "")
        ),
        "applied_patch": approval.edited_diff[:20_000],
        "hunks": [
            {
                "path": v.ref.path,
                "hunk": v.ref.number,
                "header": v.ref.header,
                "verdict": v.verdict,
                **({"final_text": v.final_text[:20_000]} if v.final_text else {}),
            }
            for v in verdicts[:200]
        ],
    }
    record.save(update_fields=["output"])
