"""Logging filters for the console."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied


class QuietPermissionDenied(logging.Filter):
    """A refused page is routine (a role without the right): log the line, not a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True
