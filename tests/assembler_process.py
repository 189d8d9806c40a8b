"""Another process that assembles prompts on request, for the instruction cache tests.

It is started once and kept: each line on its standard input is the arguments of
``manage.py assemble_prompt`` as a JSON list, and each answer one JSON line, the command's
output or its error. A process that stays up across edits is the harder case for the cache
(a fresh process has nothing to keep stale); it runs on the test databases, as the live
stack does, and returns its database connection after each request.
"""

from __future__ import annotations

import io
import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_console.settings")
os.environ["HARNESS_USE_TEST_DATABASES"] = "true"

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402


def main() -> None:
    for line in sys.stdin:
        out = io.StringIO()
        try:
            call_command("assemble_prompt", *json.loads(line), stdout=out)
            reply = {"ok": True, "out": out.getvalue()}
        except Exception as error:
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        finally:
            connections.close_all()
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
