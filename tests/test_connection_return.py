"""A run's thread holds a database connection only while it talks to the database (issue
17): on PostgreSQL it gives its pooled connection back before a tool runs and after each
step, so the process's other runs and its lease keeper are never left waiting for the
pool (the eval suite's runs lost their leases so, their workers alive). SQLite has no
pool: there a thread keeps its connection."""

from __future__ import annotations

from django.db import connection, transaction

from runs.flow import driver
from runs.models import Run
from runs.tools.isolation import tool_in_flight
from tests.conftest import SEEDED
from tests.helpers import drive

pytestmark = SEEDED
POOLED = connection.vendor != "sqlite"


def test_a_tool_in_flight_holds_no_pooled_connection(run):
    Run.objects.filter(pk=run.pk).exists()
    assert connection.connection is not None
    with tool_in_flight():
        held = connection.connection is not None
    assert held is not POOLED
    assert Run.objects.filter(pk=run.pk).exists()  # the next query takes one again


def test_inside_a_transaction_the_connection_stays_the_transaction_s(run):
    with transaction.atomic():
        Run.objects.select_for_update().get(pk=run.pk)
        with tool_in_flight():
            assert connection.connection is not None and connection.in_atomic_block


def test_each_step_of_a_drive_begins_without_the_last_one_s_connection(run, monkeypatch):
    advance, held = driver._advance, []

    def watched(state):
        held.append(connection.connection is not None)
        return advance(state)

    monkeypatch.setattr(driver, "_advance", watched)
    assert drive(run).status in ("completed", "waiting_for_approval")
    assert len(held) >= 3, held
    assert held[0]  # the claim's, the first step's
    assert held[1:] == [not POOLED] * (len(held) - 1)
