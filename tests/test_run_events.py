"""The append-only event log: numbering from 1, no rewriting, concurrent appenders."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection, transaction

from runs.events import run_event_append
from runs.models import AppendOnlyError, Run, RunEvent
from tests.conftest import EVERYWHERE


@pytest.mark.django_db
def test_events_are_numbered_from_one_per_run(run, agent, workspace, personas):
    from runs.services import run_create

    other = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="Summarize docs/release-notes.md",
        dispatch=False,
    )
    run_event_append(run_id=run.pk, type="note", payload={"n": 1})
    run_event_append(run_id=run.pk, type="note", payload={"n": 2})
    assert list(run.events.values_list("seq", flat=True)) == [1, 2, 3]
    assert list(other.events.values_list("seq", flat=True)) == [1]


@pytest.mark.django_db
def test_a_recorded_event_cannot_be_changed_or_deleted(run):
    event = run.events.get()
    event.type = "forged"
    with pytest.raises(AppendOnlyError):
        event.save()
    with pytest.raises(AppendOnlyError):
        event.delete()
    with pytest.raises(AppendOnlyError):
        RunEvent.objects.filter(run=run).update(type="forged")
    with pytest.raises(AppendOnlyError):
        RunEvent.objects.filter(run=run).delete()
    assert RunEvent.objects.get(pk=event.pk).type == "run.created"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"type": ""}, "1 to 64"),
        ({"type": "x" * 65}, "1 to 64"),
        ({"type": "ok", "payload": ["a"]}, "JSON object"),
    ],
)
def test_a_malformed_event_is_refused_and_nothing_is_numbered(run, kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_event_append(run_id=run.pk, **kwargs)
    run.refresh_from_db()
    assert run.event_seq == 1


@pytest.mark.django_db
def test_an_event_for_an_unknown_run_is_refused():
    with pytest.raises(Run.DoesNotExist):
        run_event_append(run_id=uuid.uuid4(), type="note")


@pytest.mark.django_db
def test_a_rolled_back_append_leaves_no_event_and_no_gap(run):
    with pytest.raises(RuntimeError), transaction.atomic():
        run_event_append(run_id=run.pk, type="note")
        raise RuntimeError("the caller failed")
    event = run_event_append(run_id=run.pk, type="note")
    assert event.seq == 2


@EVERYWHERE
def test_concurrent_appenders_get_distinct_consecutive_numbers(run):
    errors: list[BaseException] = []

    def append_many() -> None:
        try:
            for i in range(10):
                run_event_append(run_id=run.pk, type="note", payload={"i": i})
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=append_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert list(run.events.values_list("seq", flat=True)) == list(range(1, 42))
