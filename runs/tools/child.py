"""The child process a tool runs in: one JSON request on stdin, one JSON reply on stdout.

Started in its own session by ``runs.tools.isolation``, so a timeout kills the whole process
group, whatever the tool started. Imports no Django: the child touches only the workspace.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

from policies.core.paths import PathRefused

from .builtin import IMPLEMENTATIONS
from .builtin.common import ToolFailure
from .child_context import CONSOLE
from .effects import effects_collect


def _implementation(name: str):
    if name in IMPLEMENTATIONS:
        return IMPLEMENTATIONS[name]
    module, _, function = name.partition(":")
    if not module or not function:
        raise ToolFailure(f"No implementation named {name!r}.")
    return getattr(importlib.import_module(module), function)


def handle(request: dict[str, Any]) -> dict[str, Any]:
    CONSOLE.set(request.get("context") or {})
    effects = effects_collect()
    try:
        function = _implementation(request["impl"])
        reply = function(Path(request["root"]), Path(request["drafts"]), request["args"])
        if effects and reply.get("ok"):  # applied by the worker, under the run's fence
            reply["effects"] = effects
        return reply
    except PathRefused as error:
        return {"ok": False, "error": str(error), "retryable": False}
    except ToolFailure as error:
        return {"ok": False, "error": str(error), "retryable": error.retryable}
    except OSError as error:
        return {
            "ok": False,
            "error": f"{type(error).__name__}: {error.strerror or error}",
            "retryable": False,
        }


def main() -> None:
    request = json.loads(sys.stdin.read())
    try:
        reply = handle(request)
    except Exception as error:  # a bug in a tool is still a tool error, never a crash
        reply = {
            "ok": False,
            "error": f"internal error: {type(error).__name__}: {error}",
            "retryable": False,
        }
    sys.stdout.write(json.dumps(reply))


if __name__ == "__main__":
    main()
