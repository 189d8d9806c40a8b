"""Findings of a security review of the tools, each kept fixed by a test."""

from __future__ import annotations

import os

import pytest

from policies.core.default_policy import DEFAULT_POLICY
from policies.core.permissions import Policy, Rule
from policies.instruction_cache import instructions_load
from policies.models import ToolDefinition
from runs.tools.call import tool_call_run
from runs.tools.isolation import run_isolated

pytestmark = pytest.mark.django_db
OPEN = Policy("open", "L3", (Rule("all", "*", "allow"),))


def call(workspace, tool, policy=DEFAULT_POLICY, **arguments):
    return tool_call_run(workspace=workspace, tool=tool, arguments=arguments, policy=policy)


@pytest.fixture
def secrets(workspace, tmp_path):
    root = workspace.root_path
    (root / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-planted\n")
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("# Docs\n\nThe api key lives elsewhere.\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("OUTSIDE api key\n")
    os.symlink(outside, root / "docs" / "link.md")
    return workspace


def test_grep_and_glob_never_follow_a_link_out_of_the_workspace(secrets):
    grep = call(secrets, "grep", pattern=".")
    assert "OUTSIDE" not in str(grep.output)
    assert "docs/link.md" not in str(call(secrets, "glob", pattern="**").output)


def test_listing_tools_leave_out_files_the_policy_denies(secrets, tmp_path):
    assert "sk-ant-planted" not in str(call(secrets, "grep", pattern="API").output)
    assert ".env" not in call(secrets, "glob", pattern="**").output["matches"]
    (secrets.root_path / "docs" / ".env.md").write_text("# secret api key notes\n")
    assert "docs/.env.md" not in str(call(secrets, "searchDocs", query="api key").output)
    reply = run_isolated(
        impl="publish",
        root=str(secrets.root),
        drafts=str(tmp_path),
        args={},
        timeout=10,
        context={
            "publish_root": str(tmp_path / "site"),
            "policy": {
                "name": "default",
                "ceiling": "L3",
                "rules": [
                    [r.id, r.tool, r.decision, r.path, r.reason] for r in DEFAULT_POLICY.rules
                ],
            },
            "tool": {"name": "publish", "level": "L2", "side_effect": "production_change"},
        },
    )
    assert reply["ok"] and not (tmp_path / "site" / ".env").exists()
    assert (tmp_path / "site" / "docs" / "a.md").exists()


def test_reserved_argument_names_are_refused(workspace):
    record = call(workspace, "dangerous", OPEN, command="ls", _sandbox={"hide": []})
    assert record.status == "refused" and "reserved" in record.error


def test_a_custom_tool_on_the_shell_cannot_choose_its_own_sandbox(workspace):
    from django.conf import settings

    ToolDefinition.objects.create(
        name="sh",
        description="Another shell.",
        implementation="dangerous",
        permission_level="L3",
        side_effect="filesystem_write",
        input_schema={"type": "object"},
    )
    record = call(workspace, "sh", OPEN, command=f"ls {settings.VAR_DIR} | wc -l")
    assert record.output["content"].strip() == "0"  # hidden, as for the real shell


def test_publish_stays_a_production_change_whatever_the_registry_says(workspace):
    ToolDefinition.objects.filter(name="publish").update(side_effect="none")
    record = call(workspace, "publish", OPEN)
    assert (record.decision, record.human_only) == ("ask", True)


def test_committing_an_agents_file_drops_the_cached_instructions(workspace, agent):
    (workspace.root_path / "AGENTS.md").write_text("old rules")
    assert "old rules" in instructions_load(agent=agent, root=workspace.root).units[0].text
    call(workspace, "createDraft", OPEN, path="AGENTS.md", content="new rules")
    call(workspace, "commitDraft", OPEN, path="AGENTS.md")
    assert "new rules" in instructions_load(agent=agent, root=workspace.root).units[0].text


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"type": "banana"}}},
        {"type": "object", "properties": {"x": {"type": "string", "pattern": "("}}},
    ],
)
def test_a_broken_tool_schema_refuses_the_call_instead_of_raising(workspace, schema):
    ToolDefinition.objects.create(
        name="broken",
        description="Broken schema.",
        permission_level="L1",
        side_effect="none",
        input_schema=schema,
    )
    record = call(workspace, "broken", OPEN, x="y")
    assert record.status == "refused" and "input schema is broken" in record.error


def test_a_path_that_changed_since_the_decision_is_not_touched(workspace, tmp_path):
    (workspace.root_path / "a.md").write_text("a")
    reply = run_isolated(
        impl="readSource",
        root=str(workspace.root),
        drafts=str(tmp_path),
        args={"path": "a.md"},
        timeout=10,
        context={"decided": {"path": "b.md"}},
    )
    assert reply["ok"] is False and "not to b.md as when it was decided" in reply["error"]


def test_a_write_never_follows_a_link_put_in_its_place(workspace, tmp_path):
    """The tool resolved trap.md; a link to another file of the workspace took its place
    before the worker applied the write: nothing is written, the other file is intact."""
    from runs.tools.effects import EffectRefused, effects_apply

    (workspace.root_path / "victim.md").write_text("intact")
    os.symlink(workspace.root_path / "victim.md", workspace.root_path / "trap.md")
    write = {"op": "write", "area": "workspace", "path": "trap.md", "data": "b3ZlcndyaXR0ZW4="}
    with pytest.raises(EffectRefused, match=r"now leads to victim\.md"):
        effects_apply([write], root=workspace.root_path, drafts=tmp_path)
    assert (workspace.root_path / "victim.md").read_text() == "intact"


def test_every_large_field_is_truncated_not_only_the_content():
    from runs.tools.record import MAX_RESULT_CHARS, _truncate

    shown, full = _truncate(
        {
            "ok": False,
            "stderr": "E" * 900_000,
            "problems": [{"message": "m" * 100} for _ in range(5000)],
        }
    )
    import json

    assert len(json.dumps(shown)) <= MAX_RESULT_CHARS
    assert isinstance(shown["problems"], list) and full is not None


def test_whether_a_result_is_cut_does_not_depend_on_how_long_the_tool_took():
    """The timing is the harness's, never shown to the model: a result right at the limit
    was cut when the call took 105 ms and kept whole at 95 ms (found by the eval set)."""
    import json

    from runs.tools.record import MAX_RESULT_CHARS, _truncate

    body = {"ok": True, "path": "docs/a.md", "content": ""}
    body["content"] = "x" * (MAX_RESULT_CHARS - len(json.dumps(body)))
    assert len(json.dumps(body)) == MAX_RESULT_CHARS
    for elapsed in (5, 95, 105, 123456789):
        shown, full = _truncate({**body, "elapsed_ms": elapsed})
        assert full is None and shown == {**body, "elapsed_ms": elapsed}
    shown, full = _truncate({**body, "content": body["content"] + "x", "elapsed_ms": 5})
    assert full is not None and shown["elapsed_ms"] == 5 and "elapsed_ms" not in full


def test_every_tool_s_record_says_how_long_it_took_and_the_model_never_hears_it(secrets):
    """A child's tool and the console's own half (searchDocs) alike: the harness's
    measure of the call is kept with its record, and left out of what the model reads."""
    from runs.tools.record import tool_output

    for tool, arguments in (
        ("searchDocs", {"query": "api key"}),
        ("readSource", {"path": "docs/a.md"}),
    ):
        record = call(secrets, tool, OPEN, **arguments)
        record.refresh_from_db()
        assert record.status == "ok", record.output
        assert isinstance(record.output["elapsed_ms"], int) and record.output["elapsed_ms"] >= 0
        assert "elapsed_ms" not in str(tool_output(record))


def test_a_nul_in_a_tool_output_is_stored_without_failing(workspace):
    (workspace.root_path / "nul.md").write_bytes(b"before\x00after")
    record = call(workspace, "readSource", OPEN, path="nul.md")
    record.refresh_from_db()
    assert record.status == "ok" and "\ufffd" in record.output["content"]
