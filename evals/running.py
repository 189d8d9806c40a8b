"""The eval runs while they run (SPEC E1): started as any run is, taken by the workers as
any run is, their intake questions and approvals answered from the case's script, waited
for until each has ended or waits for a person, and cancelled if left waiting, so no
approver is asked about an eval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from django.core.exceptions import PermissionDenied, ValidationError

from approvals.models import ApprovalRequest
from approvals.outcomes import AlreadyDecided
from harness_console.roles import DECIDE
from runs.approval_outcomes import approval_decide
from runs.core import status as run_status
from runs.models import Run
from runs.services import run_answer, run_cancel, run_create

from .fixtures import EVAL_APPROVER, Prepared, eval_user
from .loading import SuiteError

logger = logging.getLogger(__name__)

SETTLED: Final = {run_status.COMPLETED, run_status.FAILED, run_status.ROLLED_BACK}


def case_start(prepared: Prepared, *, model: str, user: Any) -> None:
    """The case's run, created as a person's would be (under the replay, with its turns)."""
    case = prepared.case
    replay = prepared.folder / "replay.json" if model == "replay" else None
    assert prepared.agent is not None and prepared.workspace is not None  # laid out first
    prepared.run = run_create(
        agent=prepared.agent,
        workspace=prepared.workspace,
        requester=user,
        request=case.request,
        replay=replay,
    )
    prepared.started = time.monotonic()


def run_settled(run: Run) -> bool:
    """Ended, or waiting for a person with no worker holding it."""
    if run.status in SETTLED:
        return True
    return run.status in run_status.WAITING and not run.lease_owner


def runs_await(
    prepared: list[Prepared],
    case_timeout: float,
    claim_timeout: float,
    *,
    on_settled: Callable[[Prepared], None] = lambda item: None,
    tick: Callable[[], None] = lambda: None,
    start: Callable[[Prepared], bool] | None = None,
    at_once: int = 0,
) -> None:
    """Until every run has ended or waits for a person (giving the case's scripted intake
    answers and approval decisions on the way), or its time is up; ``on_settled`` hears of
    each such run as soon as it is one (the suite judges it then), ``tick`` each round (the
    suite's sign of life). No run claimed by any worker within ``claim_timeout``: no
    worker is running; say so.

    ``start``: the cases not started yet are started here (it answers whether the run
    started), at most ``at_once`` in flight, the next as one settles: a suite shares the
    console's workers with everyone's runs, and a hundred replays at once kept its own
    lease keeper from its beat."""
    approver = eval_user(EVAL_APPROVER, DECIDE)
    waiting = {p.run.pk: p for p in prepared if p.run is not None}
    queued = [p for p in prepared if p.run is None and not p.skipped] if start else []
    began = time.monotonic()
    claimed = False
    while waiting or queued:
        tick()
        while start is not None and queued and (at_once <= 0 or len(waiting) < at_once):
            item = queued.pop(0)
            if start(item) and item.run is not None:
                waiting[item.run.pk] = item
        rows = Run.objects.filter(pk__in=list(waiting)).only(
            "pk", "status", "lease_owner", "lease_token"
        )
        for run in rows:
            claimed = claimed or run.lease_token > 0
            item = waiting[run.pk]
            timed_out = time.monotonic() - item.started > case_timeout
            answered = not timed_out and run_settled(run) and _respond(item, run, approver)
            if timed_out or (run_settled(run) and not answered):
                del waiting[run.pk]
                on_settled(item)
        if waiting and not claimed and time.monotonic() - began > claim_timeout:
            raise SuiteError(
                f"No worker took the eval runs within {claim_timeout:g} s. Start the console "
                "(make run) or a worker, or pass --start-worker."
            )
        if waiting or queued:
            time.sleep(0.1)


def _respond(item: Prepared, run: Run, approver: Any) -> bool:
    """A settled run waiting for a person gets the case's scripted response, if it has one
    left: True when the run was sent on."""
    if run.status == run_status.WAITING_FOR_ANSWER:
        return _answer(item)
    return run.status == run_status.WAITING_FOR_APPROVAL and _decide(item, approver)


def _answer(item: Prepared) -> bool:
    """The case's answers to the intake's questions, as its requester gives them; once (a
    run that asks again is judged waiting)."""
    if item.answered or not item.case.answers:
        return False
    item.answered = True
    assert item.run is not None  # only a started case is awaited
    run = Run.objects.select_related("requester").get(pk=item.run.pk)
    try:
        run_answer(run=run, user=run.requester, answers=dict(item.case.answers))
    except (ValidationError, PermissionDenied) as error:
        item.decision_error = f"its scripted answers could not be given: {error}"
        return False
    return True


def _decide(item: Prepared, approver: Any) -> bool:
    """Answer the run's pending approval with the case's next scripted decision; False when
    the case has none left (the run stays waiting and is judged as it is)."""
    if item.decided >= len(item.case.decisions):
        return False
    pending = (
        ApprovalRequest.objects.filter(run=item.run, status=ApprovalRequest.Status.PENDING)
        .order_by("requested_at")
        .first()
    )
    if pending is None:
        return False
    decision = item.case.decisions[item.decided]
    item.decided += 1
    try:
        approval_decide(
            approval=pending,
            user=approver,
            decision=decision,
            comment="" if decision == "approve" else "rejected by the eval case's script",
            confirm=pending.confirm_expected or "",
            digest=pending.digest,
        )
    except (AlreadyDecided, ValidationError, PermissionDenied) as error:
        # Say so on the case and stop answering: the run is judged as it stands.
        item.decision_error = f"its scripted {decision} could not be given: {error}"
        item.decided = len(item.case.decisions)
        return False
    return True


def run_cancel_if_waiting(run: Run, user: Any) -> None:
    """Cancel the run unless it has ended: a run the suite leaves behind would wait for an
    approver, or for a worker, for nothing."""
    run = Run.objects.get(pk=run.pk)
    if run.status not in SETTLED:
        try:
            run_cancel(run=run, user=user)
        except Exception:  # the run ended meanwhile: nothing to cancel
            logger.info("Eval run %s could not be cancelled", run.pk, exc_info=True)
