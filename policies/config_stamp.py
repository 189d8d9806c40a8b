"""A stamp that changes whenever anything a tool call is decided by changes (SPEC P3–P7),
or a model call's price (SPEC O4).

A worker driving a run keeps the run's policy, rules, tool definitions, hook bindings and
grants in memory instead of reading them again before every tool call; it reads this stamp
instead (the cache's key, every process's, web and workers, kept by each process while
its subscription to the stamp's moves hears none: ``policies.stamp_watch``; one ``stat`` of
a file on the embedded default), and reads the rows again when it moved. The stamp moves
once the change is committed, so a worker that sees the new stamp also sees the new rows.
It is a random token, not a counter: a cache that lost it (evicted, flushed) gives a stamp
no worker holds, and every worker that reads it reads its rows again, the safe side.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from .stamp_watch import stamp_watch

logger = logging.getLogger(__name__)
KEY = "harness:decision-config-stamp"
STAMP_SECONDS = 7 * 24 * 3600
# However the stamp fares (a cache that was down when it should have moved), a worker
# reads its rows again at least this often.
MAX_AGE_SECONDS = 30.0
# What a process keeps under the stamp (stamp_kept): at most this many entries.
MAX_ENTRIES = 1024

_lock = threading.Lock()
_entries: dict[Hashable, tuple[str, float, Any]] = {}

# Models whose rows a worker keeps in memory; a save or delete of any moves the stamp.
MODELS = (
    "policies.Agent",
    "policies.Policy",
    "policies.PolicyRule",
    "policies.ToolDefinition",
    "policies.HookBinding",
    "policies.McpServer",
    "runs.SessionGrant",
    "runs.ModelPrice",  # not a decision's: the price table a worker keeps moves it too
)


def config_stamp() -> str:
    """The stamp now: created when there is none; a stamp nobody holds when it cannot be
    read (the rows are read again: the safe side).

    In production it is a key of the cache every machine shares. The embedded default is
    one machine whose processes share its var folder: there the stamp is the identity of a
    file in it, read with one ``stat`` (the file cache's read, open and unpickle cost a
    tool call more than its decision did)."""
    if settings.EMBEDDED:
        return _file_stamp()
    watch = stamp_watch()
    moves, kept = watch.held()  # without a round trip while the process heard no move
    if kept is not None:
        return kept
    try:
        stamp = cache.get(KEY)
        if stamp is None:
            cache.add(KEY, uuid.uuid4().hex, STAMP_SECONDS)
            stamp = cache.get(KEY)
    except Exception:
        logger.warning("Could not read the decision config stamp", exc_info=True)
        stamp = None
    if not stamp:
        return uuid.uuid4().hex
    watch.keep(moves, str(stamp))
    return str(stamp)


def config_changed() -> None:
    """Move the stamp once the current transaction commits (at once outside one). Call
    after a bulk ``update()`` of a model in MODELS, which sends no signal."""
    transaction.on_commit(_stamp_moved, robust=True)


def _stamp_moved() -> None:
    if settings.EMBEDDED:
        _file_replaced()
        return
    stamp = uuid.uuid4().hex
    watch = stamp_watch()
    try:
        cache.set(KEY, stamp, STAMP_SECONDS)
        watch.publish(stamp)  # after the set: a process that hears it reads the new one
    finally:
        watch.moved()


def stamp_path() -> Path:
    return Path(settings.VAR_DIR) / "decision-config.stamp"


def _file_stamp() -> str:
    """The file's inode and time of change: a move replaces the file (a new inode, a new
    time), so no two stamps of one file are the same."""
    try:
        try:
            found = os.stat(stamp_path())
        except FileNotFoundError:
            _file_replaced()
            found = os.stat(stamp_path())
    except OSError:
        logger.warning("Could not read the decision config stamp", exc_info=True)
        return uuid.uuid4().hex
    return f"{found.st_ino}-{found.st_mtime_ns}"


def _file_replaced() -> None:
    """A new file in the stamp's place, written aside and renamed over it (atomic)."""
    path = stamp_path()
    aside = path.with_name(f"{path.name}.{uuid.uuid4().hex}")
    aside.write_text(uuid.uuid4().hex)
    os.replace(aside, path)


def config_row_changed(sender: Any, **kwargs: Any) -> None:
    """post_save / post_delete receiver for the models in MODELS."""
    config_changed()


def stamp_kept[T](key: Hashable, stamp: str, load: Callable[[], T]) -> T:
    """What ``load`` returns, kept by this process under ``key`` while the stamp is
    ``stamp`` and for at most ``MAX_AGE_SECONDS``. Read the stamp *before* the rows: a
    load that raced an edit is tagged with the older stamp and read again at the next
    look. Shared by the process's threads: keep values nobody writes to."""
    now = time.monotonic()
    entry = _entries.get(key)
    if entry is not None and entry[0] == stamp and now - entry[1] < MAX_AGE_SECONDS:
        value: T = entry[2]
        return value
    value = load()
    with _lock:
        if len(_entries) >= MAX_ENTRIES:
            _entries.clear()
        _entries[key] = (stamp, now, value)
    return value


def stamp_kept_forget(key: Hashable | None = None) -> None:
    """Drop what is kept under ``key``, or everything: this process reads it again."""
    with _lock:
        if key is None:
            _entries.clear()
        else:
            _entries.pop(key, None)
