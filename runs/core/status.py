"""The run lifecycle of SPEC R6 as a pure transition table.

``created → planning → running → waiting_for_approval → verifying → completed | failed |
rolled_back``, and ``planning → waiting_for_answer → planning`` while the intake waits for
the requester's answer (SPEC R3). Every change of a run's status goes through
:func:`check_transition`, so a skipped or backwards step is an error, never a silent
overwrite.
"""

from __future__ import annotations

from typing import Final, Literal

RunStatus = Literal[
    "created",
    "planning",
    "waiting_for_answer",
    "running",
    "waiting_for_approval",
    "verifying",
    "completed",
    "failed",
    "rolled_back",
]

CREATED: Final = "created"
PLANNING: Final = "planning"
WAITING_FOR_ANSWER: Final = "waiting_for_answer"
RUNNING: Final = "running"
WAITING_FOR_APPROVAL: Final = "waiting_for_approval"
VERIFYING: Final = "verifying"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
ROLLED_BACK: Final = "rolled_back"

STATUSES: Final[tuple[RunStatus, ...]] = (
    CREATED,
    PLANNING,
    WAITING_FOR_ANSWER,
    RUNNING,
    WAITING_FOR_APPROVAL,
    VERIFYING,
    COMPLETED,
    FAILED,
    ROLLED_BACK,
)

# Any live state may fail (a crash, an expired approval, a refused intake); only a completed
# run can be rolled back; a run waits for its requester from planning (missing parameters,
# R3; the answer resumes the intake) and for an approver from running or verifying (a tool
# call or a commit that asks), and a decision sends it back to where it was.
TRANSITIONS: Final[dict[RunStatus, frozenset[RunStatus]]] = {
    CREATED: frozenset({PLANNING, FAILED}),
    PLANNING: frozenset({RUNNING, WAITING_FOR_ANSWER, FAILED}),
    WAITING_FOR_ANSWER: frozenset({PLANNING, FAILED}),
    RUNNING: frozenset({WAITING_FOR_APPROVAL, VERIFYING, FAILED}),
    WAITING_FOR_APPROVAL: frozenset({RUNNING, VERIFYING, FAILED}),
    VERIFYING: frozenset({RUNNING, WAITING_FOR_APPROVAL, COMPLETED, FAILED}),
    COMPLETED: frozenset({ROLLED_BACK}),
    FAILED: frozenset(),
    ROLLED_BACK: frozenset(),
}

TERMINAL: Final[frozenset[RunStatus]] = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
WAITING: Final[frozenset[RunStatus]] = frozenset({WAITING_FOR_ANSWER, WAITING_FOR_APPROVAL})
ACTIVE: Final[frozenset[RunStatus]] = frozenset(set(STATUSES) - {COMPLETED, FAILED, ROLLED_BACK})
# What a worker may hold (a lease, SPEC R9): created runs are claimed from the start; a
# waiting or ended run holds none.
CLAIMABLE: Final[tuple[RunStatus, ...]] = (CREATED, PLANNING, RUNNING, VERIFYING)


# A cancelled run is, in the seed's lifecycle, ``failed`` with the failure kind
# ``cancelled``; wherever runs are listed or counted it is shown apart, as "cancelled":
# nobody's failure, and no part of the success rate or the failure Pareto.
CANCELLED_KIND: Final = "cancelled"
SHOWN_CANCELLED: Final = "cancelled"
LABELS: Final[dict[str, str]] = {status: status.replace("_", " ") for status in STATUSES} | {
    SHOWN_CANCELLED: "cancelled"
}


# The statuses a list can be narrowed to: the stored ones, with cancelled beside failed.
SHOWN_STATUSES: Final[tuple[str, ...]] = (
    *STATUSES[: STATUSES.index(FAILED) + 1],
    SHOWN_CANCELLED,
    *STATUSES[STATUSES.index(FAILED) + 1 :],
)


def shown_status(status: str, failure_kind: str) -> str:
    """The status as the console shows it: ``cancelled`` for a failed run that was."""
    return SHOWN_CANCELLED if status == FAILED and failure_kind == CANCELLED_KIND else status


class InvalidTransition(ValueError):
    """A status change the lifecycle does not allow; the message says which and why."""

    def __init__(self, current: str, target: str, reason: str) -> None:
        self.current, self.target = current, target
        super().__init__(f"A run cannot go from {current!r} to {target!r}: {reason}")


def check_transition(current: str, target: str, *, failure_reason: str = "") -> None:
    """Raise :class:`InvalidTransition` unless ``current → target`` is allowed.

    A run that fails must say why: an empty reason is refused, so no failed run is ever
    unexplained on the dashboards.
    """
    if current not in TRANSITIONS:
        raise InvalidTransition(current, target, f"{current!r} is not a run status.")
    if target not in TRANSITIONS:
        raise InvalidTransition(current, target, f"{target!r} is not a run status.")
    allowed = TRANSITIONS[current]
    if target not in allowed:
        if not allowed:
            reason = f"{current!r} is final."
        else:
            reason = "allowed next states are " + ", ".join(sorted(allowed)) + "."
        raise InvalidTransition(current, target, reason)
    if target == FAILED and not failure_reason.strip():
        raise InvalidTransition(current, target, "a failed run needs a failure reason.")
