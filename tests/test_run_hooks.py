"""Hook bindings wired into a run's loop (SPEC C7; issue 5 "Tests that must exist: Hooks"):
a halting pre_tool_use handler refuses the call and says so, a crashing one fails closed
(or is skipped when fail-open), secret redaction reaches the output before anything stores
or shows it, a halting session_start fails the run, and a session_end webhook really posts."""

from __future__ import annotations

import json
import secrets
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from policies.models import HookBinding
from runs.models import Artifact, Message, ModelCall, Run, RunEvent, ToolCall
from runs.services import run_create
from tests.conftest import SEEDED
from tests.helpers import BROKEN, FIX, drive
from tests.webhook_sink import WebhookSink

pytestmark = SEEDED

SUMMARY = "Summarize docs/team-notes.md"  # tests/replays/hooks-summary.json


@pytest.fixture
def receiver():
    server = WebhookSink()
    yield server
    server.close()


def start(personas, agent, workspace, request: str) -> Run:
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=request,
        dispatch=False,
    )
    assert run.model_label == "offline replay", "no replay script matched the request"
    return run


def events(run: Run, type: str) -> list[dict[str, Any]]:
    return [e.payload for e in RunEvent.objects.filter(run=run, type=type).order_by("seq")]


def freeze_settings() -> dict[str, Any]:
    now = timezone.now()
    return {
        "windows": [
            {
                "name": "release week",
                "start": (now - timedelta(hours=1)).isoformat(),
                "end": (now + timedelta(hours=1)).isoformat(),
            }
        ],
        "reason": "Release in progress",
    }


def bind(agent, phase: str, handler: str, settings: dict[str, Any], **fields: Any) -> HookBinding:
    binding = HookBinding(agent=agent, phase=phase, handler=handler, settings=settings, **fields)
    binding.full_clean()  # a binding an admin could have saved
    binding.save()
    return binding


def tool_results(run: Run) -> dict[str, dict[str, Any]]:
    return {
        m.tool_use_id: m.content
        for m in Message.objects.filter(run=run, kind="tool_result").order_by("index")
    }


# --- (a) a halting pre_tool_use handler -------------------------------------------------------
def test_a_change_freeze_refuses_the_write_and_says_which_hook_and_why(
    personas, agent, workspace, docs
):
    bind(agent, "pre_tool_use", "change-freeze", freeze_settings())
    run = drive(start(personas, agent, workspace, FIX))

    # The read went on (read-only tools run during a freeze); the write was refused.
    read = ToolCall.objects.get(run=run, tool="readSource")
    assert read.status == "ok"
    patch = ToolCall.objects.get(run=run, tool="patchDraft")
    assert (patch.status, patch.decision, patch.rule) == ("refused", "deny", "hook:change-freeze")
    assert "Change freeze (release week): Release in progress" in patch.reason
    assert "change-freeze" in patch.error
    # Nothing written: no draft, the file untouched, nothing to approve.
    assert not (workspace.drafts_path / str(run.pk) / "docs" / "configuration.md").exists()
    assert (docs / "configuration.md").read_text() == BROKEN
    assert not patch.writes.exists()

    halted = events(run, "hook.halted")
    assert len(halted) == 1
    assert halted[0]["phase"] == "pre_tool_use" and halted[0]["tool"] == "patchDraft"
    assert halted[0]["handler"] == "change-freeze"
    assert "Release in progress" in halted[0]["reason"]
    assert halted[0]["reports"][0]["verdict"] == "halted"

    # The model was told, as an error tool_result, and went on to its last turn.
    result = tool_results(run)["toolu_patch_1"]
    assert result["type"] == "tool_result" and result["is_error"] is True
    told = json.loads(result["content"])
    assert told["ok"] is False and told["rule"] == "hook:change-freeze"
    assert "Release in progress" in told["error"]
    assert ModelCall.objects.filter(run=run).count() == 3
    assert run.status == "completed", run.failure_reason


# --- (b) a crashing handler: fail closed, or skipped when fail-open ----------------------------
def broken_binding(agent, *, fail_open: bool) -> HookBinding:
    binding = bind(agent, "pre_tool_use", "change-freeze", freeze_settings(), fail_open=fail_open)
    # Edited outside the admin: clean() never sees it, the stored settings no longer build.
    HookBinding.objects.filter(pk=binding.pk).update(settings={"windows": "next week"})
    return binding


def test_a_handler_whose_settings_no_longer_build_fails_closed(personas, agent, workspace, docs):
    binding = broken_binding(agent, fail_open=False)
    run = drive(start(personas, agent, workspace, FIX))

    calls = ToolCall.objects.filter(run=run).order_by("started_at")
    assert [(c.tool, c.status, c.rule) for c in calls] == [
        ("readSource", "refused", "hook:change-freeze"),  # a crash halts even a read
        ("patchDraft", "refused", "hook:change-freeze"),
    ]
    assert not (workspace.drafts_path / str(run.pk) / "docs" / "configuration.md").exists()
    halted = events(run, "hook.halted")
    assert len(halted) == 2
    for payload in halted:
        assert payload["handler"] == "change-freeze"
        assert "crashed" in payload["reason"]
        assert f"binding #{binding.pk} has bad settings" in payload["reason"]
        assert payload["reports"][0]["verdict"] == "crashed"
        assert payload["reports"][0]["skipped"] is False
    assert all(r["is_error"] for r in tool_results(run).values())


def test_a_crashing_fail_open_handler_is_skipped_and_the_run_says_so(
    personas, agent, workspace, docs
):
    broken_binding(agent, fail_open=True)
    run = drive(start(personas, agent, workspace, FIX))

    calls = {c.tool: c for c in ToolCall.objects.filter(run=run)}
    assert calls["readSource"].status == "ok"
    assert calls["patchDraft"].status == "ok" and not calls["patchDraft"].rule.startswith("hook:")
    assert (workspace.drafts_path / str(run.pk) / "docs" / "configuration.md").exists()
    assert not events(run, "hook.halted")
    ran = events(run, "hook.ran")
    assert [p["tool"] for p in ran] == ["readSource", "patchDraft"]
    for payload in ran:
        (report,) = payload["reports"]
        assert report["handler"] == "change-freeze"
        assert (report["verdict"], report["skipped"]) == ("crashed", True)
        assert "bad settings" in report["reason"]
    assert run.status == "waiting_for_approval" and run.waiting_for == "approval"


# --- (c) secret redaction before the model, the page or an artifact sees it -------------------
def test_secret_redaction_removes_a_planted_key_everywhere(personas, agent, workspace):
    key = "sk-ant-api03-" + secrets.token_urlsafe(40)
    (workspace.root_path / "docs").mkdir()
    filler = "".join(f"Line {i}: the team meets on Mondays.\n" for i in range(800))
    (workspace.root_path / "docs" / "team-notes.md").write_text(
        f"# Team notes\n\nANTHROPIC key for the bot: {key}\n\n{filler}\nagain: {key}\n"
    )
    bind(agent, "post_tool_use", "secret-redaction", {})
    run = drive(start(personas, agent, workspace, SUMMARY))
    assert run.status == "completed", run.failure_reason

    read = ToolCall.objects.get(run=run, tool="readSource")
    assert read.status == "ok"
    # The file is larger than a tool result may be: the full output went to an artifact.
    artifacts = list(Artifact.objects.filter(tool_call__run=run))
    assert artifacts, "expected the long output to be kept as an artifact"

    stored = {
        "messages": [m.content for m in Message.objects.filter(run=run)],
        "tool_calls": [(c.output, c.error, c.reason) for c in ToolCall.objects.filter(run=run)],
        "artifacts": [a.content for a in artifacts],
        "events": [e.payload for e in RunEvent.objects.filter(run=run)],
        "model_calls": [c.text for c in ModelCall.objects.filter(run=run)],
    }
    for where, value in stored.items():
        assert key not in json.dumps(value, default=str), f"the key leaked into {where}"
        assert key[:24] not in json.dumps(value, default=str), f"part of the key is in {where}"

    result = tool_results(run)["toolu_read_notes"]
    assert "[REDACTED:anthropic_key]" in result["content"]
    assert "[REDACTED:anthropic_key]" in read.output["content"]
    assert artifacts[0].content.count("[REDACTED:anthropic_key]") == 2
    assert result["is_error"] is False  # redacted, not withheld


# --- (d) a halting session_start fails the run ---------------------------------------------------
def test_a_halting_session_start_fails_the_run_naming_the_handler(personas, agent, workspace):
    down = WebhookSink(status=503)
    try:
        bind(agent, "session_start", "webhook-notifier", {"url": down.url, "timeout": 2})
        run = drive(start(personas, agent, workspace, SUMMARY))
    finally:
        down.close()

    assert run.status == "failed"
    assert run.failure_reason.startswith("halted by the webhook-notifier hook:"), run.failure_reason
    assert "answered HTTP 503" in run.failure_reason
    assert "/hooks/harness" not in run.failure_reason  # a webhook URL's path may be its secret
    assert len(down.posts) == 1 and down.posts[0]["body"]["phase"] == "session_start"
    # Stopped before the model was asked anything.
    assert not ModelCall.objects.filter(run=run).exists()
    assert not ToolCall.objects.filter(run=run).exists()
    (halted,) = events(run, "hook.halted")
    assert halted["phase"] == "session_start" and halted["handler"] == "webhook-notifier"


# --- (e) a session_end webhook posts over real HTTP ----------------------------------------------
def test_a_session_end_webhook_posts_when_the_run_ends(personas, agent, workspace, receiver):
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "team-notes.md").write_text("# Team notes\n\nMondays.\n")
    bind(
        agent,
        "session_end",
        "webhook-notifier",
        {"url": receiver.url, "timeout": 2, "headers": {"X-Hook": "harness"}},
    )
    run = start(personas, agent, workspace, SUMMARY)
    run = drive(run)
    assert run.status == "completed", run.failure_reason

    assert len(receiver.posts) == 1, receiver.posts
    post = receiver.posts[0]
    assert post["path"] == "/hooks/harness"
    assert post["headers"].get("X-Hook") == "harness"
    body = post["body"]
    assert body["phase"] == "session_end"
    assert body["run_id"] == str(run.pk) and body["agent"] == agent.slug
    assert body["at"]
    # Delivered: nothing halted, nothing worth an event.
    assert not events(run, "hook.halted") and not events(run, "hook.ran")


def test_a_session_end_webhook_says_how_the_run_ended(personas, agent, workspace, receiver):
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "team-notes.md").write_text("# Team notes\n\nMondays.\n")
    bind(agent, "session_end", "webhook-notifier", {"url": receiver.url, "timeout": 2})
    run = drive(start(personas, agent, workspace, SUMMARY))
    assert run.status == "completed"
    assert receiver.posts[0]["body"]["status"] == "completed"
