"""The rows that decide tool calls, kept per process (policies.decision_inputs): an edit
still applies to the very next call, in the run that is going on and in the next one, and
while nothing changed a worker reads them once."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from policies.config_stamp import config_changed, config_stamp
from policies.decision_inputs import decision_hooks, decision_policy, decision_tools
from policies.models import Policy, PolicyRule
from runs.models import ToolCall
from runs.services import run_create
from tests.conftest import SEEDED
from tests.fake_anthropic import Answer, message
from tests.helpers import drive

pytestmark = SEEDED

QUESTION = "What does docs/notes.md say?"


def read(n: int) -> Answer:
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "readSource"}
    return message([{**use, "input": {"path": "docs/notes.md"}}], stop_reason="tool_use")


def deny_notes() -> None:
    """An admin's new rule: nobody reads the notes any more (saved: the stamp moves)."""
    PolicyRule.objects.create(
        policy=Policy.objects.get(name="default"),
        order=0,
        key="notes-private",
        tool="readSource",
        path="docs/notes.md",
        decision="deny",
        reason="the notes are private now",
    )


@pytest.fixture
def notes(workspace):
    (workspace.root_path / "docs").mkdir(exist_ok=True)
    (workspace.root_path / "docs" / "notes.md").write_text("# Notes\n")
    return workspace


def start(personas, agent, workspace):
    return run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=QUESTION,
        dispatch=False,
    )


def test_a_rule_saved_between_two_calls_of_a_run_decides_the_second(personas, agent, notes, api):
    """The model asks to read twice; between its first and second answer an admin denies
    the read (in another thread, as the admin's request would be)."""

    def answer(body: dict[str, Any]) -> Answer:
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn == 1:
            deny_notes()
            connection.close()  # this thread's own connection
        return read(turn + 1) if turn < 2 else message([{"type": "text", "text": "Done."}])

    api.responder = answer
    run = drive(start(personas, agent, notes))
    calls = list(
        ToolCall.objects.filter(run=run).order_by("started_at").values_list("status", "rule")
    )
    assert calls == [("ok", "read"), ("refused", "notes-private")], calls


def test_the_next_run_in_the_same_process_sees_the_edit(personas, agent, notes, api):
    api.answers += [read(1), message([{"type": "text", "text": "Read."}])]
    first = drive(start(personas, agent, notes))
    assert ToolCall.objects.get(run=first).status == "ok"
    deny_notes()
    api.answers += [read(1), message([{"type": "text", "text": "Refused."}])]
    second = drive(start(personas, agent, notes))
    refused = ToolCall.objects.get(run=second)
    assert (refused.status, refused.rule) == ("refused", "notes-private")


def test_a_process_reads_the_rows_once_while_the_stamp_holds(agent):
    stamp = config_stamp()
    with CaptureQueriesContext(connection) as first:
        policy = decision_policy(agent, stamp)
        tools = decision_tools(for_evals=False, stamp=stamp)
        decision_hooks(agent, stamp)
    assert len(first) >= 3
    with CaptureQueriesContext(connection) as again:
        assert decision_policy(agent, stamp) is policy
        assert decision_tools(for_evals=False, stamp=stamp) is tools
        decision_hooks(agent, stamp)
    assert len(again) == 0
    config_changed()  # outside a transaction: the stamp moves at once
    moved = config_stamp()
    assert moved != stamp
    with CaptureQueriesContext(connection) as after:
        assert decision_policy(agent, moved) is not policy
    assert len(after) >= 2


def test_a_stamp_that_cannot_be_read_is_never_one_a_process_holds(agent, monkeypatch, settings):
    """A stamp whose store cannot be read (the cache down; the embedded default's file in a
    folder that is not there) is a fresh one each time: the rows are read again (the safe
    side), never served from what a process kept."""
    from pathlib import Path

    from django.core.cache import cache

    from policies import config_stamp as stamps
    from policies import stamp_watch as watches

    def down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the cache is down")

    monkeypatch.setattr(cache, "get", down)
    monkeypatch.setattr(watches, "_watch", None)  # and no subscription to trust
    monkeypatch.setattr(watches, "stamp_client", down)
    monkeypatch.setattr(stamps, "stamp_path", lambda: Path("/proc/no-such-folder/stamp"))
    one, two = config_stamp(), config_stamp()
    assert one != two
    decision_policy(agent, one)
    with CaptureQueriesContext(connection) as queries:
        decision_policy(agent, two)
    assert len(queries) >= 2


def test_the_embedded_stamp_moves_with_every_change_and_only_then(settings):
    """One machine's processes share the var folder: its stamp file is replaced at each
    change, so every process's next look sees a stamp none of them held."""
    if not settings.EMBEDDED:
        pytest.skip("production's stamp is the shared cache's (the tests above)")
    seen = {config_stamp() for _ in range(3)}
    assert len(seen) == 1
    for _ in range(5):
        config_changed()
        seen.add(config_stamp())
    assert len(seen) == 6
