"""The workers `make run` starts (issue 17): a threads pool on the runs queue, sized by
HARNESS_RUN_THREADS, and a small housekeeping worker that beat's sweepers reach whatever the
backlog of runs; one model client per process; the tracer of a threaded worker; and kill -9
of the run worker with forty runs in flight."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
from django.conf import settings

from harness_console.celery import app
from harness_console.management.commands.serve import HOUSEKEEPING_THREADS, commands
from runs import model_clients
from runs.models import ModelCall, Run, ToolCall, WriteRecord
from runs.services import run_create
from tests.conftest import EVERYWHERE, FAKE_KEY
from tests.fake_anthropic import Answer, message
from tests.stack import ROOT, wait_until
from tests.test_runs_live import TERMINAL, assert_recorded_once
from tests.test_settings_env import VARIABLES

NOTES = "# Notes\n\nThe loop waits for the model most of its life.\n"
WORKING = ("planning", "running", "verifying")


def three_turns(latency: float):
    """The fake model's answer to any run: readSource, then searchDocs, then a text, each
    after ``latency`` seconds; the turn is read from the conversation sent."""

    def answer(body: dict[str, Any]) -> Answer:
        turn = 1 + sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
        usage = {"input_tokens": 100, "output_tokens": 10}
        if turn == 1:
            use = {"id": "toolu_read", "name": "readSource", "input": {"path": "docs/notes.md"}}
            reply = message([{"type": "tool_use", **use}], stop_reason="tool_use", usage=usage)
        elif turn == 2:
            use = {"id": "toolu_search", "name": "searchDocs", "input": {"query": "loop"}}
            reply = message([{"type": "tool_use", **use}], stop_reason="tool_use", usage=usage)
        else:
            reply = message([{"type": "text", "text": "It says the loop waits."}], usage=usage)
        reply.delay = latency
        return reply

    return answer


# --- the commands and the routes -------------------------------------------------------------
def test_each_task_goes_to_its_queue():
    route = app.amqp.router.route
    for task in ("runs.tasks.run_execute", "runs.tasks.run_session_end"):
        assert route({}, task)["queue"].name == settings.RUNS_QUEUE
    for task in (
        "runs.tasks.runs_sweep",
        "runs.tasks.approvals_sweep",
        "runs.tasks.rollups_reconcile_recent",
        "runs.tasks.rollups_fold_pending",
        "runs.tasks.live_layer_trim",
        "evals.tasks.suites_sweep",
    ):
        assert route({}, task)["queue"].name == settings.HOUSEKEEPING_QUEUE
    # An eval suite waits on its runs for minutes: never behind (or among) them.
    for task in (
        "approvals.tasks.approval_email",
        "approvals.tasks.approval_webhook",
        "evals.tasks.suite_execute",
    ):
        assert route({}, task)["queue"].name == settings.CELERY_TASK_DEFAULT_QUEUE
    # Every task beat sends is a housekeeping one: none waits behind runs.
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert route({}, entry["task"])["queue"].name == settings.HOUSEKEEPING_QUEUE


def test_the_workers_serve_starts_take_their_queues_and_the_threads_setting(tmp_path):
    """Started as serve starts them, with HARNESS_RUN_THREADS=7: the run worker is a
    threads pool of 7 on the runs queue alone; housekeeping a small one on the other two."""
    argv = commands(host="127.0.0.1", port=0, worker_name="probe@%h")
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(HARNESS_VAR_DIR=str(tmp_path / "var"), HARNESS_RUN_THREADS="7")
    env.update(PYTHONUNBUFFERED="1")
    logs, processes = {}, {}
    for name in ("worker", "housekeeping"):
        logs[name] = tmp_path / f"{name}.log"
        processes[name] = subprocess.Popen(
            argv[name],
            cwd=ROOT,
            env=env,
            stdout=open(logs[name], "wb"),  # noqa: SIM115 - kept open for the child
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        for name, log in logs.items():
            wait_until(lambda log=log: "ready." in log.read_text(), timeout=120, what=name)
        runs, housekeeping = (logs[n].read_text() for n in ("worker", "housekeeping"))
        assert "concurrency: 7 (thread)" in runs
        assert f".> {settings.RUNS_QUEUE} " in runs
        assert f".> {settings.HOUSEKEEPING_QUEUE} " not in runs
        assert f"concurrency: {HOUSEKEEPING_THREADS} (thread)" in housekeeping
        assert f".> {settings.HOUSEKEEPING_QUEUE} " in housekeeping
        assert f".> {settings.CELERY_TASK_DEFAULT_QUEUE} " in housekeeping
        assert f".> {settings.RUNS_QUEUE} " not in housekeeping
        for process in processes.values():  # SIGTERM to the main process: a warm shutdown
            process.send_signal(signal.SIGTERM)
        assert [p.wait(timeout=30) for p in processes.values()] == [0, 0]
    finally:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_the_threads_setting_must_be_positive():
    env = {**os.environ, "HARNESS_RUN_THREADS": "0"}
    found = subprocess.run(
        [sys.executable, "-c", "import harness_console.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert found.returncode != 0 and "HARNESS_RUN_THREADS must be 1 or more" in found.stderr


# --- one model client per process ------------------------------------------------------------
def test_runs_of_one_process_share_one_model_client(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/shared")
    models: list[model_clients.AnthropicModel] = []
    ready = threading.Barrier(16)

    def build() -> None:
        ready.wait()  # all at once: the lock, not luck, makes them one
        models.append(model_clients.AnthropicModel("claude-test", timeout=33.0))

    threads = [threading.Thread(target=build) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(m._client) for m in models}) == 1
    # Other settings, another client; the key is in no repr.
    other = model_clients.AnthropicModel("claude-test", timeout=34.0)
    assert other._client is not models[0]._client
    elsewhere = model_clients.AnthropicModel("claude-test", timeout=33.0, base_url="http://x")
    assert elsewhere._client is not models[0]._client
    assert FAKE_KEY not in repr(models[0]) and FAKE_KEY not in str(model_clients._clients)


# --- the live stack's workers ----------------------------------------------------------------
@pytest.fixture
def notes(workspace):
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "notes.md").write_text(NOTES)
    return workspace


@pytest.fixture
def model_answers(live_stack, monkeypatch):
    """The fake model answers every run's three turns, after ``latency`` seconds."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)  # these requests have no replay script
    fake = live_stack.fake_anthropic

    def answering(latency: float) -> None:
        fake.responder = three_turns(latency)

    yield answering
    fake.responder = None


@pytest.fixture
def restored_worker(live_stack):
    """The stack's run worker as serve starts it again after the test, whatever happens."""
    yield live_stack
    if "worker" in live_stack.processes:
        live_stack.stop_worker("worker")
    live_stack.extra_env.pop("HARNESS_RUN_THREADS", None)
    live_stack.start_worker("worker")


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_the_live_workers_are_the_ones_serve_starts(live_stack, settings):
    settings.HARNESS_RUN_PROCESSES = 1  # the live stack's (tests/stack.py)
    argv = commands(host="127.0.0.1", port=live_stack.port)
    assert set(live_stack.processes) == set(argv)
    assert f"concurrency: {settings.HARNESS_RUN_THREADS} (thread)" in live_stack.log("worker")


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_sweep_is_consumed_while_the_run_queue_is_saturated(
    restored_worker, model_answers, personas, agent, notes
):
    """A run worker of two threads, eight slow runs: while six of them wait in the runs
    queue, a housekeeping task sent now is done by the housekeeping worker."""
    stack = restored_worker
    stack.stop_worker("worker")
    stack.extra_env["HARNESS_RUN_THREADS"] = "2"
    stack.start_worker("worker")
    assert "concurrency: 2 (thread)" in stack.log("worker")
    model_answers(1.0)
    runs = [
        run_create(
            agent=agent,
            workspace=notes,
            requester=personas.operator,
            request=f"Summarize docs/notes.md for reader {i}",
        )
        for i in range(8)
    ]
    ids = [r.pk for r in runs]
    wait_until(
        lambda: Run.objects.filter(pk__in=ids, status__in=WORKING).count() == 2,
        timeout=30,
        what="two runs in flight",
    )
    from runs.tasks import approvals_sweep

    sent = approvals_sweep.delay()
    wait_until(
        lambda: f"[{sent.id}] succeeded" in stack.log("housekeeping"),
        timeout=30,
        what="the housekeeping worker to do the sweep",
    )
    # Done while runs still waited for a thread of the run worker: not behind them.
    assert Run.objects.filter(pk__in=ids, status="created").count() >= 2
    assert f"[{sent.id}]" not in stack.log("worker")
    # The point is made: the queued runs must still all end, but need not wait 1 s a turn.
    model_answers(0.0)
    wait_until(
        lambda: Run.objects.filter(pk__in=ids, status__in=TERMINAL).count() == 8,
        timeout=120,
        what="the eight runs to end",
    )
    assert set(Run.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"completed"}


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_the_threaded_worker_exports_its_spans(live_stack, model_answers, personas, agent, notes):
    model_answers(0.0)
    run = run_create(
        agent=agent, workspace=notes, requester=personas.operator, request="Summarize docs/notes.md"
    )
    wait_until(
        lambda: Run.objects.filter(pk=run.pk, status__in=TERMINAL).exists(),
        timeout=60,
        what="the run to end",
    )
    assert Run.objects.get(pk=run.pk).status == "completed"
    found = live_stack.otlp.wait_for(run.pk.hex, "invoke_agent tester")
    names = {s.name for s in found}
    assert {"execute_tool readSource", "execute_tool searchDocs"} <= names
    assert len([s for s in found if s.name.startswith("chat ")]) == 3


def held_at_the_model(hold: threading.Event, waiting: set[int]):
    """The three turns, but each run's call waits at the model until ``hold`` is set: the
    odd readers' first turn (no tool run yet), the even readers' second (one tool done)."""
    turns = three_turns(0.2)

    def answer(body: dict[str, Any]) -> Answer:
        reply = turns(body)
        turn = 1 + sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
        found = re.search(r"reader (\d+)", json.dumps(body.get("messages", ())[:1]))
        reader = int(found.group(1)) if found else -1
        if turn == 1 + reader % 2 and not hold.is_set():
            waiting.add(reader)
            hold.wait(timeout=300)
        return reply

    return answer


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_forty_runs_in_flight_survive_kill_9_of_the_run_worker(
    restored_worker, model_answers, personas, agent, notes
):
    """SIGKILL to the threaded run worker while forty runs are mid-flight (each waiting at
    the model, half of them after a tool); a new one takes them over (the sweeper finds
    their expired leases). Every run completes, each tool_use ran once, each model turn
    is recorded once."""
    stack = restored_worker
    fake = stack.fake_anthropic
    hold, waiting = threading.Event(), set()
    model_answers(0.2)
    fake.responder = held_at_the_model(hold, waiting)
    try:
        runs = [
            run_create(
                agent=agent,
                workspace=notes,
                requester=personas.operator,
                request=f"Summarize docs/notes.md for reader {i}",
            )
            for i in range(40)
        ]
        ids = [r.pk for r in runs]
        wait_until(
            lambda: (
                waiting == set(range(40))
                and Run.objects.filter(pk__in=ids, status__in=WORKING).count() == 40
            ),
            timeout=180,
            what="forty runs in flight, each waiting at the model",
        )
        stack.kill_worker("worker")
    finally:
        hold.set()  # the killed worker's calls are answered into closed sockets
    stack.start_worker("worker")
    wait_until(
        lambda: Run.objects.filter(pk__in=ids, status__in=TERMINAL).count() == 40,
        timeout=180,
        what="the forty runs to end",
    )
    done = list(Run.objects.filter(pk__in=ids))
    assert [r.status for r in done] == ["completed"] * 40, [r.failure_reason for r in done]
    assert all(r.lease_takeovers >= 1 for r in done)  # the kill interrupted every one
    for run in done:
        assert_recorded_once(run)
        assert list(
            ModelCall.objects.filter(run=run).order_by("turn").values_list("turn", flat=True)
        ) == [1, 2, 3]
        calls = list(ToolCall.objects.filter(run=run).values_list("tool_use_id", flat=True))
        assert sorted(calls) == ["toolu_read", "toolu_search"]
    assert not WriteRecord.objects.filter(tool_call__run__in=ids).exists()
