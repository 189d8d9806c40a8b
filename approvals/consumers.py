"""The approval queue's WebSocket: news that a request appeared or was decided.

It carries no request content, only which request changed: the page fetches its table
again through the ordinary view, so what an approver sees is always what the database and
the permission checks of that view say.
"""

from __future__ import annotations

import json
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from runs.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from runs.live import APPROVALS_GROUP, user_group

from .selectors import may_review


class ApprovalQueueConsumer(AsyncWebsocketConsumer):
    """``/ws/approvals/``: approvers only; rights read afresh every few seconds."""

    joined: list[str]
    checked_at = 0.0
    recheck_seconds = 10.0

    async def connect(self) -> None:
        self.joined = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(may_review)(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user = user
        self.checked_at = time.monotonic()
        for group in (APPROVALS_GROUP, user_group(user.pk)):
            await self.channel_layer.group_add(group, self.channel_name)
            self.joined.append(group)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def session_ended(self, message: dict[str, Any]) -> None:
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def run_event(self, message: dict[str, Any]) -> None:
        if time.monotonic() - self.checked_at > self.recheck_seconds:
            fresh = await database_sync_to_async(_reload_may_review)(self.user.pk)
            self.checked_at = time.monotonic()
            if not fresh:
                await self.close(code=CLOSE_FORBIDDEN)
                return
        payload = message.get("payload") or {}
        await self.send(
            text_data=json.dumps(
                {
                    "event": message.get("event_type"),
                    "approval": payload.get("approval"),
                    "run": message.get("run_id"),
                }
            )
        )


def _reload_may_review(user_id: Any) -> bool:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    return user is not None and may_review(user)
