"""The evals page's WebSocket: a suite run's progress, as it happens (SPEC E1).

It joins the evals group, which hears that some suite changed (begun, a case judged,
ended), and answers each notice, and the connection itself (what changed before it opened
was not heard), with the progress fragment rendered from the database as an out-of-band
swap, as the run page gets its timeline: the page's htmx WebSocket extension puts it in
place. Who may listen is checked on connect and again every few seconds while news flows;
logging out closes it.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from django.template.loader import render_to_string

from harness_console.roles import may_see_evals
from harness_console.web.consumers import GroupNewsConsumer
from harness_console.web.live import EVALS_GROUP

from .selectors import progress_context


class EvalSuitesConsumer(GroupNewsConsumer):
    """``/ws/evals/``: ops, approvers and admins (whoever may see the evals)."""

    group = EVALS_GROUP

    def may_listen(self, user: Any) -> bool:
        return may_see_evals(user)

    async def connect(self) -> None:
        await super().connect()
        if self.user_id is not None:  # accepted
            await self.send_progress()

    async def suite_progress(self, message: dict[str, Any]) -> None:
        if await self.still_allowed():
            await self.send_progress()

    async def send_progress(self) -> None:
        html = await database_sync_to_async(self._render)()
        await self.send(text_data=html)

    def _render(self) -> str:
        context = {**progress_context(self.scope["user"]), "oob": True}
        return render_to_string("evals/index_progress.html", context)
