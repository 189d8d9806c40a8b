"""The base of the pages that hear one group's news over a WebSocket (the approval queue,
the operations dashboard), and the close codes every WebSocket of the console uses."""

from __future__ import annotations

import time
from typing import Any, cast

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import URLPattern, path

from .live import user_group


def socket(route: str, consumer: type[AsyncWebsocketConsumer]) -> URLPattern:
    """A WebSocket route: Channels routes consumers with Django's ``path``, whose stubs know
    only views."""
    return path(route, cast(Any, consumer.as_asgi()))


# Application close codes (4000–4999): the page and API clients can tell why.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_BAD_REQUEST = 4400


class GroupNewsConsumer(AsyncWebsocketConsumer):
    """A page that hears the news of one group (the approval queue, the operations
    dashboard): who may listen is checked on connect and again, from a fresh user row,
    every few seconds while news flows; logging out closes it. Subclasses say who may
    listen (``may_listen``, called in a thread) and what to send (``run_event``)."""

    group: str
    joined: list[str]
    user_id: Any = None
    checked_at = 0.0
    recheck_seconds = 10.0

    def may_listen(self, user: Any) -> bool:
        raise NotImplementedError

    async def connect(self) -> None:
        self.joined = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(self.may_listen)(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user_id = user.pk
        self.checked_at = time.monotonic()
        for group in (self.group, user_group(user.pk)):
            await self.channel_layer.group_add(group, self.channel_name)
            self.joined.append(group)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def session_ended(self, message: dict[str, Any]) -> None:
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def still_allowed(self) -> bool:
        """False (and the socket closed) once the user may no longer listen."""
        if time.monotonic() - self.checked_at <= self.recheck_seconds:
            return True
        allowed = await database_sync_to_async(self._may_listen_now)()
        self.checked_at = time.monotonic()
        if not allowed:
            await self.close(code=CLOSE_FORBIDDEN)
        return allowed

    def _may_listen_now(self) -> bool:
        """A fresh user row: the connection's user object caches its permissions."""
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.filter(pk=self.user_id, is_active=True).first()
        return user is not None and self.may_listen(user)
