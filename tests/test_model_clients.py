"""The model clients (SPEC R11): the real anthropic SDK against a local server speaking the
Messages API, and the offline replay."""

from __future__ import annotations

import json
import time

import pytest

from runs.core.model_turns import ModelError
from runs.model_clients import AnthropicModel, ReplayModel, system_blocks
from tests.fake_anthropic import FakeAnthropic, error, message

KEY = "sk-ant-test-key-123"
SYSTEM = system_blocks("You are a docs assistant.", "Task: fix the link.")
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def api(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    fake = FakeAnthropic()
    yield fake
    fake.close()


def model(api, **kwargs) -> AnthropicModel:
    return AnthropicModel("claude-test", base_url=api.url, **kwargs)


def test_a_tool_use_turn_and_its_usage_including_cache_tokens(api):
    api.answers.append(
        message(
            [
                {"type": "text", "text": "Let me read it."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "readSource",
                    "input": {"path": "docs/a.md"},
                },
            ],
            stop_reason="tool_use",
            usage={
                "input_tokens": 100,
                "output_tokens": 20,
                "cache_creation_input_tokens": 50,
                "cache_read_input_tokens": 25,
            },
        )
    )
    turn = model(api).complete(
        system=SYSTEM,
        messages=HELLO,
        tools=[{"name": "readSource", "description": "Read.", "input_schema": {"type": "object"}}],
    )
    assert (turn.stop_reason, turn.text, turn.label) == ("tool_use", "Let me read it.", "anthropic")
    assert [(t.id, t.name, t.input) for t in turn.tool_uses] == [
        ("toolu_1", "readSource", {"path": "docs/a.md"})
    ]
    assert (
        turn.usage.input_tokens,
        turn.usage.cache_creation_input_tokens,
        turn.usage.cache_read_input_tokens,
    ) == (100, 50, 25)
    assert turn.usage.total_input_tokens == 175  # each input token counted once
    assert turn.request_id == "req_1"
    sent = api.requests[0]
    assert sent["body"]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in sent["body"]["system"][1]
    assert sent["body"]["tools"][0]["name"] == "readSource"


def test_overloaded_then_success_is_retried(api):
    api.answers += [
        error(529, "overloaded_error", "Overloaded"),
        message([{"type": "text", "text": "done"}]),
    ]
    turn = model(api).complete(system=SYSTEM, messages=HELLO)
    assert turn.text == "done" and len(api.requests) == 2


def test_a_hung_response_is_stopped_by_the_timeout(api):
    api.answers.append(message([{"type": "text", "text": "late"}]))
    api.answers[0].delay = 5
    started = time.monotonic()
    with pytest.raises(ModelError, match="did not answer in time"):
        model(api, timeout=0.5, attempts=1).complete(system=SYSTEM, messages=HELLO)
    assert time.monotonic() - started < 5  # it did not wait for the late answer


def test_a_huge_retry_after_is_capped_by_the_deadline(api):
    api.answers += [
        error(429, "rate_limit_error", "slow down", **{"retry-after": "1000"}),
        message([{"type": "text", "text": "never reached"}]),
    ]
    started = time.monotonic()
    with pytest.raises(ModelError, match="no time left to retry"):
        model(api, attempts=3, deadline=2).complete(system=SYSTEM, messages=HELLO)
    assert time.monotonic() - started < 60 and len(api.requests) == 1  # not the 1,000 s asked


def test_a_bad_request_is_not_retried(api):
    api.answers.append(error(400, "invalid_request_error", "bad"))
    with pytest.raises(ModelError, match="answered 400") as failure:
        model(api).complete(system=SYSTEM, messages=HELLO)
    assert failure.value.retryable is False and len(api.requests) == 1


def test_the_key_comes_from_the_environment_and_never_shows(api, monkeypatch):
    api.answers.append(message([{"type": "text", "text": "ok"}]))
    client = model(api)
    client.complete(system=SYSTEM, messages=HELLO)
    headers = {k.lower(): v for k, v in api.requests[0]["headers"].items()}
    assert KEY in (
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert KEY not in repr(client)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY is not set"):
        model(api)


def test_the_replay_model_plays_its_turns_in_order_and_says_what_it_is(tmp_path):
    script = tmp_path / "replay.json"
    script.write_text(
        json.dumps(
            {
                "model": "replay-docs",
                "turns": [
                    {
                        "stop_reason": "tool_use",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": "t1",
                                "name": "readSource",
                                "input": {"path": "a.md"},
                            }
                        ],
                        "usage": {"input_tokens": 3, "output_tokens": 2},
                    },
                    {"content": [{"type": "text", "text": "All done."}]},
                ],
            }
        )
    )
    replay = ReplayModel.from_file(script)
    first = replay.complete(system=SYSTEM, messages=HELLO)
    second = replay.complete(system=SYSTEM, messages=HELLO)
    assert (first.label, first.model, first.tool_uses[0].name) == (
        "offline replay",
        "replay-docs",
        "readSource",
    )
    assert (second.stop_reason, second.text) == ("end_turn", "All done.")
    with pytest.raises(ModelError, match="no turn 3"):
        replay.complete(system=SYSTEM, messages=HELLO)


@pytest.mark.parametrize("text", ["not json", '{"turns": "x"}', '{"turns": [1]}'])
def test_a_broken_replay_script_is_a_clear_error(tmp_path, text):
    script = tmp_path / "replay.json"
    script.write_text(text)
    with pytest.raises(ModelError, match="replay script"):
        ReplayModel.from_file(script)


@pytest.mark.parametrize("keep_alive", [False, True])
def test_the_fake_api_keeps_connections_only_when_a_bench_asks(monkeypatch, keep_alive):
    """bench/throughput.py's fake answers as the real API does, on a kept connection: a
    connection per call would cost its workers CPU no real run spends."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    fake = FakeAnthropic(keep_alive=keep_alive)
    try:
        fake.answers += [
            message([{"type": "text", "text": "One."}]),
            message([{"type": "text", "text": "Two."}]),
        ]
        client = model(fake)
        texts = [client.complete(system=SYSTEM, messages=HELLO, tools=[]).text for _ in range(2)]
    finally:
        fake.close()
    assert texts == ["One.", "Two."]
    peers = {request["peer"] for request in fake.requests}
    assert len(peers) == (1 if keep_alive else 2)
