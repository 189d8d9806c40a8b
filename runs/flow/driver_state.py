"""What one claim of a run keeps in memory while a worker drives it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..leases import Heartbeat, Lease
from ..models import Message


@dataclass
class Driver:
    """Everything else is re-read from the run's row or checkpointed: a worker that dies
    loses only this."""

    lease: Lease
    beat: Heartbeat
    rows: list[Message] = field(default_factory=list)
    model: Any = None
    system: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
