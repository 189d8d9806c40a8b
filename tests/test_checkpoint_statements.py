"""What a run writes, statement by statement (issue 17 §3): a loop step is one
transaction with one statement per table (on PostgreSQL one statement, committed by
itself); the fixed flow rides three checkpoints; a transition the worker writes is guarded
by the status it starts from; the checkpoint's own inserts store what Django's would."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from runs.core import status as run_status
from runs.flow import synthesize
from runs.flow.checkpoints import checkpoint, defer_event, defer_transition
from runs.flow.driver_state import Driver
from runs.flow.row_inserts import rows_insert
from runs.leases import Heartbeat, LeaseLost, lease_claim, lease_release
from runs.models import Artifact, Message, ModelCall, Run, RunEvent, Step, ToolCall
from runs.services import run_create
from tests.conftest import SEEDED
from tests.fake_anthropic import message
from tests.helpers import drive

pytestmark = SEEDED

TRANSACTION_CONTROL = re.compile(r"^\s*(BEGIN|SAVEPOINT|RELEASE|ROLLBACK|COMMIT)", re.I)


def read(n: int, tool: str = "readSource", arguments: dict[str, Any] | None = None):
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": tool}
    use["input"] = arguments if arguments is not None else {"path": "docs/notes.md"}
    return message([use], stop_reason="tool_use")


@pytest.fixture
def notes(workspace):
    (workspace.root_path / "docs").mkdir(exist_ok=True)
    (workspace.root_path / "docs" / "notes.md").write_text("# Notes\n\nThe loop waits.\n")
    return workspace


def asked(personas, agent, workspace) -> Run:
    """The operator's run about docs/notes.md, handed to no worker."""
    return run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="What does docs/notes.md say?",
        dispatch=False,
    )


@contextmanager
def statements_and_commits() -> Iterator[tuple[list[str], list[int]]]:
    """Every statement this thread's connection runs (the lease keeper has its own), with
    a marker at each model turn, and how many transactions committed before each."""
    found: list[str] = []
    commits = [0]
    turn = synthesize._model_turn
    real_commit = connection.commit

    def marked(*args: Any, **kwargs: Any) -> Any:
        found.append(f"-- turn, after commit {commits[0]}")
        return turn(*args, **kwargs)

    def counted() -> None:
        commits[0] += 1
        real_commit()

    def wrapper(execute, sql, params, many, context):
        found.append(sql)
        return execute(sql, params, many, context)

    synthesize._model_turn = marked
    connection.commit = counted  # type: ignore[method-assign]
    try:
        with connection.execute_wrapper(wrapper):
            yield found, commits
    finally:
        synthesize._model_turn = turn
        del connection.commit


def tables_written(statements: list[str]) -> list[tuple[str, str]]:
    """(verb, table) of each statement that is not transaction control."""
    out = []
    for sql in statements:
        if TRANSACTION_CONTROL.match(sql) or sql.startswith("-- turn"):
            continue
        verb = sql.split()[0].upper()
        table = re.search(r'(?:INTO|UPDATE|FROM)\s+"?(\w+)"?', sql)
        out.append((verb, table.group(1) if table else "?"))
    return out


def test_a_loop_step_is_one_transaction_with_one_statement_per_table(personas, agent, notes, api):
    api.answers += [read(1), read(2), read(3), message([{"type": "text", "text": "Done."}])]
    run = asked(personas, agent, notes)
    with statements_and_commits() as (found, _):
        run = drive(run)
    assert run.status == "completed", run.failure_reason
    marks = [i for i, sql in enumerate(found) if sql.startswith("-- turn")]
    # Between the second turn and the third: the second turn's call and its step, whole.
    step = found[marks[1] + 1 : marks[2]]
    tables = [
        ("UPDATE", "runs_run"),  # the fence, the loop's state, the usage, the event numbers
        ("INSERT", "runs_modelcall"),
        ("INSERT", "runs_message"),  # the assistant's turn and the tool's result, together
        ("INSERT", "runs_toolcall"),
        ("INSERT", "runs_runevent"),  # model.turn and tool.call, together
    ]
    committed = [int(found[m].rsplit(" ", 1)[1]) for m in marks]
    if connection.vendor == "postgresql":  # one statement, its own transaction
        [statement] = [sql for sql in step if not TRANSACTION_CONTROL.match(sql)]
        assert statement.startswith("WITH f AS (UPDATE")
        parts = re.findall(r'(UPDATE|INSERT INTO) "(\w+)"', statement)
        assert [(verb.split()[0], table) for verb, table in parts] == tables
        assert committed[2] - committed[1] == 0
        return
    assert tables_written(step) == tables
    assert committed[2] - committed[1] == 1  # one transaction for the whole step


def test_the_fixed_flow_of_a_read_only_run_rides_three_checkpoints(personas, agent, notes, api):
    """Created → planning → running with intake's steps in one; the session's start in
    another; the model's last turn, running → verifying → completed and the rollup in a
    third; and one per step."""
    api.answers += [
        read(1),
        read(2, "searchDocs", {"query": "loop"}),
        message([{"type": "text", "text": "It waits."}]),
    ]
    run = asked(personas, agent, notes)
    with statements_and_commits() as (found, commits):
        run = drive(run)
    assert run.status == "completed", run.failure_reason
    events = list(run.events.order_by("seq").values_list("type", "payload"))
    statuses = [p["to"] for kind, p in events if kind == "status.changed"]
    assert statuses == ["planning", "running", "verifying", "completed"]
    # The lease's claim; intake's checkpoint; the session's start; the two steps (and
    # searchDocs' index of its folder, in a transaction of its own); the end, with the
    # model's last turn held for it. The release is one statement, outside them.
    assert commits[0] <= 7, commits[0]
    writes = [t for t in tables_written(found) if t[0] != "SELECT"]
    assert len(writes) <= 33, writes


def test_a_transition_whose_run_moved_meanwhile_writes_nothing(personas, agent, workspace, api):
    """A worker frozen past its lease whose run was cancelled (failed without it) wakes
    and checkpoints planning → running: the row is no longer in the status the change
    starts from, so the fence refuses, and nothing of the checkpoint is written."""
    run = asked(personas, agent, workspace)
    lease = lease_claim(run_id=run.pk, worker="test-worker:1")
    assert lease is not None
    driver = Driver(lease=lease, beat=Heartbeat(lease))
    run = Run.objects.get(pk=run.pk)
    defer_transition(driver, run, run_status.PLANNING)
    defer_event(driver, "task.structured", {"intent": "question"})
    before = Run.objects.values_list("event_seq", flat=True).get(pk=run.pk)
    Run.objects.filter(pk=run.pk).update(status=run_status.FAILED, failure_reason="cancelled")
    with pytest.raises(LeaseLost, match="is failed now, not created"), checkpoint(driver):
        pass
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.event_seq) == (run_status.FAILED, before)
    assert not RunEvent.objects.filter(run=run, type__in=["status.changed", "task.structured"])
    lease_release(lease)


FINISHED = timezone.now()


def _rows(run: Run) -> list[Any]:
    call = ToolCall(run=run, workspace=run.workspace, tool_use_id="t1", tool="readSource")
    call.arguments, call.output = {"path": "docs/ü.md"}, {"ok": True, "content": "x\x01"}
    return [
        ModelCall(run=run, turn=1, model="m", text="hé", context={"layers": []}, cost_usd=None),
        Message(run=run, index=0, role="user", kind="task", content=[{"type": "text"}]),
        Message(run=run, index=1, role="assistant", kind="assistant", content="text"),
        call,
        Artifact(tool_call=call, content="full", size=4, sha256="0" * 64),
        Step(run=run, index=1, name="intake", input={"a": [1, 2]}, finished_at=FINISHED),
        RunEvent(run=run, seq=1000, type="x", payload={"k": "v"}),
    ]


def _stored(row: Any) -> dict[str, Any]:
    fields = [f.attname for f in type(row)._meta.concrete_fields if not f.primary_key]
    found = type(row).objects.filter(pk=row.pk).values(*fields).get()
    return {k: v for k, v in found.items() if k not in ("created_at", "started_at")}


def _stored_alike(mine: list[Any], django: list[Any]) -> None:
    """Our rows, inserted, hold what Django's own inserts of the same rows hold (but the
    run and tool call each belongs to)."""
    for a, b in zip(mine, django, strict=True):
        assert a.pk is not None and not a._state.adding
        got, want = _stored(a), _stored(b)
        for key in ("run_id", "tool_call_id"):
            if key in want:
                got.pop(key), want.pop(key)
        assert got == want, type(a).__name__


def test_the_checkpoint_s_inserts_store_what_bulk_create_stores(personas, agent, workspace, api):
    """Each model a checkpoint inserts, with keys of both kinds (UUID and auto-incremented),
    JSON, NUL-free text, defaults and auto_now_add, against Django's own bulk_create."""
    ours = run_create(
        agent=agent, workspace=workspace, requester=personas.operator, request="a", dispatch=False
    )
    theirs = run_create(
        agent=agent, workspace=workspace, requester=personas.operator, request="b", dispatch=False
    )
    mine, django = _rows(ours), _rows(theirs)
    with transaction.atomic(), connection.cursor() as cursor:
        for row in mine:
            rows_insert([row], cursor)
        for row in django:
            type(row).objects.bulk_create([row])
    _stored_alike(mine, django)
    assert ModelCall.objects.get(pk=mine[0].pk).created_at is not None  # auto_now_add


def test_many_rows_go_in_statements_under_the_parameter_limit(personas, agent, workspace, api):
    run = run_create(
        agent=agent, workspace=workspace, requester=personas.operator, request="a", dispatch=False
    )
    rows = [
        RunEvent(run=run, seq=1000 + i, type="x", payload={"i": i, "id": str(uuid.uuid4())})
        for i in range(1, 701)
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        rows_insert(rows, cursor)
    stored = RunEvent.objects.filter(run=run, type="x").order_by("seq")
    assert list(stored.values_list("payload__i")) == [(i,) for i in range(1, 701)]
    assert all(row.pk is not None for row in rows)


@pytest.mark.parametrize("model", [RunEvent, Message, ModelCall, ToolCall, Step, Artifact])
def test_each_field_s_value_goes_in_as_django_prepares_it(model, monkeypatch):
    """The values passed on as they are (a text field's str, a number field's int, a bool),
    the keys (a UUID, an int) and aware datetimes taken straight to the backend's
    adaptation, and every other value of the same fields, prepared field by field, against
    the field's own pre_save and get_db_prep_save on this database's connection."""
    import datetime as dt
    import enum
    import uuid
    import warnings
    from decimal import Decimal
    from zoneinfo import ZoneInfo

    from django.core.exceptions import ValidationError
    from django.db.models import F
    from django.utils import timezone
    from django.utils.functional import lazy

    from runs.flow.row_inserts import Moment, _preparer

    class Level(enum.IntEnum):
        HIGH = 3

    class Later(dt.datetime):
        pass

    class Documents(dict):  # not exactly a dict: Django's own path
        pass

    now = dt.datetime(2026, 12, 7, 10, 30, 15, 123456, tzinfo=dt.UTC)
    monkeypatch.setattr(timezone, "now", lambda: now)  # auto_now_add's value, both ways
    lazy_text = lazy(lambda: "lazy text", str)()
    key = uuid.uuid4()
    values: list[Any] = ["", "text", "ünï\u2028", 0, 7, 2**40, True, False, None, Level.HIGH]
    values += [Decimal("5"), lazy_text, F("id")]
    values += [key, key.hex, str(key), str(7)]
    values += [now, now.astimezone(ZoneInfo("Europe/Paris")), now.replace(tzinfo=None)]
    values += [Later(2026, 1, 2, tzinfo=dt.UTC), dt.date(2026, 1, 2), "2026-01-02 03:04:05"]
    values += [{"a": [1, "ü"]}, [], [{"b": None}], Documents(k=1), {1: "x"}, {"a": {1, 2}}]
    db = transaction.get_connection()
    checked: set[str] = set()
    for field in model._meta.concrete_fields:
        if field.get_internal_type() not in {
            "CharField",
            "TextField",
            "BooleanField",
            "IntegerField",
            "BigIntegerField",
            "SmallIntegerField",
            "PositiveIntegerField",
            "PositiveBigIntegerField",
            "PositiveSmallIntegerField",
            "UUIDField",
            "ForeignKey",
            "DateTimeField",
            "JSONField",
        }:
            continue
        prepare = _preparer(field)
        for value in values:
            row = model()
            setattr(row, field.attname, value)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a naive datetime's
                try:
                    want = field.get_db_prep_save(field.pre_save(row, True), db)
                except (TypeError, ValueError, ValidationError) as refused:
                    with pytest.raises(type(refused)):
                        prepare(row, db, Moment())
                    continue
                got = prepare(row, db, Moment())
            if hasattr(want, "obj"):  # PostgreSQL's Jsonb: the document, and how it is sent
                assert (type(got), got.obj) == (type(want), want.obj), (field, value)
                assert _sent(got) == _sent(want), (field, value)
            else:
                assert (type(got), got) == (type(want), want) or (got is want), (field, value)
            checked.add(field.get_internal_type())
    assert checked >= {"CharField", "ForeignKey", "DateTimeField"}
    if any(f.get_internal_type() == "JSONField" for f in model._meta.concrete_fields):
        assert "JSONField" in checked


def _sent(document: Any) -> Any:
    """A Jsonb's text as psycopg sends it, or the error it raises then."""
    try:
        return document.dumps(document.obj)
    except (TypeError, ValueError) as error:
        return type(error)


def test_whether_a_field_takes_the_insert_s_time_is_read_at_each_insert(
    personas, agent, workspace, api, monkeypatch
):
    """As Django's pre_save reads auto_now_add at each save: one that is turned off for a
    while (a test backdating events, say) inserts the time the row was given, though the
    table's inserts were prepared while it was on."""
    run = asked(personas, agent, workspace)
    given = timezone.now() - timedelta(days=3)
    with transaction.atomic(), connection.cursor() as cursor:
        rows_insert([RunEvent(run=run, seq=2000, type="x", payload={})], cursor)
        monkeypatch.setattr(RunEvent._meta.get_field("created_at"), "auto_now_add", False)
        rows_insert([RunEvent(run=run, seq=2001, type="x", payload={}, created_at=given)], cursor)
    assert RunEvent.objects.get(run=run, seq=2001).created_at == given
    assert RunEvent.objects.get(run=run, seq=2000).created_at > given


def test_the_rows_of_one_checkpoint_are_stamped_with_one_time(personas, agent, workspace, api):
    """Every auto_now_add field of one checkpoint's rows, whatever their table, holds the
    one time the checkpoint took (they commit in one transaction), set on the rows too; a
    time the row was given (a tool call's start) is its own; the next checkpoint takes
    its own time."""
    run = asked(personas, agent, workspace)
    lease = lease_claim(run_id=run.pk, worker="test-worker:1")
    assert lease is not None
    driver = Driver(lease=lease, beat=Heartbeat(lease))
    first = _rows(run)[:4]  # a model call, two messages, a tool call
    call = first[3]
    call.started_at = started = timezone.now() - timedelta(seconds=5)
    driver.pending.rows.extend(first)
    defer_event(driver, "x", {"n": 1})
    defer_event(driver, "x", {"n": 2})
    with checkpoint(driver):
        pass
    events = list(RunEvent.objects.filter(run=run, type="x"))
    stamps = {row.created_at for row in first[:3]} | {event.created_at for event in events}
    assert len(events) == 2 and len(stamps) == 1 and None not in stamps
    (moment,) = stamps
    stored = {ModelCall.objects.get(pk=first[0].pk).created_at}
    pks = [row.pk for row in first[1:3]]
    stored |= set(Message.objects.filter(pk__in=pks).values_list("created_at", flat=True))
    assert stored == {moment}
    assert ToolCall.objects.get(pk=call.pk).started_at == started < moment
    defer_event(driver, "y", {})
    with checkpoint(driver):
        pass
    assert RunEvent.objects.get(run=run, type="y").created_at > moment
    lease_release(lease)


def test_a_step_extends_the_lease_only_when_the_keeper_is_late(personas, agent, workspace, api):
    """The keeper renews every lease of its process every third of a lease; a step's fence
    checks the token every time but extends the lease only when neither renewed it for a
    third of one (the keeper starved, say), and then counts as a renewal."""
    from types import SimpleNamespace

    from runs.leases import lease_seconds

    run = run_create(
        agent=agent, workspace=workspace, requester=personas.operator, request="a", dispatch=False
    )
    lease = lease_claim(run_id=run.pk, worker="test@host:1")
    assert lease is not None
    claimed = Run.objects.get(pk=run.pk).lease_expires_at
    beat = SimpleNamespace(renewed=time.monotonic(), cancelled=False, lost=False)
    driver = Driver(lease=lease, beat=beat)  # type: ignore[arg-type]
    defer_event(driver, "note", {"n": 1})
    with checkpoint(driver):
        pass
    assert Run.objects.get(pk=run.pk).lease_expires_at == claimed  # renewed a moment ago
    beat.renewed -= lease_seconds() / 2
    defer_event(driver, "note", {"n": 2})
    with checkpoint(driver):
        pass
    assert Run.objects.get(pk=run.pk).lease_expires_at > claimed
    assert beat.renewed > time.monotonic() - lease_seconds() / 3
    beat.renewed = late = time.monotonic() - lease_seconds() / 2
    defer_event(driver, "note", {"n": "rolled back"})
    with pytest.raises(RuntimeError), checkpoint(driver):
        raise RuntimeError("the step failed")
    assert beat.renewed == late  # an extension that rolled back renewed nothing
    driver.pending = type(driver.pending)()
    Run.objects.filter(pk=run.pk).update(lease_token=lease.token + 1)  # another worker's now
    defer_event(driver, "note", {"n": 3})
    with pytest.raises(LeaseLost), checkpoint(driver):  # the token is checked all the same
        pass


# --- PostgreSQL: a checkpoint as one statement (runs.flow.checkpoint_statement) -----------
def _postgresql_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("a checkpoint is one statement on PostgreSQL only")


def _claimed(personas, agent, workspace, request: str = "a") -> tuple[Run, Driver]:
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=request,
        dispatch=False,
    )
    lease = lease_claim(run_id=run.pk, worker="test@host:1")
    assert lease is not None
    return Run.objects.get(pk=run.pk), Driver(lease=lease, beat=Heartbeat(lease))


def _more_rows(rows: list[Any], user: Any) -> list[Any]:
    """Beside ``_rows``: a second model call with a cost and a price's key, the tool call
    asked by a person (an integer key), a write record (bytes, a small number)."""
    from decimal import Decimal

    from runs.models import ModelPrice, WriteRecord

    call = next(row for row in rows if isinstance(row, ToolCall))
    call.requested_by = user
    run = call.run
    price, _ = ModelPrice.objects.get_or_create(
        model="claude-statement-test",
        version=1,
        defaults={
            "effective_from": FINISHED,
            "input_per_mtok": Decimal(3),
            "output_per_mtok": Decimal(15),
            "cache_write_per_mtok": Decimal("3.75"),
            "cache_read_per_mtok": Decimal("0.3"),
        },
    )
    return [
        *rows,
        ModelCall(run=run, turn=2, model="m", cost_usd=Decimal("0.012345"), price=price),
        WriteRecord(tool_call=call, order=3, path="docs/a.md", before=b"\x00a", after=None),
    ]


def test_one_statement_stores_what_bulk_create_stores(personas, agent, workspace, api, monkeypatch):
    """Every model a step may insert, an artifact and a write of the tool call inserted
    beside it (their key checked at the commit), several rows of a table in their order,
    the run's fields and counters, events numbered after the run's last one and published
    once committed, and the lease extended when the keeper is late, in one statement
    outside any transaction."""
    _postgresql_only()
    from runs.flow import checkpoints
    from runs.flow.checkpoints import defer_added, defer_fields, defer_row, pending_flush
    from runs.leases import lease_seconds

    published: list[list[int]] = []
    monkeypatch.setattr(
        checkpoints, "events_publish", lambda events: published.append([e.seq for e in events])
    )
    ours, driver = _claimed(personas, agent, workspace)
    theirs = run_create(
        agent=agent, workspace=workspace, requester=personas.operator, request="b", dispatch=False
    )
    user = personas.operator
    mine = [row for row in _more_rows(_rows(ours), user) if not isinstance(row, RunEvent)]
    django = [row for row in _more_rows(_rows(theirs), user) if not isinstance(row, RunEvent)]
    for row in mine:
        defer_row(driver, row)
    defer_fields(driver, ours, stage="synthesize")
    defer_added(driver, ours, input_tokens=5)
    defer_event(driver, "one", {"n": 1})
    defer_event(driver, "two", {"n": 2})
    before, expires = ours.event_seq, ours.lease_expires_at
    driver.beat.renewed -= lease_seconds() / 2  # the keeper is late: the step extends it
    with statements_and_commits() as (found, commits):
        pending_flush(driver)
    assert [sql.split()[0] for sql in found] == ["WITH"] and commits == [0]
    for row in django:
        type(row).objects.bulk_create([row])
    _stored_alike(mine, django)
    turns = ModelCall.objects.filter(run=ours).values_list("pk", "turn")
    assert sorted(turns) == sorted((row.pk, row.turn) for row in mine if type(row) is ModelCall)
    stored = Run.objects.get(pk=ours.pk)
    assert (stored.stage, stored.input_tokens, stored.event_seq) == ("synthesize", 5, before + 2)
    assert stored.lease_expires_at > expires
    assert driver.beat.renewed > time.monotonic() - lease_seconds() / 3
    events = list(RunEvent.objects.filter(run=ours).order_by("seq").values_list("seq", "type"))
    assert events[-2:] == [(before + 1, "one"), (before + 2, "two")]
    assert published == [[before + 1, before + 2]]
    assert not driver.pending
    lease_release(driver.lease)


def test_the_step_s_statement_runs_prepared_on_its_connection(personas, agent, notes, api):
    """PostgreSQL took as long to plan the step's statement as to run it, and it is the
    same statement every step, its values aside: it runs prepared on whichever of the
    pool's connections sends it, and each step still stores its rows."""
    _postgresql_only()
    steps = 6
    api.answers += [read(n) for n in range(1, steps + 1)]
    api.answers.append(message([{"type": "text", "text": "Done."}]))
    run = asked(personas, agent, notes)
    prepared: list[bool] = []

    def wrapper(execute, sql, params, many, context):
        if not sql.startswith("WITH f AS (UPDATE"):
            return execute(sql, params, many, context)
        # Sent as the server holds it, in its own placeholders (psycopg parses none);
        # asked on the connection that sent it, by that text: how many times it ran
        # prepared (another test's statement, or this one prepared again after a failure,
        # may be held on the pooled connection beside it).
        numbers = [int(n) for n in re.findall(r"\$(\d+)", sql)]
        assert "%s" not in sql and numbers == list(range(1, len(params) + 1)), sql[:300]
        text = sql
        on_it = context["connection"].connection.execute
        plans = (
            "SELECT coalesce(sum(generic_plans + custom_plans), 0)"
            " FROM pg_prepared_statements WHERE statement = %s"
        )
        before = on_it(plans, [text]).fetchone()[0]
        result = execute(sql, params, many, context)
        prepared.append(on_it(plans, [text]).fetchone()[0] == before + 1)
        return result

    with connection.execute_wrapper(wrapper):
        run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert len(prepared) >= steps and all(prepared), prepared
    calls = ToolCall.objects.filter(run=run)
    assert [c.status for c in calls] == ["ok"] * steps
    assert Message.objects.filter(run=run, kind="tool_result").count() == steps
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_one_statement_whose_fence_refuses_writes_nothing(
    personas, agent, workspace, api, monkeypatch
):
    """Another worker took the run: the statement's fence finds no row, so its inserts
    take none either; what the driver held is dropped, as a lost checkpoint's is."""
    _postgresql_only()
    from runs.flow import checkpoints
    from runs.flow.checkpoints import defer_row, pending_flush

    published: list[Any] = []
    monkeypatch.setattr(checkpoints, "events_publish", published.append)
    run, driver = _claimed(personas, agent, workspace)
    defer_row(driver, ModelCall(run=run, turn=1, model="m", text="lost"))
    defer_row(driver, Message(run=run, index=0, role="user", kind="task", content=[]))
    defer_event(driver, "lost", {})
    Run.objects.filter(pk=run.pk).update(lease_token=driver.lease.token + 1, lease_owner="other")
    with (
        statements_and_commits() as (found, _),
        pytest.raises(LeaseLost, match="now leased by other"),
    ):
        pending_flush(driver)
    assert found[0].startswith("WITH f AS (UPDATE")  # then the refusal's own reading
    assert not ModelCall.objects.filter(run=run) and not Message.objects.filter(run=run)
    assert not RunEvent.objects.filter(run=run, type="lost")
    assert Run.objects.get(pk=run.pk).event_seq == run.event_seq
    assert not driver.pending and not published


def test_one_statement_refuses_a_value_its_column_refuses(personas, agent, workspace, api):
    """Each value is cast to its column's type without the length, so a text longer than
    its column is an error, as in an INSERT of it, not cut short; the driver keeps what it
    held (the run's failure then records it) and nothing is written."""
    _postgresql_only()
    from django.db import DataError

    from runs.flow.checkpoints import defer_row, pending_flush

    run, driver = _claimed(personas, agent, workspace)
    too_long = "x" * (ModelCall._meta.get_field("model").max_length + 1)
    defer_row(driver, ModelCall(run=run, turn=1, model=too_long, text="t"))
    defer_event(driver, "kept", {})
    with statements_and_commits() as (found, _), pytest.raises(DataError):
        pending_flush(driver)
    assert [sql.split()[0] for sql in found] == ["WITH"]
    assert not ModelCall.objects.filter(run=run)
    assert len(driver.pending.rows) == 1 and driver.pending.events == [("kept", {})]
    driver.pending.rows[0].model = "m"
    pending_flush(driver)
    assert ModelCall.objects.filter(run=run, model="m").count() == 1
    assert RunEvent.objects.filter(run=run, type="kept").count() == 1
    lease_release(driver.lease)


def test_a_connection_s_checkpoints_share_its_cursor_and_a_closed_one_is_made_again(
    personas, agent, workspace, api
):
    """The statement's raw cursor is the connection's, kept from one checkpoint to the next
    (psycopg's adaptation caches are the cursor's); one closed meanwhile is made again."""
    _postgresql_only()
    from django.db import connection

    from runs.flow.checkpoints import defer_row, pending_flush

    run, driver = _claimed(personas, agent, workspace)
    kept = []
    for turn in (1, 2, 3):
        defer_row(driver, ModelCall(run=run, turn=turn, model="m", text="t"))
        defer_event(driver, "kept", {"turn": turn})
        pending_flush(driver)
        kept.append(connection.connection._harness_checkpoint_cursor)
        if turn == 2:
            kept[-1].close()
    assert kept[0] is kept[1] and kept[2] is not kept[1] and not kept[2].closed
    assert ModelCall.objects.filter(run=run).count() == 3
    assert RunEvent.objects.filter(run=run, type="kept").count() == 3
    lease_release(driver.lease)


def test_a_checkpoint_too_big_for_one_statement_is_a_transaction(
    personas, agent, workspace, api, monkeypatch
):
    _postgresql_only()
    from runs.flow import checkpoint_statement
    from runs.flow.checkpoints import pending_flush

    monkeypatch.setattr(checkpoint_statement, "MAX_PARAMETERS", 10)
    run, driver = _claimed(personas, agent, workspace)
    for i in range(3):
        defer_event(driver, "many", {"i": i})
    with statements_and_commits() as (found, commits):
        pending_flush(driver)
    assert not [sql for sql in found if sql.startswith("WITH")] and commits == [1]
    stored = RunEvent.objects.filter(run=run, type="many").order_by("seq")
    assert [e.payload["i"] for e in stored] == [0, 1, 2]
    lease_release(driver.lease)


def test_a_checkpoint_statement_is_numbered_as_postgresql_writes_its_values():
    """Its ``%s`` become ``$1``, ``$2``, … in order; a statement with any other ``%`` is
    not one built here, and is refused rather than sent with its values misplaced."""
    from runs.flow.checkpoint_statement import _numbered

    assert _numbered("UPDATE t SET a = %s, b = b + %s WHERE id = %s") == (
        "UPDATE t SET a = $1, b = b + $2 WHERE id = $3"
    )
    assert _numbered("SELECT 1") == "SELECT 1"
    with pytest.raises(ValueError, match="literal %"):
        _numbered("SELECT %s WHERE name LIKE 'a%%'")
