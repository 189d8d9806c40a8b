"""The approval queue's WebSocket: news that a request (or a policy change waiting for a
second admin) appeared or was decided.

It carries no request content, only which request changed: the page fetches its table
again through the ordinary view, so what an approver sees is always what the database and
the permission checks of that view say.
"""

from __future__ import annotations

import json
from typing import Any

from harness_console.roles import may_decide
from harness_console.web.consumers import GroupNewsConsumer
from harness_console.web.live import APPROVALS_GROUP


class ApprovalQueueConsumer(GroupNewsConsumer):
    """``/ws/approvals/``: approvers only; rights read afresh every few seconds."""

    group = APPROVALS_GROUP

    def may_listen(self, user: Any) -> bool:
        return may_decide(user)

    async def run_event(self, message: dict[str, Any]) -> None:
        if not await self.still_allowed():
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

    async def policy_change(self, message: dict[str, Any]) -> None:
        """A policy change joined or left the queue (B16): its pages fetch their table."""
        if not await self.still_allowed():
            return
        await self.send(
            text_data=json.dumps(
                {"event": "policy_change", "policy_change": message.get("policy_change")}
            )
        )
