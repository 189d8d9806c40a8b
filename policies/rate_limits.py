"""Calls a minute, counted in a sliding window through the cache that every process shares:
the one limiter behind an MCP server's rate limit and a policy rule's (SPEC T12, B6).

The count for the last sixty seconds is this calendar minute's count plus the previous
minute's, weighted by how much of it the last sixty seconds still cover. Counting calendar
minutes alone let twice the limit through across a minute's turn (the eval set's rate-limit
case caught it when its calls straddled one).

A call is counted only when it fits: one over the limit gives its count back, and so does
one refused after it was counted (``rate_release``), so refused calls never use up the
limit. Redis counts atomically; the embedded default's file cache
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
    current_key, previous_key, covered = _buckets(key, now)
    with _counting() as atomic:
        before = _incremented(current_key, atomic) - 1
        previous = cache.get(previous_key) or 0
        if sliding_count(before, previous, covered) < limit:
            return False
        _decremented(current_key, atomic)  # over the limit: this call is not counted
        return True


def rate_release(key: str, now: datetime) -> None:
    """Give back a call counted at ``now`` that never ran (a hook refused it, or nobody was
    there to approve it): a refused call uses none of the limit."""
    current_key, _, _ = _buckets(key, now)
    with _counting() as atomic:
        _decremented(current_key, atomic)


def sliding_count(current: int, previous: int, covered: float) -> int:
    """The calls in the last sixty seconds as the limiter counts them: this calendar
    minute's and the previous minute's, weighted by the part of it (``covered``) the last
    sixty seconds still reach. An estimate: calls bunched at the end of the previous minute
    are spread over it, so up to half as many again may pass in the worst case."""
    return current + math.ceil(previous * covered)


def _buckets(key: str, now: datetime) -> tuple[str, str, float]:
    minutes = now.timestamp() / 60
    window = math.floor(minutes)
    return f"rate:{key}:{window}", f"rate:{key}:{window - 1}", 1 - (minutes - window)


def _incremented(key: str, atomic: bool) -> int:
    if atomic:
        cache.add(key, 0, timeout=_KEEP_SECONDS)
        try:
            return cache.incr(key)
        except ValueError:  # evicted between add and incr: this call is the first
            cache.set(key, 1, timeout=_KEEP_SECONDS)
            return 1
    value = (cache.get(key) or 0) + 1  # under the lock: set keeps the counter's short life
    cache.set(key, value, timeout=_KEEP_SECONDS)
    return value


def _decremented(key: str, atomic: bool) -> None:
    if atomic:
        with suppress(ValueError):  # evicted meanwhile: nothing to give back
            cache.decr(key)
        return
    value = cache.get(key)
    if value:
        cache.set(key, value - 1, timeout=_KEEP_SECONDS)


def _atomic_cache() -> bool:
    return "redis" in str(settings.CACHES["default"]["BACKEND"]).lower()


@contextmanager
def _counting() -> Iterator[bool]:
    """Whether the cache counts atomically; if not, the count is taken under the lock."""
    if _atomic_cache():
        yield True
        return
    with open(settings.VAR_DIR / "rate-limits.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield False
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
    counted by (calls outside any run count together, per workspace), and this limiter,
    unless the call is not ``counted`` (a person approved it, having been asked within
    the rate)."""
    outside = f"outside-runs@{workspace_id}"
    ids = {
        "run": run_id if run_id is not None else outside,
        "agent": agent_id if agent_id is not None else outside,
        "workspace": workspace_id,
    }
    return LimitContext(
        now,
        {scope: str(value) for scope, value in ids.items() if value is not None},
        partial(rate_exceeded, now=now) if counted else None,
        partial(rate_release, now=now),
    )
