"""What a process of the console imports as it starts: the model SDK and the MCP SDK cost
about 2.6 s of CPU together, so only the processes that use them import them (the run worker
as it starts, any process as it first starts an MCP server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.stack import ROOT
from tests.test_settings_env import VARIABLES

# One fresh interpreter, stage after stage (each a Python start less for the suite): what
# every process of the console loads, then the worker_init handler of a housekeeping worker
# and of a run worker (prefork: neither configures a tracer), then a call of each SDK.
PROGRAM = """
import json, sys, types, django

def held(stage):
    print(json.dumps([stage, [m for m in ("anthropic", "mcp") if m in sys.modules]]))

def worker(queue):
    queues = types.SimpleNamespace(consume_from={queue: None})
    app = types.SimpleNamespace(amqp=types.SimpleNamespace(queues=queues))
    runs.tasks._worker_started(types.SimpleNamespace(app=app, pool_cls="prefork"))

django.setup()
import harness_console.urls, runs.tasks, evals.tasks
from django.conf import settings
held("started")
worker(settings.HOUSEKEEPING_QUEUE)
held("housekeeping worker")
worker(settings.RUNS_QUEUE)
held("run worker")
from policies.mcp_servers import server_parameters
from policies.models import McpServer
server_parameters(McpServer(name="s", command="true", timeout_sec=5), None)
held("an MCP server's parameters")
"""


def test_only_the_processes_that_use_an_sdk_import_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env["HARNESS_VAR_DIR"] = str(tmp_path / "var")
    env["DJANGO_SETTINGS_MODULE"] = "harness_console.settings"
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    stages = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]
    assert stages == [
        ["started", []],  # the web process, beat, manage.py's commands
        ["housekeeping worker", []],
        ["run worker", ["anthropic"]],
        ["an MCP server's parameters", ["anthropic", "mcp"]],
    ]
