"""A whole run through the real ``anthropic`` SDK against a local server speaking the
Messages API (SPEC R11; issue 5): tool_use turns, 529 then success, a hung response stopped
by the timeout, usage including cache tokens recorded once, and the key nowhere in the
run's record."""

from __future__ import annotations

import json
import time

import pytest

from runs.core.intake import intake
from runs.models import Message, ModelCall, Run, RunEvent, ToolCall
from runs.services import run_create
from tests.conftest import SEEDED
from tests.fake_anthropic import error, message
from tests.helpers import drive

pytestmark = SEEDED

QUESTION = "What does docs/guide.md say?"  # no replay script matches it
GUIDE = "# Guide\n\nInstall the console, then open the dashboard.\n"
FIRST_USAGE = {
    "input_tokens": 120,
    "output_tokens": 30,
    "cache_creation_input_tokens": 900,
    "cache_read_input_tokens": 0,
}
SECOND_USAGE = {
    "input_tokens": 180,
    "output_tokens": 45,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 900,
}


@pytest.fixture
def key(api_key: str) -> str:  # the conftest's made-up key, under this file's short name
    return api_key


@pytest.fixture
def guide(workspace):
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "guide.md").write_text(GUIDE)
    return workspace


def ask(personas, agent, workspace) -> Run:
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=QUESTION,
        dispatch=False,
    )
    assert (run.model_label, run.replay_script, run.model_name) == ("anthropic", "", agent.model)
    return run


def assert_key_nowhere(run: Run, key: str) -> None:
    stored = {
        "run": list(Run.objects.filter(pk=run.pk).values()),
        "events": list(RunEvent.objects.filter(run=run).values("type", "payload")),
        "model_calls": list(ModelCall.objects.filter(run=run).values()),
        "messages": list(Message.objects.filter(run=run).values("content")),
        "tool_calls": list(ToolCall.objects.filter(run=run).values()),
    }
    for where, rows in stored.items():
        text = json.dumps(rows, default=str)
        assert key not in text, f"the API key is in the run's {where}"
        assert key[len("sk-ant-api03-") :] not in text, f"the key's secret part is in {where}"


def test_the_question_needs_no_approval():
    task = intake(QUESTION)
    assert task.intent == "question" and task.ready
    assert task.approval.required is False
    assert "readSource" in task.boundaries.tools


def test_a_run_through_the_sdk_with_a_tool_turn_and_an_overload(personas, agent, guide, api, key):
    run = ask(personas, agent, guide)
    api.answers += [
        message(
            [
                {"type": "text", "text": "Let me read the guide."},
                {
                    "type": "tool_use",
                    "id": "toolu_guide_1",
                    "name": "readSource",
                    "input": {"path": "docs/guide.md"},
                },
            ],
            stop_reason="tool_use",
            usage=FIRST_USAGE,
            model="claude-sonnet-4-6",
        ),
        error(529, "overloaded_error", "Overloaded", **{"retry-after": "0"}),
        message(
            [{"type": "text", "text": "It says to install the console, then open the dashboard."}],
            usage=SECOND_USAGE,
            model="claude-sonnet-4-6",
        ),
    ]
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert not api.answers and len(api.requests) == 3  # the 529 was retried once

    # What the SDK sent: the agent's model, the key in its header, the stable system block
    # marked for caching, the run's tools, and the tool's result on the way back.
    first = api.requests[0]
    assert first["path"] == "/v1/messages"
    assert first["body"]["model"] == agent.model
    headers = {k.lower(): v for k, v in first["headers"].items()}
    assert key in (  # the SDK sends it as x-api-key or as a bearer token
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )
    system = first["body"]["system"]
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    assert "You test things." in system[0]["text"]
    assert all("cache_control" not in block for block in system[1:])
    assert "readSource" in [t["name"] for t in first["body"]["tools"]]
    assert api.requests[1]["body"] == api.requests[2]["body"]  # the retry repeats the request
    last_user = api.requests[2]["body"]["messages"][-1]
    results = [b for b in last_user["content"] if b.get("type") == "tool_result"]
    assert results[0]["tool_use_id"] == "toolu_guide_1"
    assert "open the dashboard" in results[0]["content"]

    read = ToolCall.objects.get(run=run)
    assert (read.tool, read.status, read.tool_use_id) == ("readSource", "ok", "toolu_guide_1")

    # One ModelCall per answered turn (the 529 is not one), usage exactly as served.
    calls = list(ModelCall.objects.filter(run=run).order_by("turn"))
    assert len(calls) == 2
    for call, usage in zip(calls, (FIRST_USAGE, SECOND_USAGE), strict=True):
        assert call.label == "anthropic" and call.model == "claude-sonnet-4-6"
        assert {k: getattr(call, k) for k in usage} == usage
    assert [c.request_id for c in calls] == ["req_1", "req_3"]
    assert [c.stop_reason for c in calls] == ["tool_use", "end_turn"]

    # Summed on the run once; cache tokens apart from input tokens, never added into them.
    assert (
        run.input_tokens,
        run.output_tokens,
        run.cache_creation_input_tokens,
        run.cache_read_input_tokens,
    ) == (300, 75, 900, 900)
    turns = [e.payload for e in RunEvent.objects.filter(run=run, type="model.turn")]
    assert [t["usage"] for t in turns] == [FIRST_USAGE, SECOND_USAGE]
    assert all(t["label"] == "anthropic" for t in turns)

    assert_key_nowhere(run, key)


def test_a_hung_response_fails_the_run_saying_it_timed_out(
    personas, agent, guide, api, key, settings
):
    # The client's timeout and deadline come from settings (model_for_run): short ones here.
    settings.HARNESS_MODEL_TIMEOUT_SECONDS = 0.5
    settings.HARNESS_MODEL_DEADLINE_SECONDS = 1.0
    run = ask(personas, agent, guide)
    api.answers.append(message([{"type": "text", "text": "too late"}]))
    api.answers[0].delay = 5
    started = time.monotonic()
    run = drive(run)
    elapsed = time.monotonic() - started

    assert run.status == "failed"
    assert run.failure_reason.startswith("model call failed:"), run.failure_reason
    assert "did not answer in time" in run.failure_reason
    assert "no time left to retry within 1 s" in run.failure_reason
    assert elapsed < 5, f"the hung call held the run for {elapsed:.1f} s"
    assert len(api.requests) == 1
    assert not ModelCall.objects.filter(run=run).exists()
    failed = RunEvent.objects.get(run=run, type="status.changed", payload__to="failed")
    assert "did not answer in time" in failed.payload["reason"]
    assert_key_nowhere(run, key)


def test_a_run_waiting_on_the_model_holds_no_database_connection(
    personas, agent, guide, api, monkeypatch
):
    """The model's seconds on the network are spent without a connection: with hundreds of
    runs in one worker, the pool is shared by the runs that are writing. SQLite has no
    pool and no limit: there the thread keeps its connection (reopening the file and its
    pragmas cost every model turn a millisecond for nothing)."""
    from django.db import connection

    from runs.model_clients import AnthropicModel

    held: list[bool] = []
    complete = AnthropicModel.complete

    def watched(self, **kwargs):
        held.append(connection.connection is not None)
        return complete(self, **kwargs)

    monkeypatch.setattr(AnthropicModel, "complete", watched)
    run = ask(personas, agent, guide)
    api.answers += [
        message(
            [
                {
                    "type": "tool_use",
                    "id": "toolu_c",
                    "name": "readSource",
                    "input": {"path": "docs/guide.md"},
                }
            ],
            stop_reason="tool_use",
        ),
        message([{"type": "text", "text": "Done."}]),
    ]
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert held == [connection.vendor == "sqlite"] * 2
