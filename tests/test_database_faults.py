"""A database that fails the worker in the middle of a run (SPEC R9; seed 003: an interrupted
run loses nothing and does nothing twice). Real faults, not mocks: another connection holds
the lock the worker's next checkpoint needs past the worker's wait (SQLite's busy timeout:
"database is locked"; PostgreSQL's lock timeout). The worker leaves the run as a killed
worker would: not failed, its lease left to expire; the sweeper finds it, and the next
worker resumes it from its last checkpoint without calling a tool twice. The lease keeper,
meeting the same lock, tries again while the leases last and gives up only a lease that
expired, stopping its tools. And on PostgreSQL, a server that drops every connection while
the run waits on the model (a restart, a failover) costs the run nothing: the pool replaces
the dead connections.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.db.backends.signals import connection_created
from django.utils import timezone

from runs import flow
from runs.leases import KEEPER, Heartbeat, lease_claim, lease_release, lease_seconds
from runs.models import Message, ModelCall, Run, ToolCall
from runs.services import run_create
from runs.sweeps import runs_to_sweep
from runs.tools.isolation import tool_in_flight, tool_scope
from tests.conftest import SEEDED
from tests.fake_anthropic import Answer, message
from tests.helpers import WORKER, direct_connection_params, drive

pytestmark = SEEDED

READ = message(
    [{"type": "tool_use", "id": "toolu_f1", "name": "readSource", "input": {"path": "docs/a.md"}}],
    stop_reason="tool_use",
)
ANSWER = message([{"type": "text", "text": "It says hello."}])


class Fault:
    """The database failing this process, from another connection of its own."""

    def __init__(self) -> None:
        self.vendor = connection.vendor
        self.holder: Any = None

    def lock(self) -> None:
        """Hold the lock every checkpoint needs: SQLite's write lock, the runs table."""
        if self.vendor == "sqlite":
            self.holder = sqlite3.connect(
                connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False
            )
            self.holder.execute("BEGIN IMMEDIATE")
        else:
            self.holder = psycopg.connect(**direct_connection_params())
            self.holder.execute(f"LOCK TABLE {Run._meta.db_table} IN ACCESS EXCLUSIVE MODE")

    def drop_connections(self) -> None:
        """Terminate every other connection to the database, as a restart does."""
        with psycopg.connect(**direct_connection_params(), autocommit=True) as other:
            other.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )

    def stop(self) -> None:
        if self.holder is not None:
            self.holder.rollback()
            self.holder.close()
            self.holder = None


def _short_wait(sender: Any, connection: Any, **kwargs: Any) -> None:
    """A lock held by another fails a statement after 200 ms, not 20 s (SQLite's busy
    timeout) or never (PostgreSQL waits for a lock by default)."""
    statement = (
        "PRAGMA busy_timeout = 200" if connection.vendor == "sqlite" else "SET lock_timeout = 200"
    )
    connection.cursor().execute(statement)


@pytest.fixture
def fault() -> Iterator[Fault]:
    made = Fault()
    connection_created.connect(_short_wait)
    if connection.connection is not None:  # the test's own, open already (SQLite keeps it)
        _short_wait(None, connection)
    yield made
    connection_created.disconnect(_short_wait)
    made.stop()
    _fresh_connections()


def _fresh_connections() -> None:
    """Connections made under the fault (with its short wait) are closed, pooled ones too:
    the next test's open as usual."""
    connection.close()
    if connection.vendor == "postgresql":
        connection.close_pool()


def question(personas, agent, workspace) -> Run:
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "a.md").write_text("# A\n\nhello\n")
    return run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="What does docs/a.md say?",
        dispatch=False,
    )


def test_a_lock_held_past_the_worker_s_wait_leaves_the_run_to_the_next_worker_losing_nothing(
    personas, agent, workspace, api, fault
):
    def model(body: dict[str, Any]) -> Answer:
        """Reads once, then answers; the fault begins while the second turn is at the model,
        so the worker meets it at the checkpoint that would record that turn."""
        if len(api.requests) == 1:
            return READ
        if len(api.requests) == 2:
            fault.lock()
        return ANSWER

    api.responder = model
    run = question(personas, agent, workspace)
    flow.run_drive(run_id=run.pk, worker=WORKER)  # as drive() does, but reads after the fault

    fault.stop()
    _fresh_connections()
    run.refresh_from_db()
    assert run.status not in ("failed", "completed"), run.failure_reason
    assert run.lease_owner and run.lease_expires_at is not None  # left as a killed worker's
    assert list(ToolCall.objects.filter(run=run).values_list("tool", "status")) == [
        ("readSource", "ok")
    ]
    # A lease later, the sweeper sends it again, and the next worker finishes it.
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert run.pk in runs_to_sweep(queued=lambda: 0)
    run = drive(run)

    assert run.status == "completed", run.failure_reason
    assert run.lease_takeovers == 1
    assert len(api.requests) == 3  # the turn the fault cut off was asked again, once
    assert ToolCall.objects.filter(run=run).count() == 1  # and the read was not repeated
    turns = list(ModelCall.objects.filter(run=run).values_list("turn", flat=True))
    assert turns == sorted(set(turns)) and len(turns) == 2
    said = [m.content for m in Message.objects.filter(run=run, role="assistant").order_by("index")]
    assert len(said) == 2 and "It says hello." in str(said[-1])


def test_a_keeper_that_cannot_renew_tries_again_and_loses_only_a_lease_that_expired(
    personas, agent, workspace, api, fault, caplog
):
    """The lease keeper's renewal meets the lock past its wait: the beat says so and the
    leases are tried again at the next beat while they last; a lease no beat renewed for a
    whole lease is lost, and the tool call its drive has in flight here is stopped."""
    beats = []
    for request in ("a", "b"):
        made = run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request=request,
            dispatch=False,
        )
        lease = lease_claim(run_id=made.pk, worker=WORKER)
        assert lease is not None
        beats.append(Heartbeat(lease))
    expired, current = beats
    expired.renewed -= lease_seconds() + 1  # no beat renewed it for a whole lease
    before = Run.objects.get(pk=current.lease.run_id).lease_expires_at
    stopped: list[str] = []
    fault.lock()
    with tool_scope(expired.scope), tool_in_flight(stop=lambda: stopped.append("stopped")):
        KEEPER._renewed_at = 0.0
        KEEPER.beat([expired, current])
    fault.stop()

    assert "Could not renew the leases of 2 run(s)" in caplog.text
    assert expired.lost and stopped == ["stopped"]
    assert not current.lost
    KEEPER._renewed_at = 0.0
    KEEPER.beat([current])  # the next beat, the database free again
    assert not current.lost
    assert Run.objects.get(pk=current.lease.run_id).lease_expires_at > before
    for beat in beats:
        lease_release(beat.lease)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server restart: PostgreSQL")
def test_a_server_that_drops_every_connection_while_the_run_waits_costs_the_run_nothing(
    personas, agent, workspace, api, fault
):
    def model(body: dict[str, Any]) -> Answer:
        if len(api.requests) == 1:
            return READ
        fault.drop_connections()  # the worker holds none while it waits on the model
        return ANSWER

    api.responder = model
    run = drive(question(personas, agent, workspace))

    assert run.status == "completed", run.failure_reason
    assert run.lease_takeovers == 0 and len(api.requests) == 2
    assert ToolCall.objects.filter(run=run).count() == 1
