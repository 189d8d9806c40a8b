"""Logging for the console: filters and formatters that settings.LOGGING names (SPEC O3).

Every line logged while a worker works on a run carries the run's id and its trace id, so
a log search and a trace join: the trace id is the run's UUID in hex
(runs.observability.telemetry makes the run's trace id that same number).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

from django.core.exceptions import PermissionDenied

# (run id, trace id) of the run this thread or task works on; ("", "") outside any run.
_run: ContextVar[tuple[str, str]] = ContextVar("harness_log_run", default=("", ""))


def _ids(run_id: Any) -> tuple[str, str]:
    try:
        run_uuid = uuid.UUID(str(run_id))
    except ValueError:  # a malformed id (a bad task message) is still worth seeing
        return str(run_id)[:64], ""
    return str(run_uuid), run_uuid.hex


def run_log_enter(run_id: Any) -> Token[tuple[str, str]]:
    """From now on, lines logged here belong to the run; give the token to run_log_exit."""
    return _run.set(_ids(run_id))


def run_log_exit(token: Token[tuple[str, str]]) -> None:
    _run.reset(token)


@contextmanager
def run_log_context(run_id: Any) -> Iterator[None]:
    """Lines logged inside the block carry the run's id and trace id."""
    token = run_log_enter(run_id)
    try:
        yield
    finally:
        run_log_exit(token)


class RunContext(logging.Filter):
    """Adds ``run_id`` and ``trace_id`` to every record ("" outside a run), unless the line
    named its run itself (``extra={"run_id": ...}``). On the handler: a filter on a logger
    would not see the records its children propagate."""

    def filter(self, record: logging.LogRecord) -> bool:
        named = getattr(record, "run_id", "")
        record.run_id, record.trace_id = _ids(named) if named else _run.get()
        return True


class TextFormatter(logging.Formatter):
    """The plain line of debug mode, with the run it belongs to when there is one."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        run_id = getattr(record, "run_id", "")
        return f"{line} [run {run_id}]" if run_id else line


class QuietPermissionDenied(logging.Filter):
    """A refused page is routine (a role without the right): log the line, not a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True
