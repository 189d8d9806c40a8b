"""Back to the model for one more turn (local autonomy): verification found problems in
the drafts, or a draft no longer merges with a file another run changed. Inside the
caller's checkpoint."""

from __future__ import annotations

from typing import Any

from ..conversation import message_append
from ..core import loop
from ..core import status as run_status
from ..lifecycle import run_transition
from ..models import Run
from .checkpoints import run_fields_write
from .driver_state import Driver


def turns_left(run: Run) -> bool:
    state = loop.state_from_json((run.loop or {})["state"])
    return state.turn < state.max_turns


def model_told(
    driver: Driver, run: Run, text: str, detail: dict[str, Any], **loop_data: Any
) -> None:
    """The model hears ``text`` and gets the next turn; ``loop_data`` joins the loop's
    record (the verification round, say); ``detail`` goes with the status change."""
    data = {k: v for k, v in (run.loop or {}).items() if k != "rebased"}
    state = loop.state_from_json(data["state"])
    message_append(run=run, role="user", kind="text", content=text, turn=state.turn)
    retry = loop.LoopState(phase=loop.REQUEST, turn=state.turn + 1, max_turns=state.max_turns)
    run_fields_write(
        run, stage="synthesize", loop={**data, "state": loop.state_to_json(retry), **loop_data}
    )
    driver.rows = []
    run_transition(run_id=run.pk, to=run_status.RUNNING, detail=detail)
