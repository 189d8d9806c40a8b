"""What people do to runs: submit one, answer its intake, cancel it, roll it back.

Each service checks who is asking, runs in a transaction and sends its news only on
commit; status changes go through ``lifecycle.run_transition``.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from harness_console.roles import may_act_on_any_run, may_decide, may_submit_runs
from policies.models import Agent, Workspace

from .approval_outcomes import approvals_cancel
from .core import status as run_status
from .core.intake import intake
from .core.model_turns import ANTHROPIC, OFFLINE_REPLAY
from .events import run_event_append, run_first_event
from .lifecycle import run_dispatch, run_fail_idle, run_send, run_transition, steps_close
from .model_clients import model_key_set
from .models import Run, WriteRecord
from .replays import ReplayScript, offline_refusal, replay_for
from .tools.rollback import RollbackRefused, writes_restore

logger = logging.getLogger(__name__)

MAX_REQUEST_CHARS = 20_000


def run_create(
    *,
    agent: Agent,
    workspace: Workspace,
    requester: Any,
    request: str,
    dispatch: bool = True,
    replay: Any = None,
) -> Run:
    """Record a new run and, once committed, hand it to a worker.

    The intake runs here too (it is pure and fast), so the answer to the requester already
    says the risk and what is missing; the worker repeats it as its first stages and
    records them. A request a replay script was recorded for (in any case and spacing) is
    run as the script's own text, so the intake sets the task the recording was made for; a
    request no model can answer (no script matches it and no API key is set) is refused
    before anything is stored, saying what runs offline. ``replay`` (a path) plays that
    script whatever the request: the eval set's cases bring their own turns.
    """
    text = (request or "").strip()
    if not text:
        raise ValidationError({"request": "Describe the task: the request is empty."})
    if len(text) > MAX_REQUEST_CHARS:
        raise ValidationError(
            {"request": f"The request is {len(text)} characters; the limit is {MAX_REQUEST_CHARS}."}
        )
    script: ReplayScript | None
    if replay is not None:
        script = ReplayScript(
            path=Path(replay),
            title="",
            request=text,
            agent=agent.slug,
            workspace=workspace.slug,
            turns=0,
        )
    else:
        script = replay_for(agent=agent.slug, workspace=workspace.slug, request=text)
        text = script.request if script else text
    if script is None and not model_key_set():
        raise ValidationError(
            {"request": offline_refusal(agent=agent.slug, workspace=workspace.slug)}
        )
    try:
        task = intake(text)
    except ValueError as error:
        raise ValidationError({"request": str(error)}) from None
    with transaction.atomic():
        # One insert says it all: the first event's number, and the dispatch that follows
        # the commit (the sweeper reads when a run was sent).
        run = Run.objects.create(
            agent=agent,
            workspace=workspace,
            requester=requester,
            request=text,
            task=task.to_json(),
            risk=task.risk.level,
            model_label=OFFLINE_REPLAY if script else ANTHROPIC,
            model_name=agent.model if script is None else f"replay of {script.path.name}",
            replay_script=str(script.path) if script else "",
            event_seq=1,
            dispatched_at=timezone.now() if dispatch else None,
        )
        run_first_event(
            run=run,
            type="run.created",
            payload={
                "agent": agent.slug,
                "workspace": workspace.slug,
                "requester": requester.get_username(),
                "model": run.model_label,
                "risk": run.risk,
            },
        )
        if dispatch:
            transaction.on_commit(partial(run_send, run_id=run.pk))
    return run


def run_may_act(user: Any, run: Run) -> bool:
    """Answer, cancel: the requester on their own run, operators' managers and admins on any."""
    if not user.is_authenticated:
        return False
    if run.requester_id == user.pk and may_submit_runs(user):
        return True
    return may_act_on_any_run(user)


def run_may_roll_back(user: Any) -> bool:
    return may_decide(user)


def _may_act(user: Any, run: Run, what: str) -> None:
    if not run_may_act(user, run):
        raise PermissionDenied(f"Only the requester or an operator may {what} this run.")


def run_answer(*, run: Run, user: Any, answers: dict[str, str]) -> Run:
    """The requester answers the intake's questions (SPEC R3); the run resumes its intake.

    Answers are checked by the intake itself: one that does not fill its parameter (say,
    a path outside the workspace) is refused with the question, and nothing changes.
    """
    _may_act(user, run, "answer for")
    if not isinstance(answers, dict) or not answers:
        raise ValidationError({"answers": "Give at least one answer, as name: text."})
    clean: dict[str, str] = {}
    for name, value in answers.items():
        if not isinstance(value, str) or not value.strip():
            raise ValidationError({"answers": f"The answer to {name!r} is empty."})
        if "\x00" in value or "\x00" in str(name):
            raise ValidationError({"answers": "An answer cannot contain a NUL character."})
        if len(value) > 2000:
            raise ValidationError({"answers": f"The answer to {name!r} is over 2000 characters."})
        clean[str(name)[:64]] = value.strip()
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status != run_status.WAITING_FOR_ANSWER:
            raise ValidationError({"answers": "This run is not waiting for an answer."})
        asked = {m["name"] for m in (run.task or {}).get("missing", [])}
        unknown = sorted(set(clean) - asked)
        if unknown:
            raise ValidationError(
                {
                    "answers": f"Nothing asked for {', '.join(unknown)}; "
                    f"asked: {', '.join(sorted(asked))}."
                }
            )
        previous = dict((run.task or {}).get("answers") or [])
        merged = {**previous, **clean}
        task = intake(run.request, answers=merged)
        still = {m.name: m.question for m in task.missing if m.name in clean}
        if still:
            raise ValidationError(
                {"answers": " ".join(f"{name}: {q}" for name, q in still.items())}
            )
        data = task.to_json()
        Run.objects.filter(pk=run.pk).update(task=data, risk=task.risk.level)
        run_event_append(
            run_id=run.pk,
            type="intake.answered",
            payload={"by": user.get_username(), "answers": clean},
        )
        steps_close(run_id=run.pk, status="answered")
        run_transition(run_id=run.pk, to=run_status.PLANNING)
        transaction.on_commit(partial(run_dispatch, run_id=run.pk))
    run.refresh_from_db()
    return run


def run_cancel(*, run: Run, user: Any) -> Run:
    """Stop a run. One that holds no worker (waiting, or not yet claimed) fails at once;
    a working one is told, and its worker stops at its next checkpoint — or, if that
    checkpoint was a wait, right after it lets the run go (cancel_if_requested)."""
    _may_act(user, run, "cancel")
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status in (run_status.COMPLETED, run_status.FAILED, run_status.ROLLED_BACK):
            raise ValidationError({"run": f"The run has ended ({run.status}); nothing to cancel."})
        if run.cancel_requested_at is None:
            Run.objects.filter(pk=run.pk).update(cancel_requested_at=now, cancel_requested_by=user)
            run_event_append(
                run_id=run.pk, type="run.cancel_requested", payload={"by": user.get_username()}
            )
        idle = run.status in run_status.WAITING or not (
            run.lease_expires_at and run.lease_expires_at > now
        )
        if idle:
            _cancelled(run, f"cancelled by {user.get_username()}")
    run.refresh_from_db()
    return run


def cancel_if_requested(*, run_id: Any) -> None:
    """After a worker lets a run go: a cancel that arrived while it worked, and that the
    worker could not act on because its last step was a wait, takes effect now."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.cancel_requested_at is None or run.status not in run_status.WAITING:
            return
        who = run.cancel_requested_by.get_username() if run.cancel_requested_by else "someone"
        _cancelled(run, f"cancelled by {who}")


def _cancelled(run: Run, reason: str) -> None:
    """Inside the caller's transaction, with the run's row locked."""
    approvals_cancel(run_id=run.pk, reason=reason)
    run_fail_idle(run_id=run.pk, reason=reason, steps="cancelled")
    run_event_append(run_id=run.pk, type="run.cancelled", payload={"reason": reason})


def run_rollback(*, run: Run, user: Any) -> list[str]:
    """Undo a completed run's writes (SPEC R8), newest first, all or nothing.

    Under the run's row lock (two rollbacks at once: one wins, the other is refused), every
    file must still hold what the run wrote; if one changed since, nothing is restored and
    the refusal names it.
    """
    if not run_may_roll_back(user):
        raise PermissionDenied("Only approvers and admins roll back runs.")
    with transaction.atomic():
        # The run's row only: locking its workspace's too made a reconciliation that waits
        # for the workspace (a new rollup cell's key) and this rollback wait for each other.
        run = Run.objects.select_for_update(of=("self",)).select_related("workspace").get(pk=run.pk)
        if run.status != run_status.COMPLETED:
            raise RollbackRefused(
                f"Only a completed run can be rolled back; this one is {run.status}."
            )
        records = list(
            WriteRecord.objects.filter(tool_call__run=run, rolled_back_at__isnull=True)
            .select_related("tool_call")
            .order_by("-tool_call__finished_at", "-order")
        )
        if not records:
            raise RollbackRefused("This run wrote nothing that can be rolled back.")
        paths = writes_restore(records=records, workspace=run.workspace, who="this run")
        run_transition(
            run_id=run.pk,
            to=run_status.ROLLED_BACK,
            detail={"by": user.get_username(), "paths": paths},
        )
    return paths
