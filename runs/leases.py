"""Who runs a run right now (SPEC R9): a lease in the run's own row, with a fencing token.

The database is the source of truth, not the broker: the filesystem broker never
redelivers a task whose worker died, and Redis redelivers only after its visibility
timeout (../shared/NOTES.md). So:

- a worker *claims* a run with one conditional update (free or expired lease only), which
  also increments ``lease_token``; only one claimant can win; taking over an expired lease
  (its worker died or froze) also counts in ``lease_takeovers``;
- while it works, its process's lease keeper (one thread for all the runs the process
  drives) renews the lease; every checkpoint is written inside
  :func:`fenced`, which re-reads the token under the row lock, so a worker that lost its
  lease (frozen past the expiry, then woken) cannot write another step;
- a periodic sweeper (``runs/sweeps.py``) re-dispatches active runs whose lease expired;
  a run waiting for a person is not active in this sense and holds no lease, nor does an
  ended one (the transition that ends it or makes it wait clears the lease fields, and
  neither the heartbeat nor a fence sets them again).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections, connection, transaction
from django.db.models import Case, DateTimeField, Q, Value, When
from django.utils import timezone

from .core import status as run_status
from .lifecycle import RUN_EXECUTE
from .models import Run
from .tools.isolation import tool_calls_in_flight, tool_processes_stop, tool_scope

logger = logging.getLogger(__name__)

CLAIMABLE = run_status.CLAIMABLE


class LeaseLost(Exception):
    """Another worker owns the run now; this one must stop without writing."""


@dataclass(frozen=True)
class Lease:
    run_id: Any
    token: int
    worker: str
    takeovers: int = 0  # how many workers lost this run before this one (see the model)


def lease_seconds() -> float:
    return float(settings.HARNESS_RUN_LEASE_SECONDS)


def lease_claim(*, run_id: Any, worker: str) -> Lease | None:
    """Take the run if nobody holds a live lease on it; None when another worker does.

    One conditional UPDATE, committed by itself, that returns the new token: like
    :func:`fence_statement`, SQL from the model's own names (every run's every claim
    compiled a queryset and read the token back in a transaction of its own otherwise)."""
    db = transaction.get_connection()
    quote, meta = db.ops.quote_name, Run._meta

    def column(name: str) -> str:
        return quote(meta.get_field(name).column)  # type: ignore[union-attr]

    expires, token, takeovers = (
        column("lease_expires_at"),
        column("lease_token"),
        column("lease_takeovers"),
    )
    expiry = meta.get_field("lease_expires_at")
    now = timezone.now()
    statement = (
        f"UPDATE {quote(meta.db_table)} SET {column('lease_owner')} = %s, "  # noqa: S608 - names from the model
        f"{column('received_by')} = %s, {token} = {token} + 1, "
        # Taking over an expired lease (its worker died or froze) counts; a free one does not.
        f"{takeovers} = CASE WHEN {expires} IS NULL THEN {takeovers} ELSE {takeovers} + 1 END, "
        f"{expires} = %s "
        f"WHERE {quote(meta.pk.column)} = %s "
        f"AND {column('status')} IN ({', '.join(['%s'] * len(CLAIMABLE))}) "
        f"AND ({expires} IS NULL OR {expires} < %s) "
        f"RETURNING {token}, {takeovers}"  # SQLite 3.35+ and PostgreSQL
    )
    params = [
        worker[:200],
        "",  # its message is consumed: the lease says who has the run
        expiry.get_db_prep_save(now + timedelta(seconds=lease_seconds()), db),
        meta.pk.get_db_prep_value(run_id, db),
        *CLAIMABLE,
        expiry.get_db_prep_value(now, db),
    ]
    with db.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    if row is None:
        return None
    RECEIPTS.claimed(run_id)
    return Lease(run_id=run_id, token=int(row[0]), worker=worker, takeovers=int(row[1]))


def lease_release(lease: Lease) -> None:
    """Free the run (it waits for a person, or it ended, or this worker gave it up); the
    token stays, as a fence. Its receipt goes too: a run left active here is nobody's,
    and the sweeper must not leave it to this worker's node."""
    Run.objects.filter(pk=lease.run_id, lease_token=lease.token).update(
        lease_owner="", lease_expires_at=None, received_by=""
    )


@contextmanager
def fenced(lease: Lease) -> Iterator[None]:
    """A transaction that commits only while ``lease`` is still the run's lease.

    One conditional update both checks the token and extends the lease; it also takes the
    row's lock (PostgreSQL) or the write lock (SQLite's IMMEDIATE transactions) until the
    commit, so no other writer slips in between the check and the checkpoint.
    """
    with transaction.atomic():
        expires = timezone.now() + timedelta(seconds=lease_seconds())
        if not Run.objects.filter(pk=lease.run_id, lease_token=lease.token).update(
            lease_expires_at=Case(
                When(status__in=CLAIMABLE, then=Value(expires)),
                default=Value(None),
                output_field=DateTimeField(),
            )
        ):
            owner = Run.objects.filter(pk=lease.run_id).values_list("lease_owner", flat=True)
            raise LeaseLost(f"Run {lease.run_id} is now leased by {owner.first() or 'nobody'}.")
        yield


def fence_write(
    lease: Lease,
    fields: dict[str, Any],
    events: int = 0,
    *,
    status_was: str | None = None,
    extend: bool = True,
    cursor: Any,
) -> tuple[int, bool]:
    """The fence of :func:`fenced` and a checkpoint's own fields of the run, in one
    statement: check the token, extend the lease, write ``fields`` (a value, or
    ``("add", amount)`` for a counter), reserve ``events`` sequence numbers; returns (the
    last number reserved, whether a cancel was asked). Call inside the checkpoint's
    transaction; raises :class:`LeaseLost` like the fence. ``status_was``: the status the
    fields' transition starts from (``flow.checkpoints.defer_transition``): a row whose
    status is no longer that moved without this worker (a cancel of a frozen worker's run),
    and is not written either. Fields that clear the lease (a transition to a wait or an
    end) replace the fence's own extension of it; ``extend=False`` leaves the lease to the
    keeper (the token is checked all the same). ``cursor``: the checkpoint's own.
    """
    db = transaction.get_connection()
    statement, params = fence_statement(
        lease, fields, events, status_was=status_was, extend=extend, db=db
    )
    cursor.execute(statement, params)
    row = cursor.fetchone()
    if row is None:
        raise fence_refused(lease, status_was)
    return int(row[0]), row[1] is not None


def fence_statement(
    lease: Lease,
    fields: dict[str, Any],
    events: int,
    *,
    status_was: str | None,
    extend: bool,
    db: Any,
) -> tuple[str, list[Any]]:
    """:func:`fence_write`'s UPDATE and its parameters, returning ``event_seq`` (the last
    number reserved) and ``cancel_requested_at``, or no row when the fence refuses.

    Written as SQL from the model's own column names and value conversions: this runs at
    every step of every run, and compiling a queryset cost more than the statement. A
    PostgreSQL checkpoint makes it the first part of its one statement
    (``flow.checkpoint_statement``)."""
    quote, meta = db.ops.quote_name, Run._meta
    expires = timezone.now() + timedelta(seconds=lease_seconds())
    claimable = ", ".join(["%s"] * len(CLAIMABLE))
    status = quote(meta.get_field("status").column)
    assignments = [f"{quote('event_seq')} = {quote('event_seq')} + %s"]
    params: list[Any] = [events]
    if extend and "lease_expires_at" not in fields:
        extended = f"CASE WHEN {status} IN ({claimable}) THEN %s ELSE NULL END"
        assignments.append(f"{quote('lease_expires_at')} = {extended}")
        expiry = meta.get_field("lease_expires_at").get_db_prep_save(expires, db)
        params += [*CLAIMABLE, expiry]
    for name, value in fields.items():
        field = meta.get_field(name)
        column = quote(field.column)  # type: ignore[union-attr]
        if isinstance(value, tuple) and value[0] == "add":
            assignments.append(f"{column} = {column} + %s")
            params.append(field.get_db_prep_save(value[1], db))  # type: ignore[union-attr]
        else:
            assignments.append(f"{column} = %s")
            params.append(field.get_db_prep_save(value, db))  # type: ignore[union-attr]
    key = meta.pk.get_db_prep_value(lease.run_id, db)
    where, guard = f"{quote(meta.pk.column)} = %s AND {quote('lease_token')} = %s", []
    if status_was is not None:
        where, guard = f"{where} AND {status} = %s", [status_was]
    statement = (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} WHERE {where} "  # noqa: S608 - names from the model
        "RETURNING event_seq, cancel_requested_at"  # SQLite 3.35+ and PostgreSQL
    )
    return statement, [*params, key, lease.token, *guard]


def fence_refused(lease: Lease, status_was: str | None) -> LeaseLost:
    """Why :func:`fence_statement` found no row: the run moved on without this worker, or
    another holds it."""
    found = Run.objects.filter(pk=lease.run_id).values_list("lease_owner", "status").first()
    owner, now_status = found or ("", "gone")
    if status_was is not None and now_status != status_was:
        return LeaseLost(f"Run {lease.run_id} is {now_status} now, not {status_was}.")
    return LeaseLost(f"Run {lease.run_id} is now leased by {owner or 'nobody'}.")


class Heartbeat:
    """A run's membership of its process's :class:`LeaseKeeper`, for one drive: the keeper
    renews the lease and reports here when it is ``lost`` or the run is ``cancelled``.

    If a renewal finds the lease gone, or none succeeded for a whole lease, ``lost`` is set,
    the run's tools in this process are stopped, and the work stops at its next checkpoint
    (the fence refuses it anyway). While a tool call of the run is in flight, a cancel
    stops the tool at once (``tool_processes_stop``), and the run then ends as cancelled at
    its next checkpoint instead of when the tool would have finished. Entering the heartbeat
    opens the drive's tool scope in the driving thread: the tools it runs are this drive's,
    named by the run and the lease's token.

    Once its drive has left, a heartbeat ignores what the keeper tells it: the keeper may
    act on a snapshot of the beats taken before the drive ended, and the run may already
    be driven again here, under a new lease (its claim moved the token, which the late
    beat reads as "another worker holds the run") whose tools are not this one's to stop.
    A drive that let its run go (``release``) counts as left already.
    """

    def __init__(self, lease: Lease) -> None:
        self.lease, self.lost, self.cancelled, self.left = lease, False, False, False
        self.renewed = time.monotonic()
        self.scope = (lease.run_id, lease.token)
        self._scope = tool_scope(self.scope)

    def __enter__(self) -> Heartbeat:
        self._scope.__enter__()
        KEEPER.join(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.left = True
        KEEPER.leave(self)
        self._scope.__exit__(None, None, None)

    def release(self) -> None:
        """The drive let the run go itself: its checkpoint made the run wait for a person or
        end, which cleared the lease. From then on a token that moves is the run's next
        claim (the person decided, and a worker took it), not a loss: the heartbeat counts
        as left, so nothing is stopped and no lost lease is logged."""
        self.left = True

    def _lost(self, why: str) -> None:
        """The run may be another worker's now: its tools in this process stop at once, so
        nothing this worker started goes on beside the new holder (their effects could
        not land anyway: the fence refuses them)."""
        if self.lost or self.left:
            return
        self.lost = True
        stopped = tool_processes_stop(scope=self.scope, reason=f"this worker lost the run: {why}")
        logger.warning(
            "Lost the lease of run %s (%s); %s tool call(s) stopped",
            self.lease.run_id,
            why,
            stopped,
        )

    def _cancel_seen(self) -> None:
        if self.left:
            return
        self.cancelled = True
        if not tool_calls_in_flight(scope=self.scope):
            return
        stopped = tool_processes_stop(scope=self.scope, reason="the run was cancelled")
        if stopped:
            logger.info("Run %s was cancelled: %s tool call(s) stopped", self.lease.run_id, stopped)


class LeaseKeeper:
    """One thread per process renews every lease the process holds, in one statement.

    A process of the thread pool drives hundreds of runs at once; a heartbeat thread (and a
    database connection) per run would cost more than the runs. Every third of a lease it
    extends all of them with one conditional update (only rows whose token is still ours,
    and only active runs: a run that waits or ended keeps its lease cleared), then reads
    the tokens and cancel flags back in one query: a token that moved means another worker
    holds the run now. Between renewals it reads the cancel flags of the runs whose tools
    are in flight here every ``CANCEL_POLL_SECONDS``. A renewal that fails (a busy or
    unreachable database) is retried next beat; a run none renewed for a whole lease is
    lost. Its connection goes back (to the pool, on PostgreSQL) after every beat.
    """

    CANCEL_POLL_SECONDS = 0.5

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._beats: set[Heartbeat] = set()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._renewed_at = 0.0

    def join(self, beat: Heartbeat) -> None:
        with self._lock:
            self._beats.add(beat)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()  # a forked pool process starts a keeper of its own
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()

    def leave(self, beat: Heartbeat) -> None:
        with self._lock:
            self._beats.discard(beat)

    def held(self) -> list[Heartbeat]:
        with self._lock:
            return [beat for beat in self._beats if not beat.lost]

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait(self.CANCEL_POLL_SECONDS)
                self._wake.clear()
                beats = self.held()
                if not beats:
                    with self._lock:
                        if not self._beats:  # idle: the next join starts a new thread
                            self._thread = None
                            return
                    continue
                try:
                    self.beat(beats)
                except Exception:  # never let the keeper die: every run would go unrenewed
                    logger.exception("The lease keeper's beat failed")
        finally:
            connection.close()

    def forked(self) -> None:
        """In a process forked from this one: the parent's runs are not this one's."""
        self._lock, self._beats, self._thread, self._renewed_at = (
            threading.Lock(),
            set(),
            None,
            0.0,
        )

    def beat(self, beats: list[Heartbeat]) -> None:
        """One beat: renew when due, else look for cancels (every run's: a cancel asked
        during a model call must be seen before the tool it asked for starts)."""
        if not beats:
            return
        now = time.monotonic()
        try:
            if now >= self._renewed_at + lease_seconds() / 3:
                self._renew(beats)
                self._renewed_at = now
            else:
                self._cancels(beats)
        except Exception:  # a busy database: try again next beat, while the leases last
            logger.warning("Could not renew the leases of %s run(s)", len(beats), exc_info=True)
            close_old_connections()
            for beat in beats:
                if time.monotonic() >= beat.renewed + lease_seconds():
                    beat._lost("its lease could not be renewed before it expired")
        finally:
            if connection.vendor != "sqlite":
                connection.close()  # back to the pool until the next beat

    def _renew(self, beats: list[Heartbeat]) -> None:
        ours = Q()
        for beat in beats:
            ours |= Q(pk=beat.lease.run_id, lease_token=beat.lease.token)
        # When the new expiry is counted from, not when the statement got through (on
        # SQLite it may wait seconds for the write lock): a fence decides by it whether
        # the lease still needs extending.
        renewed = time.monotonic()
        expires = timezone.now() + timedelta(seconds=lease_seconds())
        # Only a lease still held: one a wait or a release cleared is never set again.
        Run.objects.filter(ours, status__in=CLAIMABLE, lease_expires_at__isnull=False).update(
            lease_expires_at=expires
        )
        found = {
            pk: (token, cancel)
            for pk, token, cancel in Run.objects.filter(
                pk__in=[b.lease.run_id for b in beats]
            ).values_list("pk", "lease_token", "cancel_requested_at")
        }
        try:
            workers_seen({node_of(b.lease.worker) for b in beats})
        except Exception:  # the cache's trouble is not the leases': they were renewed
            logger.warning("Could not tell the cache this worker lives", exc_info=True)
        for beat in beats:
            token, cancel = found.get(Run._meta.pk.to_python(beat.lease.run_id), (None, None))
            if token != beat.lease.token:
                beat._lost("another worker holds the run now")
                continue
            beat.renewed = renewed
            if cancel is not None:
                beat._cancel_seen()

    def _cancels(self, beats: list[Heartbeat]) -> None:
        """One indexed read for every run of this process."""
        cancelled = set(
            Run.objects.filter(
                pk__in=[b.lease.run_id for b in beats], cancel_requested_at__isnull=False
            ).values_list("pk", flat=True)
        )
        for beat in beats:
            if Run._meta.pk.to_python(beat.lease.run_id) in cancelled:
                beat._cancel_seen()


KEEPER = LeaseKeeper()
os.register_at_fork(after_in_child=KEEPER.forked)


# --- who received each run's message, and which workers live (runs/sweeps.py reads them) --
ALIVE_KEY = "harness:worker-alive:{}"


def node_of(worker: str) -> str:
    """The Celery node of a lease's worker name (``node:pid``)."""
    return worker.rsplit(":", 1)[0]


def workers_seen(nodes: set[str]) -> None:
    """The lease keeper's sign of life for its nodes, lasting one lease."""
    if nodes:
        cache.set_many({ALIVE_KEY.format(n): True for n in nodes}, timeout=lease_seconds())


def workers_alive(nodes: set[str]) -> set[str]:
    """The nodes whose keeper said so within a lease; none when the cache cannot say
    (their runs are sent again: a duplicate dispatch is harmless)."""
    if not nodes:
        return set()
    try:
        found = cache.get_many([ALIVE_KEY.format(n) for n in nodes])
    except Exception:
        logger.warning("Could not read which workers live", exc_info=True)
        return set()
    return {n for n in nodes if found.get(ALIVE_KEY.format(n))}


def run_received(run_id: Any, node: str) -> None:
    """A worker took the run's dispatch off the queue: the run's message is that worker's
    now, and the sweeper leaves the run to it while it lives. Noted now, in this thread."""
    runs_received([run_id], node)


def runs_received(run_ids: list[Any], node: str) -> None:
    """:func:`run_received` of several runs at once, in one statement."""
    try:
        Run.objects.filter(pk__in=run_ids, lease_expires_at__isnull=True).update(
            received_by=node[:200], received_at=timezone.now()
        )
    except Exception:  # the sweeper's older rule still finds the runs
        logger.warning(
            "Could not note that %s received %s run(s)", node, len(run_ids), exc_info=True
        )
    finally:
        if connection.vendor != "sqlite":
            connection.close()  # the thread holds no pool connection between notes


class _Receipts:
    """Celery's ``task_received`` fires in the worker's consumer thread, which takes every
    message off the queue: writing each receipt there made the whole worker wait for the
    database (on SQLite, for its one writer, behind every run's checkpoint) between two
    messages, and 200 runs submitted at once reached their threads seconds late. Here the
    consumer hands the receipt over and goes on; one thread per process notes what it was
    handed, a statement per node, a few times a second. The sweeper only acts on a receipt a
    lease old, so a note a moment late changes nothing it decides."""

    INTERVAL_SECONDS = 0.2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, list[Any]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def add(self, run_id: Any, node: str) -> None:
        with self._lock:
            self._held.setdefault(node, []).append(run_id)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="receipts", daemon=True)
                self._thread.start()
        self._wake.set()

    def claimed(self, run_id: Any) -> None:
        """A run claimed before its receipt was noted needs none (a note after the claim's
        release would make the sweeper wait for a worker that let the run go)."""
        key = str(run_id)
        with self._lock:
            for run_ids in self._held.values():
                run_ids[:] = [r for r in run_ids if str(r) != key]

    def flush(self) -> None:
        with self._lock:
            held, self._held = self._held, {}
        for node, run_ids in held.items():
            runs_received(run_ids, node)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(self.INTERVAL_SECONDS)  # what arrives meanwhile goes in one statement
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # never let it die: receipts would stop for the process
                logger.exception("Could not note the runs received")


RECEIPTS = _Receipts()


def run_received_signal(sender: Any = None, request: Any = None, **kwargs: Any) -> None:
    if request is not None and request.name == RUN_EXECUTE and request.args:
        RECEIPTS.add(request.args[0], request.hostname or "")
