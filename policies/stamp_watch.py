"""A process's copy of the production config stamp, kept while it provably still holds
(SPEC P3–P7): a tool call's decision reads the stamp first, and a round trip to Redis for
it was a tenth of a loop step's harness time.

Every move of the stamp is published on a channel (:meth:`StampWatch.publish`, after the
new stamp is set), and each process holds one subscription to it. A reader first takes
in, without waiting, whatever has arrived on the subscription (a move, or the server's
reply to the last ping), under one lock for the process's threads; it uses the kept stamp
only when nothing moved since it was read, the subscription is confirmed, the server was
heard from within ``HEARD_SECONDS``, and the stamp was read within ``KEPT_SECONDS``.
Otherwise it reads the stamp from the cache, as before. The publish returns once the
message is written to every subscriber's socket, so on one machine a decision that starts
after a save has returned sees the move exactly as a read of the key would; across
machines, a network's one-way delay later. A move whose publish failed is seen within
``KEPT_SECONDS``; a subscription that went quiet (a connection dropped without a word)
stops being trusted within ``HEARD_SECONDS``, and a lost one is made again after
``RETRY_SECONDS``, reading the key at every call meanwhile.

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
# A kept stamp is read again after this long, heard of or not: the bound on a move whose
# publish failed (its mover killed between the set and the publish, say).
KEPT_SECONDS = 1.0
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
        self._subscribing = False  # a thread is connecting, outside the lock
        self._failures = 0  # subscribing failed this many times in a row
        self._subscribed = False
        self._heard = self._pinged = self._retry_at = 0.0
        # When each request still unanswered on the subscription was sent: an answer
        # proves the server heard this process as of then, not as of its arrival.
        self._asked: deque[float] = deque()
        # Moves heard or made here, and subscriptions lost or made: a kept stamp is good
        # only while this is what it was when the stamp was read.
        self._moves = 0
        self._kept: tuple[int, str, float] | None = None  # (moves, stamp, read at)

    def held(self) -> tuple[int, str | None]:
        """(the count of moves now, the kept stamp if it still holds, else None)."""
        if self._pubsub is None and not self._subscribing:
            self._subscribe()
        with self._lock:
            now = monotonic()
            clear = self._listen(now)
            kept = self._kept
            trusted = clear and self._subscribed and now - self._heard < HEARD_SECONDS
            if (
                trusted
                and kept is not None
                and kept[0] == self._moves
                and now - kept[2] < KEPT_SECONDS
            ):
                return self._moves, kept[1]
            return self._moves, None

    def keep(self, moves: int, stamp: str) -> None:
        """``stamp``, read from the cache when the count of moves was ``moves``: kept
        unless something moved or the subscription changed meanwhile."""
        with self._lock:
            if moves == self._moves and self._subscribed:
                self._kept = (moves, stamp, monotonic())

    def moved(self) -> None:
        """This process moved the stamp: what it kept is no longer the stamp."""
        with self._lock:
            self._moves += 1
            self._kept = None

    def publish(self, stamp: str) -> None:
        """Tell every process's subscription that the stamp is now ``stamp``; returns once
        the message is on its way to each (Redis writes a publish's messages in the pass
        of its loop that answers it, and a later command's answer in a later pass)."""
        with self._lock:
            client = self._client = self._client or stamp_client()
        client.publish(stamp_channel(), stamp)
        client.ping()

    def close(self) -> None:
        with self._lock:
            self._lost(0.0)

    def _subscribe(self) -> None:
        """A new subscription, made outside the lock (connecting may take a while: the
        threads meanwhile read the key), by one thread at a time, at most every
        ``RETRY_SECONDS`` after a failure."""
        with self._lock:
            if self._pubsub is not None or self._subscribing or monotonic() < self._retry_at:
                return
            self._subscribing = True
        pubsub, asked = None, monotonic()
        try:
            with self._lock:
                client = self._client = self._client or stamp_client()
            pubsub = client.pubsub()
            pubsub.subscribe(stamp_channel())
            # Any later connect (redis-py's own, after a failure or a maintenance notice)
            # subscribes again with a gap in between: the watch hears of it.
            pubsub.connection.register_connect_callback(self._reconnected)
        except Exception:
            # Said once per outage (a try every RETRY_SECONDS would fill the log); each
            # tool call meanwhile reads the key, as it did without the watch.
            log = logger.warning if self._failures == 0 else logger.debug
            log("Could not subscribe to the config stamp's moves", exc_info=True)
            with self._lock:
                self._failures += 1
                self._subscribing = False
                self._lost(monotonic())
            if pubsub is not None:
                _close(pubsub)
            return
        with self._lock:
            self._subscribing, self._failures = False, 0
            self._pubsub, self._pinged = pubsub, asked
            self._asked.append(asked)

    def _reconnected(self, connection: Any) -> None:
        """redis-py connected the subscription again (in ``_listen``, under the lock)."""
        self._subscribed, self._kept = False, None
        self._moves += 1

    def _listen(self, now: float) -> bool:
        """Take in what arrived on the subscription; ask the server to answer every
        ``PING_SECONDS``; give it up when it has not answered for twice HEARD_SECONDS.
        Never waits. False when something is left unread (a message not whole yet)."""
        if self._pubsub is None:
            return False
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
            if self._asked and now - self._asked[0] > 2 * HEARD_SECONDS:
                raise TimeoutError("the server has not answered on the subscription")
            if self._subscribed and now - self._pinged >= PING_SECONDS:
                self._pubsub.ping()
                self._pinged = now
                self._asked.append(now)
            return not self._pubsub.connection.can_read(timeout=0)
        except Exception:
            logger.warning("Lost the subscription to the config stamp's moves", exc_info=True)
            self._lost(now)
            return False
        except BaseException:  # a move may have been read and not counted
            self._lost(now)
            raise

    def _lost(self, now: float) -> None:
        pubsub, self._pubsub = self._pubsub, None
        self._subscribed, self._kept = False, None
        self._asked.clear()
        self._moves += 1
        self._retry_at = now + RETRY_SECONDS
        if pubsub is not None:
            _close(pubsub)


def _close(pubsub: Any) -> None:
    try:
        pubsub.close()
    except Exception:
        logger.debug("Closing a subscription failed", exc_info=True)


_watch: StampWatch | None = None
_watch_lock = threading.Lock()


def _forked() -> None:
    """In a forked child: another thread of the parent may have held the lock."""
    global _watch, _watch_lock
    _watch, _watch_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forked)


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
