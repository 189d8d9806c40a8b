"""The live run page's WebSocket: replay from the database, then stream, each event once."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.template.loader import render_to_string
from django.utils.dateparse import parse_datetime

from harness_console.web.consumers import (
    CLOSE_BAD_REQUEST,
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHENTICATED,
)
from harness_console.web.live import run_group, user_group

from .selectors import (
    REPLAY_BATCH,
    BadAfter,
    parse_after,
    run_access_still_valid,
    run_events_after,
    run_get_for_user,
)


class RunEventsConsumer(AsyncWebsocketConsumer):
    """``/ws/runs/<run id>/?after=<seq>``.

    1. Check who is asking, then join the run's group *before* reading the database, so an
       event committed in between is not missed.
    2. Replay the events after ``after`` from the database.
    3. Stream new events; one that is already sent is skipped, and a gap (messages from two
       processes overtaking each other) is filled from the database, so each event reaches
       the page exactly once and in order.
    """

    group: str | None = None
    user_group: str | None = None
    last_seq = 0
    checked_at = 0.0
    # Rights are read afresh at most this often while events flow (and at once on logout).
    recheck_seconds = 10.0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        raw_after = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("after")
        try:
            run = await database_sync_to_async(run_get_for_user)(
                user=user, run_id=self.scope["url_route"]["kwargs"]["run_id"]
            )
        except PermissionDenied:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        except Http404:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        try:
            after = parse_after(raw_after[-1] if raw_after else None)
        except BadAfter as error:
            await self.accept()
            await self.send(text_data=render_to_string("runs/detail_error.html", {"error": error}))
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        self.run_id, self.last_seq = run.pk, after
        self.user_id, self.checked_at = user.pk, time.monotonic()
        self.group, self.user_group = run_group(run.pk), user_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        await self.accept()
        await self.replay()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if self.user_group:
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def session_ended(self, message: dict[str, Any]) -> None:
        """The user logged out: an open page stops receiving at once."""
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def still_allowed(self) -> bool:
        if time.monotonic() - self.checked_at < self.recheck_seconds:
            return True
        session = self.scope.get("session")
        allowed = await database_sync_to_async(run_access_still_valid)(
            user_id=self.user_id,
            session_key=getattr(session, "session_key", None),
            run_id=self.run_id,
        )
        self.checked_at = time.monotonic()
        return allowed

    async def replay(self) -> None:
        while True:
            events = await database_sync_to_async(run_events_after)(
                run_id=self.run_id, after=self.last_seq
            )
            if not events:
                return
            await self.send_events(
                [
                    {
                        "seq": e.seq,
                        "type": e.type,
                        "payload": e.payload,
                        "created_at": e.created_at,
                    }
                    for e in events
                ]
            )
            if len(events) < REPLAY_BATCH:
                return

    async def run_event(self, message: dict[str, Any]) -> None:
        if not await self.still_allowed():
            await self.close(code=CLOSE_FORBIDDEN)
            return
        seq = message["seq"]
        if seq <= self.last_seq:
            return
        if seq > self.last_seq + 1:
            await self.replay()
            return
        event = {
            "seq": seq,
            "type": message["event_type"],
            "payload": message["payload"],
            "created_at": parse_datetime(message["created_at"]),
        }
        await self.send_events([event])

    async def run_events(self, message: dict[str, Any]) -> None:
        """Several events of the run committed together, in order."""
        for one in message.get("events") or ():
            await self.run_event(one)

    async def send_events(self, events: list[dict[str, Any]]) -> None:
        html = render_to_string("runs/detail_live.html", {"events": events})
        await self.send(text_data=html)
        self.last_seq = events[-1]["seq"]
