"""What an eval run did (SPEC E1), collected from the database and the disk for the judge.

The rows say how the run ended, its tool calls and the approvals it asked for; the disk
says what it left in the workspace and beside it (compared byte for byte with what the
case's folder held before the run) and whether it published. Every text the model was
shown is searched for the case's canaries. The result is a plain ``Outcome``, judged by
the pure ``evals.core.judge.judge``.
"""

from __future__ import annotations

from collections.abc import Iterable

from policies.context import context_build
from policies.models import Policy
from runs.core.intake.boundaries import task_paths
from runs.models import Run, ToolCall

from .core.canaries import leaks, strings_in
from .core.judge import Outcome, ToolCallSeen
from .fixtures import Prepared, around_read, tree_read


def outcome_collect(prepared: Prepared, policies_before: dict[str, int]) -> Outcome:
    """The run's outcome; ``policies_before`` is every policy's version before the suite's
    runs started (a run must not change a policy)."""
    assert prepared.run is not None  # only a case whose run started is collected
    run = Run.objects.get(pk=prepared.run.pk)
    case = prepared.case
    calls = run.tool_calls.order_by("started_at").prefetch_related("artifacts")
    after = tree_read(prepared.folder / "workspace")
    changed = {
        p for p in set(after) | set(prepared.before) if after.get(p) != prepared.before.get(p)
    }
    outside_changed = _outside_changed(prepared)
    published = any((prepared.folder / "publish").iterdir())
    approvals = [
        "commit" if a.kind == "commit" else (a.tool or a.kind)
        for a in run.approvals.order_by("requested_at")
    ]
    policies_after = dict(Policy.objects.values_list("name", "version"))
    return Outcome(
        status=run.status,
        failure_reason=run.failure_reason,
        tool_calls=_tool_calls_seen(calls),
        approvals=tuple(approvals),
        files=after,
        changed=frozenset(changed),
        outside_changed=outside_changed,
        leaked=tuple(leaks(case.canaries, _shown_to_model(run))),
        published=published,
        published_by_human=any(
            c.tool == "publish" and c.status == "ok" and c.approved_by_id for c in calls
        ),
        policy_changed=policies_after != policies_before,
    )


def _tool_calls_seen(calls: Iterable[ToolCall]) -> tuple[ToolCallSeen, ...]:
    return tuple(
        ToolCallSeen(
            tool=c.tool,
            status=c.status,
            decision=c.decision,
            reason=" ".join(part for part in (c.reason, c.error) if part),
            truncated=bool(c.artifacts.all()),
        )
        for c in calls
    )


def _outside_changed(prepared: Prepared) -> tuple[str, ...]:
    """What changed in the case's folder outside its workspace and drafts; publish/ is the
    ``published`` effect's, not a file outside."""
    around = around_read(prepared.folder)
    return tuple(
        sorted(
            p
            for p in set(around) | set(prepared.around)
            if around.get(p) != prepared.around.get(p) and not p.startswith("publish/")
        )
    )


def _shown_to_model(run: Run) -> list[str]:
    """Every text the model was or could have been shown, decoded as it read it: the system
    prompt (instructions and project context, rebuilt as the loop builds it), its messages
    (the task and each tool result) and each tool call's recorded output."""
    contents = list(run.messages.filter(role="user").values_list("content", flat=True))
    outputs = list(run.tool_calls.values_list("output", flat=True))
    task = next(iter(run.messages.filter(kind="task").values_list("content", flat=True)), "")
    built = context_build(
        agent=run.agent,
        workspace=run.workspace,
        task=task if isinstance(task, str) else "",
        paths=task_paths(run.task or {}),
    )
    prompt = [layer.text for layer in built.assembly.layers if layer.text]
    return strings_in([contents, outputs, prompt])
