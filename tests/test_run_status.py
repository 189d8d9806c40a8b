"""Run status transitions (SPEC R6): each valid one works; each invalid one raises a clear
error and changes nothing."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from runs.core import status as S
from runs.leases import lease_claim
from runs.lifecycle import run_transition
from runs.models import Run

VALID = [(a, b) for a, nexts in S.TRANSITIONS.items() for b in sorted(nexts)]
INVALID = [
    (a, b) for a, b in itertools.product(S.STATUSES, S.STATUSES) if b not in S.TRANSITIONS[a]
]


def test_the_lifecycle_has_the_spec_path_and_final_states():
    path = ["created", "planning", "running", "waiting_for_approval", "verifying", "completed"]
    for current, target in itertools.pairwise(path):
        S.check_transition(current, target)
    S.check_transition("completed", "rolled_back")
    assert {"failed", "rolled_back"} == S.TERMINAL


@pytest.mark.parametrize(("current", "target"), INVALID)
def test_a_transition_outside_the_table_is_refused_with_its_reason(current, target):
    with pytest.raises(S.InvalidTransition) as error:
        S.check_transition(current, target)
    assert f"from {current!r} to {target!r}" in str(error.value)


def test_a_skip_names_the_allowed_next_states():
    with pytest.raises(S.InvalidTransition, match="allowed next states are failed, planning"):
        S.check_transition("created", "completed")


def test_a_failure_without_a_reason_is_refused():
    with pytest.raises(S.InvalidTransition, match="needs a failure reason"):
        S.check_transition("running", "failed", failure_reason="  ")


@given(st.text(), st.text())
def test_unknown_statuses_are_refused_never_accepted(current, target):
    if current in S.TRANSITIONS and target in S.TRANSITIONS[current]:
        return
    with pytest.raises(S.InvalidTransition):
        S.check_transition(current, target, failure_reason="x")


def _put(run: Run, status: str) -> None:
    Run.objects.filter(pk=run.pk).update(status=status)


@pytest.mark.django_db
@pytest.mark.parametrize(("current", "target"), VALID)
def test_each_valid_transition_changes_the_run_and_records_an_event(run, current, target):
    _put(run, current)
    reason = "the tool crashed" if target == "failed" else ""
    run_transition(run_id=run.pk, to=target, failure_reason=reason)
    run.refresh_from_db()
    assert run.status == target
    event = run.events.order_by("-seq").first()
    assert (event.type, event.payload["from"], event.payload["to"]) == (
        "status.changed",
        current,
        target,
    )
    if target == "failed":
        assert run.failure_reason == "the tool crashed"
        assert event.payload["reason"] == "the tool crashed"
    if target in ("completed", "failed", "rolled_back"):
        assert run.finished_at is not None


@pytest.mark.django_db
@pytest.mark.parametrize(("current", "target"), INVALID)
def test_each_invalid_transition_raises_and_changes_nothing(run, current, target):
    _put(run, current)
    before = list(run.events.values_list("seq", flat=True))
    with pytest.raises(S.InvalidTransition):
        run_transition(run_id=run.pk, to=target, failure_reason="x")
    run.refresh_from_db()
    assert run.status == current
    assert list(run.events.values_list("seq", flat=True)) == before
    assert run.event_seq == before[-1]


@pytest.mark.django_db
def test_a_run_is_claimed_once_however_often_a_worker_tries(run):
    first = lease_claim(run_id=run.pk, worker="w1")
    assert first is not None and first.token == 1
    assert lease_claim(run_id=run.pk, worker="w2") is None  # the lease is live
    run.refresh_from_db()
    assert (run.lease_owner, run.lease_token) == ("w1", 1)


@pytest.mark.django_db
def test_a_claim_returns_the_lease_it_wrote_and_counts_only_takeovers(run):
    Run.objects.filter(pk=run.pk).update(received_by="node-a@host")
    first = lease_claim(run_id=str(run.pk), worker="w1")  # as a task's argument: a string
    assert first is not None and (first.token, first.takeovers) == (1, 0)
    run.refresh_from_db()
    assert (run.lease_owner, run.received_by, run.lease_takeovers) == ("w1", "", 0)
    assert run.lease_expires_at > timezone.now()
    # Its worker froze past the expiry: the next claim is a takeover, with a new token.
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    second = lease_claim(run_id=run.pk, worker="w2")
    assert second is not None and (second.token, second.takeovers) == (2, 1)
    run.refresh_from_db()
    assert (run.lease_owner, run.lease_token, run.lease_takeovers) == ("w2", 2, 1)
    # A run waiting for a person, or ended, is nobody's to claim, lease or not.
    for status in (S.WAITING_FOR_APPROVAL, S.COMPLETED):
        Run.objects.filter(pk=run.pk).update(status=status, lease_expires_at=None)
        assert lease_claim(run_id=run.pk, worker="w3") is None
    run.refresh_from_db()
    assert (run.lease_owner, run.lease_token) == ("w2", 2)


@pytest.mark.django_db
def test_claiming_a_vanished_run_is_harmless():
    import uuid

    assert lease_claim(run_id=uuid.uuid4(), worker="w1") is None
