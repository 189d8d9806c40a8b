"""Write paths of the run domain: create a run, move its status, append its events.

Each service runs in a transaction and sends its news only on commit, so no page ever shows
an event that rolled back.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from harness_console.roles import may_decide, may_submit_runs
from harness_console.web.live import event_publish
from policies.models import Agent, Workspace

from .core import status as run_status
from .core.failures import failure_kind
from .core.model_turns import ANTHROPIC, OFFLINE_REPLAY
from .model_clients import model_key_set
from .models import Run, RunEvent
from .observability import rollups, telemetry

logger = logging.getLogger(__name__)

MAX_REQUEST_CHARS = 20_000
MAX_EVENT_TYPE_CHARS = 64


def run_event_append(*, run_id: Any, type: str, payload: dict[str, Any] | None = None) -> RunEvent:
    """Append one event to a run, numbered after the last, and publish it once committed.

    1. Take the run's row lock by incrementing its counter (SQLite's IMMEDIATE transactions
       and PostgreSQL's row lock both serialise concurrent appenders here).
    2. Insert the event with that number; (run, seq) is unique, so a bug cannot duplicate one.
    3. On commit, send it to the run's group and to the ops group.
    """
    if not type or len(type) > MAX_EVENT_TYPE_CHARS:
        raise ValueError(f"An event type needs 1 to {MAX_EVENT_TYPE_CHARS} characters.")
    if payload is not None and not isinstance(payload, dict):
        raise ValueError("An event payload is a JSON object.")
    # Inside a caller's transaction no savepoint is needed: a failure rolls it all back.
    run_id = Run._meta.pk.to_python(run_id)  # a malformed id fails here, before any write
    with transaction.atomic(savepoint=False):
        seq = _next_seq(run_id)
        if seq is not None:
            event = RunEvent.objects.create(
                run_id=run_id, seq=seq, type=type, payload=payload or {}
            )
            transaction.on_commit(partial(event_publish, event), robust=True)
    if seq is None:  # raised outside the block, so a caller's transaction stays usable
        raise Run.DoesNotExist(f"No run {run_id}.")
    return event


def _next_seq(run_id: Any) -> int | None:
    """Increment the run's counter and read it back in one statement (RETURNING: SQLite
    3.35+ and PostgreSQL), taking the row lock that orders the run's appenders."""
    connection = transaction.get_connection()
    table, pk = Run._meta.db_table, Run._meta.pk
    key = pk.get_db_prep_value(run_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {connection.ops.quote_name(table)} SET event_seq = event_seq + 1 "  # noqa: S608 - names from the model
            f"WHERE {connection.ops.quote_name(pk.column)} = %s RETURNING event_seq",
            [key],
        )
        row = cursor.fetchone()
    return None if row is None else int(row[0])


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
    records them. A request no model can answer (no replay script matches it and no API
    key is set) is refused before anything is stored. ``replay`` (a path) plays that
    script whatever the request: the eval set's cases bring their own turns.
    """
    from .core.intake import intake
    from .replays import ReplayScript, replay_for

    text = (request or "").strip()
    if not text:
        raise ValidationError({"request": "Describe the task: the request is empty."})
    if len(text) > MAX_REQUEST_CHARS:
        raise ValidationError(
            {"request": f"The request is {len(text)} characters; the limit is {MAX_REQUEST_CHARS}."}
        )
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
    if script is None and not model_key_set():
        raise ValidationError(
            {
                "request": "No model can answer this request: ANTHROPIC_API_KEY is not set, "
                "and no offline replay script matches this request, agent and workspace. "
                "Pick one of the example tasks, or set the key."
            }
        )
    try:
        task = intake(text)
    except ValueError as error:
        raise ValidationError({"request": str(error)}) from None
    with transaction.atomic():
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
        )
        run_event_append(
            run_id=run.pk,
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
            transaction.on_commit(partial(run_dispatch, run_id=run.pk))
    return run


def run_dispatch(*, run_id: Any) -> None:
    """Queue the run for a worker; imported late so services stay importable without Celery.

    A lost message is harmless: the sweeper finds an unclaimed run and dispatches it again.
    """
    from .tasks import run_execute

    try:
        run_execute.delay(str(run_id))
    except Exception:
        logger.exception("Could not queue run %s; the sweeper will.", run_id)


def run_may_act(user: Any, run: Run) -> bool:
    """Answer, cancel: the requester on their own run, operators' managers and admins on any."""
    if not user.is_authenticated:
        return False
    if run.requester_id == user.pk and may_submit_runs(user):
        return True
    return user.has_perm("runs.change_run")


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
    from .core.intake import intake

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
        if run.status != run_status.WAITING_FOR_APPROVAL or run.waiting_for != "answer":
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
        Run.objects.filter(pk=run.pk).update(task=data, risk=task.risk.level, waiting_for="")
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
        idle = run.status == run_status.WAITING_FOR_APPROVAL or not (
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
        if (
            run is None
            or run.cancel_requested_at is None
            or run.status != run_status.WAITING_FOR_APPROVAL
        ):
            return
        who = run.cancel_requested_by.get_username() if run.cancel_requested_by else "someone"
        _cancelled(run, f"cancelled by {who}")


def _cancelled(run: Run, reason: str) -> None:
    """Inside the caller's transaction, with the run's row locked."""
    from approvals.services import approvals_cancel_for_run

    approvals_cancel_for_run(run_id=run.pk, reason=reason)
    run_fail_idle(run_id=run.pk, reason=reason, steps="cancelled")
    run_event_append(run_id=run.pk, type="run.cancelled", payload={"reason": reason})


def run_fail_idle(*, run_id: Any, reason: str, steps: str) -> None:
    """Fail a run no worker holds (cancelled or its commit rejected while it waited, its
    approval expired): no stage left running, and once committed the session_end hooks
    are told from a worker. Inside the caller's transaction, the run's row locked."""
    Run.objects.filter(pk=run_id).update(waiting_for="")
    run_transition(run_id=run_id, to=run_status.FAILED, failure_reason=reason)
    steps_close(run_id=run_id, status=steps)
    transaction.on_commit(
        partial(session_end_dispatch, run_id=run_id, outcome="failed", reason=reason)
    )


def session_end_dispatch(*, run_id: Any, outcome: str, reason: str) -> None:
    """A run that ended outside a worker (cancelled while idle, its commit rejected) still
    tells the session_end hooks, from a worker: a webhook must not hold a web request."""
    from .tasks import run_session_end

    try:
        run_session_end.delay(str(run_id), outcome, reason)
    except Exception:
        logger.exception("Could not queue the session_end hooks of run %s", run_id)


def run_rollback(*, run: Run, user: Any) -> list[str]:
    """Undo a completed run's writes (SPEC R8), newest first, all or nothing.

    Under the run's row lock (two rollbacks at once: one wins, the other is refused), every
    file must still hold what the run wrote; if one changed since, nothing is restored and
    the refusal names it.
    """
    from .models import WriteRecord
    from .tools.rollback import RollbackRefused, writes_restore

    if not run_may_roll_back(user):
        raise PermissionDenied("Only approvers and admins roll back runs.")
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("workspace").get(pk=run.pk)
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


def run_transition(
    *,
    run_id: Any,
    to: str,
    failure_reason: str = "",
    only_from: str | None = None,
    detail: dict[str, Any] | None = None,
) -> Run | None:
    """Move a run to ``to`` if the lifecycle allows it, and record the change as an event.

    ``only_from`` makes it a claim: when the run is no longer in that state (another worker
    got there first), nothing changes and None is returned. An invalid transition raises
    :class:`~runs.core.status.InvalidTransition` and changes nothing.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if only_from is not None and run.status != only_from:
            return None
        run_status.check_transition(run.status, to, failure_reason=failure_reason)
        previous, now = run.status, timezone.now()
        run.status = to
        fields = ["status", "updated_at"]
        if previous == run_status.CREATED:
            run.started_at, fields = now, [*fields, "started_at"]
        counted = run.finished_at is not None  # a completed run is in its day's rollup
        if to in (run_status.COMPLETED, run_status.FAILED) or (
            to == run_status.ROLLED_BACK and not counted
        ):
            # A rollback later keeps the moment the run finished: its day's figures move
            # from completed to rolled back in that same day.
            run.finished_at, fields = now, [*fields, "finished_at"]
        if to == run_status.FAILED:
            run.failure_reason = failure_reason.strip()
            run.failure_kind = failure_kind(run.failure_reason)
            fields = [*fields, "failure_reason", "failure_kind"]
        run.save(update_fields=fields)
        if to in rollups.FINISHED:
            rollups.rollup_run_ended(run, previous if counted else "")
        payload = {"from": previous, "to": to, **(detail or {})}
        if failure_reason:
            payload["reason"] = failure_reason.strip()
        run_event_append(run_id=run.pk, type="status.changed", payload=payload)
        telemetry.run_transitioned(run)  # an ended run's trace spans, sent on commit (O1)
    return run


def steps_close(*, run_id: Any, status: str) -> None:
    """A run that ended (failed, cancelled, rejected) leaves no stage marked running."""
    from .models import Step

    Step.objects.filter(run_id=run_id, status__in=("running", "waiting")).update(
        status=status, finished_at=timezone.now()
    )


def run_claim(*, run_id: Any, worker: str) -> Run | None:
    """A worker takes a newly created run into planning; at most one worker ever gets it."""
    try:
        run = run_transition(
            run_id=run_id,
            to=run_status.PLANNING,
            only_from=run_status.CREATED,
            detail={"worker": worker},
        )
    except Run.DoesNotExist:
        logger.warning("Run %s vanished before a worker could claim it.", run_id)
        return None
    if run is None:
        logger.info("Run %s was already claimed; nothing to do.", run_id)
    return run
