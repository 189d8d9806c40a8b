"""What one claim of a run keeps in memory while a worker drives it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import models

from ..conversation import ApiMessages
from ..core.compaction import Summaries
from ..core.validity import Checked
from ..leases import Heartbeat, Lease
from ..models import Message, Run


@dataclass
class Pending:
    """Writes made in memory that the next checkpoint commits with its own, in its one
    transaction: the run's fields (``set``; ``add``: counters, added in the statement),
    new rows in order, and events in order."""

    set: dict[str, Any] = field(default_factory=dict)
    add: dict[str, int | Any] = field(default_factory=dict)
    rows: list[models.Model] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # A status change among the fields: the status it starts from, which the row must
    # still have; and what the change adds once the rows are in (its rollup, its trace).
    status_was: str | None = None
    after: list[Callable[[], None]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.set or self.add or self.rows or self.events or self.after)

    def fence_fields(self) -> dict[str, Any]:
        """The run's fields as the fence's statement writes them (``leases.fence_write``):
        a value, or ``("add", amount)`` for a counter."""
        fields: dict[str, Any] = dict(self.set)
        for name, amount in self.add.items():
            fields[name] = ("add", amount)
        return fields


@dataclass
class Driver:
    """Everything else is re-read from the run's row or checkpointed: a worker that dies
    loses only this. ``run`` is the run as this claim last wrote it; ``current`` says
    whether it still is (a stage that wrote through other paths leaves it stale, and the
    driver reads the row again); ``fresh_uses`` are the tool_use ids the model asked for
    in this claim, which no earlier worker can have started, journalled or asked about."""

    lease: Lease
    beat: Heartbeat
    rows: list[Message] = field(default_factory=list)
    model: Any = None
    system: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    run: Run | None = None
    current: bool = False
    cancelled: bool = False
    pending: Pending = field(default_factory=Pending)
    fresh_uses: set[str] = field(default_factory=set)
    config: Any = None  # runs.flow.config.RunConfig, read once per claim, kept fresh
    sizes: dict[tuple[int, int], int] = field(default_factory=dict)  # token estimates
    checked: Checked | None = None  # how far the conversation's structure was checked
    summaries: Summaries = field(default_factory=dict)  # old turns summarized, by compaction
    api: ApiMessages = field(default_factory=ApiMessages)  # the rows as the API wants them
    # The system prompt's layers and the tools' tokens as this claim sends them (B12).
    layers: list[dict[str, Any]] = field(default_factory=list)
    tool_tokens: int = 0
