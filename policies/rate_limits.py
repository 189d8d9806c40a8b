"""Calls a minute, counted in a sliding window through the cache that every process shares:
the one limiter behind an MCP server's rate limit and a policy rule's (SPEC T12, B6).

The count for the last sixty seconds is this calendar minute's count plus the previous
minute's, weighted by how much of it the last sixty seconds still cover. Counting calendar
minutes alone let twice the limit through across a minute's turn (the eval set's rate-limit
case caught it when its calls straddled one).

A call is counted only when it fits: one over the limit gives its count back, so refused
calls never use up the limit. Redis counts atomically; the embedded default's file cache
reads and writes, so there every count is taken under one lock file, shared by the
threads and processes of the machine, which are all the embedded default has.
"""

from __future__ import annotations

import fcntl
import math
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from functools import partial

from django.conf import settings
from django.core.cache import cache

from .core.permissions import LimitContext

_KEEP_SECONDS = 180  # this minute and the one before, with room


def rate_exceeded(key: str, limit: int, now: datetime) -> bool:
    """Whether the calls of ``key`` in the sixty seconds before ``now`` already reach
    ``limit``; when they do not, this call is counted."""
    minutes = now.timestamp() / 60
    window = math.floor(minutes)
    current_key, previous_key = f"rate:{key}:{window}", f"rate:{key}:{window - 1}"
    with _counting():
        cache.add(current_key, 0, timeout=_KEEP_SECONDS)
        try:
            before = cache.incr(current_key) - 1
        except ValueError:  # evicted between add and incr: this call is the first
            cache.set(current_key, 1, timeout=_KEEP_SECONDS)
            before = 0
        previous = cache.get(previous_key) or 0
        if before + math.ceil(previous * (1 - (minutes - window))) < limit:
            return False
        with suppress(ValueError):  # evicted meanwhile: nothing to give back
            cache.decr(current_key)  # over the limit: this call is not counted
        return True


def _atomic_cache() -> bool:
    return "redis" in str(settings.CACHES["default"]["BACKEND"]).lower()


@contextmanager
def _counting() -> Iterator[None]:
    if _atomic_cache():
        yield
        return
    with open(settings.VAR_DIR / "rate-limits.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def limit_context(
    *,
    now: datetime,
    run_id: object = None,
    agent_id: object = None,
    workspace_id: object = None,
    counted: bool = True,
) -> LimitContext:
    """What a rule's window and rate need for one call: the time, the ids its rate is
    counted by (a call outside any run counts under ``none``), and this limiter, unless
    the call is not ``counted`` (a person approved it, having been asked within the rate)."""
    ids = {"run": run_id, "agent": agent_id, "workspace": workspace_id}
    return LimitContext(
        now,
        {scope: str(value) for scope, value in ids.items() if value is not None},
        partial(rate_exceeded, now=now) if counted else None,
    )
