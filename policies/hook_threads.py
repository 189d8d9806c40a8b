"""A hook handler's time limit, enforced with a worker thread: the ``call`` the loop gives the
pure chain of :mod:`policies.core.hook_runner`.

1. The handler runs in a daemon thread, so one that overruns never holds up the process's exit.
2. The caller waits for it at most its time limit. Python cannot stop a thread, so an
   overrunning handler finishes in the background, and whatever it returns or raises then is
   ignored: the answer was already :class:`Overran`.
3. Anything the handler raises, ``BaseException`` included, is answered as :class:`Crashed`,
   never raised here: a handler's failure is the chain's to judge (fail open or closed).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .core.hook_runner import CallOutcome, Crashed, Finished, HookHandler, Overran


def call_in_thread(
    handler: HookHandler, event: Mapping[str, Any], time_limit: float
) -> CallOutcome:
    """``handler(event)`` in a worker thread, waited for at most ``time_limit`` seconds."""
    finished = threading.Event()
    box: list[CallOutcome] = []

    def work() -> None:
        try:
            box.append(Finished(handler(event)))
        except BaseException as error:  # a handler's failure is reported, never raised here
            box.append(Crashed(error))
        finally:
            finished.set()

    threading.Thread(target=work, name="hook-handler", daemon=True).start()
    if not finished.wait(time_limit):
        return Overran()
    return box[0]
