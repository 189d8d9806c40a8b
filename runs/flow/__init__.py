"""The fixed flow of a run, executed by a worker (SPEC R4, R5, R9, P5).

``Intake → Classify → Extract → Synthesize → Verify → Approval → Commit``, one module per
stage (intake, synthesize with its tool steps, verify, approval, commit), driven by
``driver.run_drive``. Each unit of work ends in a checkpoint written inside
:func:`~runs.leases.fenced` — the run's stage, the loop's state, the new conversation
rows, the model call's usage, the events — so a worker killed anywhere resumes from the
last checkpoint, and nothing recorded is written twice:

- a model call is recorded with its turn (unique per run), in the same transaction as the
  loop state that moves past it;
- a tool call is inserted as running before it runs (unique per tool_use id); a resumed
  worker reconciles a running one from disk instead of repeating it (tool_call_recover);
- a run waiting for a person (a missing parameter, an approval) releases its lease and its
  worker; the answer or the decision moves it back and dispatches it again.
"""

from __future__ import annotations

from .driver import run_drive

__all__ = ["run_drive"]
