"""The operations dashboard's WebSocket: news that some run changed state (SPEC O5, L2).

It joins the ops group, which hears only the events that move the dashboard's figures (a
run created, a status change, an approval asked or settled: ``web.live.ops_notable``), and
forwards a tiny "changed" notice for each. It carries no run content: the page fetches its
fragment again through the ordinary view, so what a person sees is what the database and
that view's permission check say. The page throttles its fetches.
"""

from __future__ import annotations

import json
from typing import Any

from harness_console.roles import may_view_dashboards
from harness_console.web.consumers import GroupNewsConsumer
from harness_console.web.live import OPS_GROUP
from harness_console.web.live import ops_notable as notable


class OpsDashboardConsumer(GroupNewsConsumer):
    """``/ws/dashboards/ops/``: ops, admins and approvers; rights read afresh every few
    seconds while notices flow, and at once on logout."""

    group = OPS_GROUP

    def may_listen(self, user: Any) -> bool:
        return may_view_dashboards(user)

    async def run_event(self, message: dict[str, Any]) -> None:
        event_type = str(message.get("event_type", ""))
        if not notable(event_type) or not await self.still_allowed():
            return
        await self.send(text_data=json.dumps({"type": "changed", "event": event_type}))
