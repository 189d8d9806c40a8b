"""The embedded broker's atomic writes: a polling reader never sees a half-written message
(kombu's own filesystem transport lets it read an empty file, celery/kombu#1551)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from queue import Empty

from kombu import Connection

from harness_console.broker import Transport

MESSAGES = 300
BODY = "x" * 200_000  # large enough that writing one takes a while


def test_a_polling_reader_gets_every_message_whole(tmp_path: Path):
    folder = tmp_path / "queue"
    folder.mkdir()
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
    with (
        Connection(transport=Transport, transport_options=options) as writer,
        Connection(transport=Transport, transport_options=options) as reader,
    ):
        put, get = writer.default_channel, reader.default_channel
        received: list[dict] = []

        def write() -> None:
            for i in range(MESSAGES):
                put._put("q", {"n": i, "body": BODY})

        thread = threading.Thread(target=write)
        thread.start()
        while len(received) < MESSAGES:
            with contextlib.suppress(Empty):
                received.append(get._get("q"))  # a half-written file would fail to decode
        thread.join()
    # Messages written within one millisecond come in any order (as in kombu's own).
    assert sorted(m["n"] for m in received) == list(range(MESSAGES))
    assert all(m["body"] == BODY for m in received)
    assert not list(folder.iterdir())  # nothing left behind, no partial files
