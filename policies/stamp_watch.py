"""A process's copy of the production config stamp, kept while it provably still holds
(SPEC P3–P7): a tool call's decision reads the stamp first, and a round trip to Redis for
it was a tenth of a loop step's harness time.

Every move of the stamp is published on a channel (:func:`stamp_publish`, after the new
stamp is set), and each process holds one subscription to it. A reader first takes in,
without waiting, whatever has arrived on the subscription (a move, or the server's reply
to the last ping), under one lock for the process's threads; it uses the kept stamp only
when nothing moved since it was read, the subscription is confirmed, and the server was
heard from within ``HEARD_SECONDS``. Otherwise it reads the stamp from the cache, as
before. Publishing reaches the subscriber's socket before the publisher has its reply, so
on one machine a decision that starts after a save has returned sees the move exactly as
a read of the key would; across machines, a network's one-way delay later. A subscription
that went quiet (a connection dropped without a word) stops being trusted within
``HEARD_SECONDS``, and a lost one is made again after ``RETRY_SECONDS``, reading the key
at every call meanwhile.

Redis's own client-side caching (``CLIENT TRACKING``, which redis-py drives) would do
this, but redis-py refuses it below Redis 7.4, and Debian's Redis is 7.0.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from time import monotonic
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

HEARD_SECONDS = 2.0  # a subscription heard from within this long is trusted
PING_SECONDS = 0.5  # how often a reader asks the server to answer on the subscription
RETRY_SECONDS = 1.0  # after a lost subscription, reads go to the cache this long
SOCKET_SECONDS = 2.0  # a Redis that does not answer within this is treated as down


def stamp_channel() -> str:
    """The channel of the stamp's moves: one console's (its prefix), on any Redis."""
    return f"{settings.REDIS_PREFIX}:decision-config-stamp:moved"


def stamp_client() -> Any:
    """A Redis client of this process's own: the subscription holds a connection."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=SOCKET_SECONDS,
        socket_connect_timeout=SOCKET_SECONDS,
        # No retries: redis-py would reconnect and subscribe again without a word, and a
        # move published meanwhile would go unheard; a failure must reach the watch.
        retry=Retry(NoBackoff(), 0),
        client_name=stamp_client_name(),  # whose connection it is, in Redis's CLIENT LIST
    )


def stamp_client_name() -> str:
    return f"{settings.REDIS_PREFIX}:config-stamp:{os.getpid()}"


class StampWatch:
    """One process's subscription and kept stamp; made again in a forked child."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._client: Any = None
        self._pubsub: Any = None
        self._subscribed = False
        self._heard = self._pinged = self._retry_at = 0.0
        # When each request still unanswered on the subscription was sent: an answer
        # proves the server heard this process as of then, not as of its arrival.
        self._asked: deque[float] = deque()
        # Moves heard or made here, and subscriptions lost or made: a kept stamp is good
        # only while this is what it was when the stamp was read.
        self._moves = 0
        self._kept: tuple[int, str] | None = None

    def held(self) -> tuple[int, str | None]:
        """(the count of moves now, the kept stamp if it still holds, else None)."""
        with self._lock:
            now = monotonic()
            self._listen(now)
            kept = self._kept
            trusted = self._subscribed and now - self._heard < HEARD_SECONDS
            if trusted and kept is not None and kept[0] == self._moves:
                return self._moves, kept[1]
            return self._moves, None

    def keep(self, moves: int, stamp: str) -> None:
        """``stamp``, read from the cache when the count of moves was ``moves``: kept
        unless something moved or the subscription changed meanwhile."""
        with self._lock:
            if moves == self._moves and self._subscribed:
                self._kept = (moves, stamp)

    def moved(self) -> None:
        """This process moved the stamp: what it kept is no longer the stamp."""
        with self._lock:
            self._moves += 1
            self._kept = None

    def publish(self, stamp: str) -> None:
        """Tell every process's subscription that the stamp is now ``stamp``."""
        with self._lock:
            client = self._client = self._client or stamp_client()
        client.publish(stamp_channel(), stamp)

    def close(self) -> None:
        with self._lock:
            self._lost(0.0)

    def _listen(self, now: float) -> None:
        """Take in what arrived on the subscription, subscribing first if there is none;
        ask the server to answer every ``PING_SECONDS``. Never waits for an answer."""
        if self._pubsub is None:
            if now < self._retry_at:
                return
            try:
                self._client = self._client or stamp_client()
                self._pubsub = self._client.pubsub()
                self._pubsub.subscribe(stamp_channel())
                self._pinged = now
                self._asked.append(now)
            except Exception:
                logger.warning("Could not subscribe to the config stamp's moves", exc_info=True)
                self._lost(now)
                return
        try:
            while (message := self._pubsub.get_message(timeout=0.0)) is not None:
                kind = message["type"]
                if kind in ("subscribe", "pong") and self._asked:
                    self._heard = self._asked.popleft()
                if kind == "subscribe":  # confirmed: from now on no move goes unheard
                    self._subscribed = True
                    self._moves += 1
                elif kind == "message":
                    self._moves += 1
            if self._subscribed and now - self._pinged >= PING_SECONDS:
                self._pubsub.ping()
                self._pinged = now
                self._asked.append(now)
        except Exception:
            logger.warning("Lost the subscription to the config stamp's moves", exc_info=True)
            self._lost(now)

    def _lost(self, now: float) -> None:
        pubsub, self._pubsub = self._pubsub, None
        self._subscribed, self._kept = False, None
        self._asked.clear()
        self._moves += 1
        self._retry_at = now + RETRY_SECONDS
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:
                logger.debug("Closing a lost subscription failed", exc_info=True)


_watch: StampWatch | None = None
_watch_lock = threading.Lock()


def stamp_watch() -> StampWatch:
    """This process's watch (a forked child makes its own: the parent's socket is not
    its to read)."""
    global _watch
    watch = _watch
    if watch is None or watch.pid != os.getpid():
        with _watch_lock:
            if _watch is None or _watch.pid != os.getpid():
                _watch = StampWatch()
            watch = _watch
    return watch
