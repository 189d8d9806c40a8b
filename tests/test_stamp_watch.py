"""The production config stamp, kept by each process while its subscription to the stamp's
moves hears none (policies.stamp_watch): no round trip per tool call, and still never a
stamp that moved — a move by another process is seen by the very next read, and a
subscription that was lost or went quiet is not trusted.

Run on both configurations against this machine's Redis, under a prefix of this test
process's own (the parallel test processes move stamps of their own meanwhile); on the
embedded default, which has no Redis of its own, skipped when none answers."""

from __future__ import annotations

import logging
import os
import pickle
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.core.cache.backends.redis import RedisCache

from policies import config_stamp as stamps
from policies import stamp_watch as watches
from policies.config_stamp import KEY, config_changed, config_stamp

LOCAL_REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture(autouse=True)
def cache(settings, monkeypatch) -> Iterator[RedisCache]:
    """The production stamp's store, of this process's own: a Redis cache under its own
    prefix (the embedded default's stamp otherwise is a file's: test_decision_inputs)."""
    if settings.EMBEDDED:
        try:
            redis.Redis.from_url(LOCAL_REDIS, socket_connect_timeout=1).ping()
        except redis.RedisError:
            pytest.skip("no Redis answers on 127.0.0.1:6379")
        settings.EMBEDDED, settings.REDIS_URL = False, LOCAL_REDIS
    settings.REDIS_PREFIX = f"harness-test-stamp-{os.getpid()}"
    own = RedisCache(settings.REDIS_URL, {"KEY_PREFIX": settings.REDIS_PREFIX})
    monkeypatch.setattr(stamps, "cache", own)
    yield own
    own.delete(KEY)


@pytest.fixture
def other(settings) -> Iterator[redis.Redis]:
    """Another process's view of Redis: a client of its own."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    client.close()


class Clock:
    """The watch's clock, moved only by the test: no stall of a busy machine expires
    what a test expects kept."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(watches, "monotonic", fake)
    return fake


@pytest.fixture
def watch(monkeypatch, clock, cache) -> Iterator[watches.StampWatch]:
    """A watch of this test's own, subscribed and trusted before the test starts, and a
    stamp no test saw before."""
    cache.set(KEY, uuid.uuid4().hex)
    fresh = watches.StampWatch()
    monkeypatch.setattr(watches, "_watch", fresh)
    held(fresh)
    yield fresh
    fresh.close()


@pytest.fixture
def reads(monkeypatch, cache) -> list[str]:
    """The reads of the stamp's key that reached the cache."""
    seen: list[str] = []
    real = cache.get

    def counted(key: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(key)
        return real(key, *args, **kwargs)

    monkeypatch.setattr(cache, "get", counted)
    return seen


def held(watch: watches.StampWatch) -> str:
    """Read until the watch keeps the stamp: the subscription's confirmation arrives a
    round trip after it was asked for (a lost one is asked for again after
    RETRY_SECONDS), and the first read after it reads the key."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stamp = config_stamp()
        if watch.held()[1] == stamp:
            return stamp
        time.sleep(0.01)
        watches.monotonic.now += 0.05  # type: ignore[attr-defined]  # the test's Clock
    raise AssertionError("the watch never kept the stamp")


def moved_elsewhere(other: redis.Redis, stamp: str, *, publish: bool = True) -> None:
    """What another process's save does: the key set, then the move published."""
    other.set(stamps.cache.make_key(KEY), pickle.dumps(stamp))
    if publish:
        other.publish(watches.stamp_channel(), stamp)


def test_while_nothing_moves_a_read_costs_no_round_trip(watch, reads):
    stamp = config_stamp()
    assert [config_stamp() for _ in range(50)] == [stamp] * 50
    assert reads == []


def test_a_move_by_another_process_is_seen_by_the_very_next_read(watch, reads, other):
    for n in range(5):  # no wait between the move and the read
        moved_elsewhere(other, f"elsewhere-{n}")
        assert config_stamp() == f"elsewhere-{n}"
    assert len(reads) == 5


def test_a_move_made_here_is_seen_at_once(watch, reads, db, django_capture_on_commit_callbacks):
    stamp = config_stamp()
    with django_capture_on_commit_callbacks(execute=True):
        config_changed()  # moves when the change commits
    moved = config_stamp()
    assert moved != stamp
    assert config_stamp() == moved


def test_a_lost_subscription_is_not_trusted(watch, reads, other):
    """Its connection killed, a move whose message went with it (the key set, nothing
    published) is still seen: the reads go to the key until a subscription is back."""
    stamp = config_stamp()
    name = watches.stamp_client_name()
    ids = [c["id"] for c in other.client_list(_type="pubsub") if c.get("name") == name]
    assert ids, "the watch's subscription is not in Redis's list of clients"
    for found in ids:
        other.client_kill_filter(_id=found)
    moved_elsewhere(other, "unheard", publish=False)
    assert config_stamp() == "unheard" != stamp
    assert reads
    assert held(watch) == "unheard"  # subscribed again (after RETRY_SECONDS): trusted again


def test_a_subscription_that_went_quiet_is_not_trusted(watch, reads, other, clock, monkeypatch):
    """The server stopped answering (a connection dropped without a word, a network
    partition): after HEARD_SECONDS without a reply, the key is read at every call,
    however recently it was read."""
    held(watch)
    heard = clock.now
    monkeypatch.setattr(watch._pubsub, "ping", lambda *a, **k: None)  # no answer comes
    clock.now = heard + watches.HEARD_SECONDS - 0.2
    config_stamp()  # kept too long: read again, and kept
    reads.clear()
    config_stamp()
    assert reads == []  # kept, and the server heard from recently enough
    clock.now = heard + watches.HEARD_SECONDS + 0.1
    moved_elsewhere(other, "during-the-silence", publish=False)
    assert config_stamp() == "during-the-silence"
    assert len(reads) == 1


def test_a_quiet_subscription_is_given_up_and_made_again(watch, clock, monkeypatch):
    held(watch)
    quiet = watch._pubsub
    monkeypatch.setattr(quiet, "ping", lambda *a, **k: None)
    clock.now += watches.PING_SECONDS
    config_stamp()  # asks (the ping that is never answered)
    clock.now += 2 * watches.HEARD_SECONDS + 0.1
    config_stamp()
    assert watch._pubsub is not quiet
    clock.now += watches.RETRY_SECONDS
    held(watch)  # a new subscription, trusted again


def test_a_move_whose_publish_failed_is_seen_within_kept_seconds(watch, other, clock):
    """The mover set the key and died before publishing: the stamp kept is read again
    after KEPT_SECONDS, heard of or not."""
    stamp = held(watch)
    moved_elsewhere(other, "never-published", publish=False)
    assert config_stamp() == stamp  # not heard of, and kept less than KEPT_SECONDS ago
    clock.now += watches.KEPT_SECONDS
    assert config_stamp() == "never-published"


def test_a_connection_redis_py_makes_again_by_itself_is_not_trusted(watch, other):
    """A reconnect inside redis-py (after a maintenance notice, say) subscribes again with
    a gap in which a move may have gone unheard: the key is read again."""
    stamp = held(watch)
    connection = watch._pubsub.connection
    # Its subscribing again is left out: the read below comes before any confirmation.
    connection.deregister_connect_callback(watch._pubsub.on_connect)
    connection.disconnect()
    moved_elsewhere(other, "in-the-gap", publish=False)
    connection.connect()  # as redis-py's own retry does
    assert config_stamp() == "in-the-gap" != stamp


def test_a_message_not_whole_yet_is_not_trusted(watch, other, monkeypatch):
    """Bytes left on the subscription that are no message yet may be a move's."""
    stamp = held(watch)
    moved_elsewhere(other, "arriving", publish=False)
    assert config_stamp() == stamp
    monkeypatch.setattr(watch._pubsub.connection, "can_read", lambda timeout=0: True)
    assert config_stamp() == "arriving"


def test_a_redis_that_cannot_be_reached_gives_a_stamp_nobody_holds(monkeypatch, cache):
    """Neither the subscription nor the key: a fresh stamp at every read (the safe side)."""

    def down(*args: Any, **kwargs: Any) -> None:
        raise redis.ConnectionError("Redis is down")

    monkeypatch.setattr(watches, "_watch", None)
    monkeypatch.setattr(watches, "stamp_client", down)
    monkeypatch.setattr(cache, "get", down)
    one, two = config_stamp(), config_stamp()
    assert one != two


def test_a_forked_child_makes_its_own_watch(monkeypatch):
    watch = watches.stamp_watch()
    monkeypatch.setattr(watch, "pid", watch.pid + 1)  # as a child sees its parent's
    assert watches.stamp_watch() is not watch
    assert stamps.stamp_watch() is watches.stamp_watch()


def test_a_redis_refusing_the_subscription_is_said_once_not_at_every_retry(
    monkeypatch, clock, caplog
):
    """A Redis that stays down (or a user without SUBSCRIBE): one warning for the
    outage, not one a second; the reads go to the key meanwhile."""

    def down(*args: Any, **kwargs: Any) -> None:
        raise redis.ConnectionError("Redis is down")

    fresh = watches.StampWatch()
    monkeypatch.setattr(watches, "stamp_client", down)
    with caplog.at_level(logging.DEBUG, logger="policies.stamp_watch"):
        for _ in range(5):
            assert fresh.held()[1] is None
            clock.now += watches.RETRY_SECONDS
    said = [r for r in caplog.records if "Could not subscribe" in r.getMessage()]
    assert len(said) == 5  # tried after every RETRY_SECONDS
    assert [r.levelno for r in said] == [logging.WARNING] + [logging.DEBUG] * 4
