"""What a stage of the flow answers the driver: go on, the run waits for a person, or the
run ended. Tagged values, like the loop's ``RunAgain | FinalOutput | Interruption``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Next:
    """The stage checkpointed its work; the driver reads the run again and goes on."""


@dataclass(frozen=True)
class Waits:
    """The run waits for a person (an intake answer, an approval): the worker lets it go."""

    on: Literal["answer", "approval"]


@dataclass(frozen=True)
class Ended:
    """The run completed or failed (or was cancelled); nothing is left to do."""

    status: Literal["completed", "failed"]


@dataclass(frozen=True)
class Lost:
    """Another worker holds the run now (this one's lease expired): stop, writing nothing."""


StageOutcome = Next | Waits | Ended | Lost
NEXT = Next()
