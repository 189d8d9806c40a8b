"""kombu's filesystem transport (the embedded default's broker), with atomic writes.

kombu 5.7 creates a message file in the queue folder and only then writes into it; a worker
polling at that moment moves and reads an empty file, and dies with "Unrecoverable error:
JSONDecodeError" (celery/kombu#1551, open). Here a message is written under a name the
reader ignores and renamed into place (``os.replace``: atomic within one folder), so a
reader sees a whole message or none.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        folder = self.data_folder_out
        final = os.path.join(folder, f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg")
        # The reader takes only names ending ".<queue>.msg"; this one ends ".partial".
        partial = os.path.join(folder, f"writing-{uuid.uuid4().hex}.partial")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
