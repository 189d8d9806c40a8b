"""Carries news of new run events to WebSocket consumers through the channel layer.

The database is the source of truth; a lost message only delays a page until its next
reconnect, which replays from the database. So publishing never raises into a service.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import threading
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

OPS_GROUP = "ops"
# The events after which the operations dashboard's counts may differ: the only ones its
# group hears (a token per event of every run would cost more than the dashboard).
OPS_EVENTS = frozenset({"run.created", "status.changed"})
APPROVALS_GROUP = "approvals"  # the approval queue pages: approval.* events of every run
EVALS_GROUP = "evals"  # the evals page: a suite run's progress, wherever it runs
RUN_EVENT_MESSAGE = "run.event"
RUN_EVENTS_MESSAGE = "run.events"  # several events of one run, in order, in one message
GROUP_NEWS = "group"  # a handed-over item that is news for one group, not a run's event


def ops_notable(event_type: str) -> bool:
    return event_type in OPS_EVENTS or event_type.startswith("approval.")


def run_group(run_id: Any) -> str:
    """Channel group of one run: ``run.<hex>`` (group names allow letters, digits and dots)."""
    return f"run.{getattr(run_id, 'hex', str(run_id).replace('-', ''))}"


def user_group(user_id: Any) -> str:
    """Every open page of one user, to close them all when the user logs out."""
    return f"user.{user_id}"


def user_logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is None or (layer := get_channel_layer()) is None:
        return
    try:
        async_to_sync(layer.group_send)(user_group(user.pk), {"type": "session.ended"})
    except Exception:
        logger.exception("Could not close the live pages of user %s", user.pk)


def event_message(event: Any) -> dict[str, Any]:
    return {
        "type": RUN_EVENT_MESSAGE,
        "run_id": str(event.run_id),
        "seq": event.seq,
        "event_type": event.type,
        "payload": event.payload,
        "created_at": event.created_at.isoformat(),
    }


# A process sends at most one batch per this many seconds. The first message after a
# quiet moment goes at once; what commits meanwhile waits at most this long and goes in
# the next batch, merged by run. A run's loop commits a step every few ms: sending each
# commit on its own cost its worker more CPU than the step's own statements (bench/loop.py).
BATCH_INTERVAL = 0.05

Item = dict[str, Any] | list[dict[str, Any]]


class _Publisher:
    """One event loop per process, in a thread, that sends committed events to the groups.

    ``async_to_sync`` per event started a loop (and, on Redis, a connection) every time,
    and made the writer wait for delivery: about a fifth of a run's time per step. Here the
    writer hands the message over and goes on; the loop keeps its connections, and is woken
    once per batch, not once per commit (``BATCH_INTERVAL``). Order is kept per process
    (one list), and a lost message only delays a page until its next event or reconnect,
    which replay from the database by ``seq``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._pending: list[Item] = []
        self._woken = False  # a wake of the loop is on its way: the next batch takes it all
        self._handed = self._sent = 0  # items handed over, and sent (or given up), for flush
        self._wake: asyncio.Event | None = None
        self._hurry: asyncio.Event | None = None  # set by a flush: no pause before sending
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def _start(self) -> None:
        """The loop's thread, on first use and in a forked child (the parent's is gone)."""
        ready = threading.Event()
        self._pending, self._woken, self._handed, self._sent = [], False, 0, 0

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop, self._wake, self._hurry = loop, asyncio.Event(), asyncio.Event()
            ready.set()
            loop.run_until_complete(self._drain())

        threading.Thread(target=run, name="live-publisher", daemon=True).start()
        ready.wait(5)
        self._pid = os.getpid()
        # At the interpreter's exit, before concurrent.futures refuses new work (which the
        # channel layer's database calls need): threading's exit calls run in reverse.
        # Once the interpreter is shutting down that is refused: then at atexit, if ever.
        try:
            threading._register_atexit(self.flush)  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):
            atexit.register(self.flush)

    def forked(self) -> None:
        """In a process just forked from this one: the parent's loop is not this one's, and
        its locks may have been held by the parent's publisher thread at the fork."""
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._loop, self._pid = None, 0

    async def _drain(self) -> None:
        """Sends what was handed over, a batch at a time, at most one per BATCH_INTERVAL:
        the events of one run in a batch go to its group as one message; the ops group
        hears only what moves the dashboard, the approvals group only approvals."""
        assert self._wake is not None and self._hurry is not None and self._loop is not None
        last = -BATCH_INTERVAL
        while True:
            await self._wake.wait()
            self._wake.clear()
            if (pause := last + BATCH_INTERVAL - self._loop.time()) > 0:
                # What commits meanwhile joins this batch; a flush does not wait.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), pause)
            with self._lock:
                batch, self._pending, self._woken = self._pending, [], False
            self._hurry.clear()
            last = self._loop.time()
            try:
                layer = get_channel_layer()
                messages = [
                    m
                    for item in batch
                    if item
                    for m in ([item] if isinstance(item, dict) else item)
                ]
                if layer is not None and messages:
                    await self._send_batch(layer, messages)
            except Exception:  # never let one batch stop the loop: pages replay on reconnect
                logger.exception("Could not publish a batch of run events")
            finally:
                with self._lock:
                    self._sent += len(batch)
                    self._done.notify_all()

    async def _send_batch(self, layer: Any, messages: list[dict[str, Any]]) -> None:
        by_run: dict[str, list[dict[str, Any]]] = {}
        sends: list[tuple[str, dict[str, Any]]] = []
        for message in messages:
            if GROUP_NEWS in message:  # news of no run, for one group (group_news_publish)
                sends.append((message[GROUP_NEWS], message["message"]))
                continue
            by_run.setdefault(message["run_id"], []).append(message)
            event_type = str(message.get("event_type", ""))
            if ops_notable(event_type):
                sends.append((OPS_GROUP, message))
            if event_type.startswith("approval."):
                sends.append((APPROVALS_GROUP, message))
        runs = [
            (
                run_group(run_id),
                events[0] if len(events) == 1 else {"type": RUN_EVENTS_MESSAGE, "events": events},
            )
            for run_id, events in by_run.items()
        ]
        targets = runs + sends
        heard = await _groups_heard(layer, {group for group, _ in targets})
        for group, message in targets:
            if heard is not None and group not in heard:
                continue
            try:
                await layer.group_send(group, message)
            except Exception:
                logger.exception("Could not publish run events to %s", group)

    def send(self, message: Item) -> None:
        """Hand over one message, or the messages of one commit (sent as one batch)."""
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # first use, or after a fork
                self._start()
            self._pending.append(message)
            self._handed += 1
            if self._woken:  # the loop will take this one with the others
                return
            self._woken = True
        assert self._loop is not None and self._wake is not None
        self._loop.call_soon_threadsafe(self._wake.set)

    def flush(self, timeout: float = 2.0) -> None:
        """Wait (boundedly) until everything handed over was sent: at exit, and in tests."""
        if self._loop is None or self._hurry is None or self._pid != os.getpid():
            return
        self._loop.call_soon_threadsafe(self._hurry.set)
        with self._lock:
            handed = self._handed
            if not self._done.wait_for(lambda: self._sent >= handed, timeout):
                logger.warning("Some live events were not sent before the deadline.")


async def _groups_heard(layer: Any, groups: set[str]) -> set[str] | None:
    """The groups someone is in, when the layer can say so for all of them at once; None
    when it cannot (send to each: on Redis a group nobody is in costs one round trip).

    The embedded default's layer (channels_lite) looks a group's members up in its
    database at each ``group_send``, the same query for the run of every event: one query
    for the whole batch instead, and no send to a group nobody is in. It changes nothing a
    page sees: a page that joins after this look still replays the run's events from the
    database when it connects, as it does when it joins after a send.
    """
    if len(groups) < 2 or type(layer).__module__ != "channels_lite.layers.core":
        return None
    try:
        return await _groups_with_members(sorted(groups))
    except Exception:  # the sends below say what is wrong with the layer
        logger.warning("Could not read the live groups' members", exc_info=True)
        return None


@sync_to_async
def _groups_with_members(groups: list[str]) -> set[str]:
    from channels_lite.models import GroupMembership  # installed on the embedded default only
    from django.utils import timezone

    now, heard = timezone.now(), set[str]()
    for start in range(0, len(groups), 500):  # within SQLite's parameter limit
        members = GroupMembership._default_manager.filter(
            group_name__in=groups[start : start + 500], expires_at__gte=now
        )
        heard.update(members.values_list("group_name", flat=True).distinct())
    return heard


PUBLISHER = _Publisher()
os.register_at_fork(after_in_child=PUBLISHER.forked)


def event_publish(event: Any) -> None:
    """Send one committed event to its run's group (and the ops and approvals groups when
    it is theirs), without waiting."""
    PUBLISHER.send(event_message(event))


def events_publish(events: list[Any]) -> None:
    """The events of one commit, in order: one message to their run's group."""
    PUBLISHER.send([event_message(event) for event in events])


def group_news_publish(group: str, message: dict[str, Any]) -> None:
    """News that belongs to no run (a suite run's progress) for one group's pages, sent
    like run events: without waiting, in order, never raising into the caller."""
    PUBLISHER.send({GROUP_NEWS: group, "message": message})
