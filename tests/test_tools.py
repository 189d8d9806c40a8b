"""Tools run for real (SPEC T3–T8, R8): isolation and timeouts, truncation, retries, drafts,
patches, write records and rollback, bad input, and ``manage.py call_tool``."""

from __future__ import annotations

import io
import json
import subprocess
import time
import uuid

import pytest
from django.core.management import CommandError, call_command

from policies.core.default_policy import DEFAULT_POLICY
from policies.core.permissions import Policy, Rule
from policies.models import ToolDefinition
from runs.models import Artifact, ToolCall, WriteRecord
from runs.tools.call import tool_call_run
from runs.tools.isolation import run_isolated
from runs.tools.record import MAX_RESULT_CHARS
from runs.tools.rollback import RollbackRefused, tool_call_rollback

pytestmark = pytest.mark.django_db
OPEN = Policy("open", "L3", (Rule("all", "*", "allow"),))


def call(workspace, tool, policy=OPEN, **arguments):
    return tool_call_run(workspace=workspace, tool=tool, arguments=arguments, policy=policy)


def alive(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    return out.stdout.split()


@pytest.fixture
def custom_tool(db):
    def make(name, implementation, **fields):
        return ToolDefinition.objects.create(
            name=name,
            description=f"Test tool {name}.",
            implementation=implementation,
            input_schema={"type": "object"},
            permission_level="L1",
            side_effect="none",
            **fields,
        )

    return make


# --- timeouts (T6) ------------------------------------------------------------------------


def test_an_infinite_loop_is_stopped_at_its_timeout(workspace, custom_tool):
    custom_tool("spin", "tests.runaway_tools:spin", timeout_sec=1)
    started = time.monotonic()
    record = call(workspace, "spin")
    assert time.monotonic() - started < 30  # it never ends by itself: it was stopped
    assert (record.status, record.error) == (
        "timeout",
        "Timed out after 1 s; the tool was stopped.",
    )


def test_a_tool_and_its_children_that_ignore_sigterm_leave_nothing_behind(workspace, tmp_path):
    marker = str(1000 + uuid.uuid4().int % 8000)
    started = time.monotonic()
    reply = run_isolated(
        impl="tests.runaway_tools:ignore_term",
        root=str(workspace.root),
        drafts=str(tmp_path),
        args={"marker": marker},
        timeout=1.0,
    )
    assert time.monotonic() - started < 30  # SIGTERM alone would never have ended it
    assert reply["timed_out"]
    time.sleep(0.2)
    assert alive(marker) == []


def test_a_finished_tool_leaves_no_background_process(workspace, tmp_path):
    marker = str(1000 + uuid.uuid4().int % 8000)
    reply = run_isolated(
        impl="tests.runaway_tools:leave_child",
        root=str(workspace.root),
        drafts=str(tmp_path),
        args={"marker": marker},
        timeout=5.0,
    )
    assert reply["ok"]
    time.sleep(0.2)
    assert alive(marker) == []


def test_no_secret_reaches_a_tool(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    reply = run_isolated(
        impl="tests.runaway_tools:environment",
        root=str(workspace.root),
        drafts=str(tmp_path),
        args={},
        timeout=5.0,
    )
    assert not {"ANTHROPIC_API_KEY", "SECRET_KEY", "DATABASE_URL", "REDIS_URL"} & set(reply["keys"])


# --- retries (T8) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retryable", "retry", "succeed_on", "status", "attempts"),
    [
        (True, 2, 3, "ok", 3),
        (True, 1, 3, "error", 2),
        (False, 3, 2, "error", 1),
        (True, 0, 2, "error", 1),
    ],
)
def test_only_retryable_failures_are_retried(
    workspace, custom_tool, retryable, retry, succeed_on, status, attempts
):
    custom_tool("flaky", "tests.runaway_tools:flaky", retry=retry)
    record = call(workspace, "flaky", retryable=retryable, succeed_on=succeed_on)
    assert (record.status, record.attempts) == (status, attempts)


# --- truncation (T7) ------------------------------------------------------------------------


def test_a_large_result_is_truncated_and_kept_whole_as_an_artifact(workspace):
    big = "".join(f"line {i}: some documentation text\n" for i in range(5000))
    (workspace.root_path / "big.md").write_text(big)
    record = call(workspace, "readSource", path="big.md")
    assert record.status == "ok"
    assert len(json.dumps(record.output)) < MAX_RESULT_CHARS + 500
    artifact = Artifact.objects.get(tool_call=record)
    assert json.loads(artifact.content)["content"] == big
    assert record.output["artifact_id"] == str(artifact.pk)
    assert f"the full output is artifact {artifact.pk}" in record.output["content"]


# --- drafts and patches (T5, T3) ------------------------------------------------------------


def test_drafts_never_touch_the_formal_file(workspace):
    (workspace.root_path / "a.md").write_text("original\n")
    record = call(workspace, "createDraft", path="a.md", content="changed\n")
    assert record.status == "ok" and "+changed" in record.output["diff"]
    assert (workspace.root_path / "a.md").read_text() == "original\n"
    assert (workspace.drafts_path / "adhoc" / "a.md").read_text() == "changed\n"
    assert not WriteRecord.objects.exists()


def test_a_unified_diff_and_a_search_replace_patch_a_draft(workspace):
    (workspace.root_path / "a.md").write_text("one\ntwo\nthree\n")
    patch = "--- a/a.md\n+++ b/a.md\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
    assert call(workspace, "patchDraft", path="a.md", patch=patch).status == "ok"
    assert call(workspace, "patchDraft", path="a.md", search="three", replace="3").status == "ok"
    assert (workspace.drafts_path / "adhoc" / "a.md").read_text() == "one\nTWO\n3\n"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"patch": "@@ -1,2 +1,2 @@\n one\n-nope\n+x\n"}, "does not apply to a.md: line 2"),
        ({"patch": "just text"}, "no hunk"),
        ({"search": "absent", "replace": "x"}, "does not occur"),
        ({"search": "o", "replace": "x"}, "occurs 2 times"),
        ({}, "Give either patch"),
    ],
)
def test_a_patch_that_does_not_apply_is_refused_clearly(workspace, arguments, message):
    (workspace.root_path / "a.md").write_text("one\ntwo\n")
    record = call(workspace, "patchDraft", path="a.md", **arguments)
    assert record.status == "error" and message in record.error
    assert not (workspace.drafts_path / "adhoc" / "a.md").exists()


# --- write records and rollback (R8) --------------------------------------------------------


def test_commit_records_the_write_and_rollback_restores_the_exact_bytes(workspace):
    original = "caf\u00e9 \r\n no final newline".encode()
    (workspace.root_path / "a.md").write_bytes(original)
    call(workspace, "createDraft", path="a.md", content="new text\n")
    record = call(workspace, "commitDraft", path="a.md")
    write = record.writes.get()
    assert (bytes(write.before), bytes(write.after)) == (original, b"new text\n")
    assert "+new text" in write.diff and write.rollback["action"] == "restore_before"
    assert tool_call_rollback(tool_call=record) == ["a.md"]
    assert (workspace.root_path / "a.md").read_bytes() == original


def test_rolling_back_a_created_file_removes_it(workspace):
    call(workspace, "createDraft", path="docs/new.md", content="x")
    record = call(workspace, "commitDraft", path="docs/new.md")
    assert record.writes.get().before is None
    tool_call_rollback(tool_call=record)
    assert not (workspace.root_path / "docs" / "new.md").exists()


def test_delete_and_rename_roll_back_to_the_exact_bytes(workspace):
    binary = bytes(range(256)) * 3
    (workspace.root_path / "blob.bin").write_bytes(binary)
    (workspace.root_path / "old.md").write_bytes(b"keep me\n")
    deleted = call(workspace, "deleteFile", path="blob.bin")
    renamed = call(workspace, "renameFile", source="old.md", target="sub/new.md")
    assert not (workspace.root_path / "blob.bin").exists()
    assert (workspace.root_path / "sub" / "new.md").read_bytes() == b"keep me\n"
    tool_call_rollback(tool_call=renamed)
    tool_call_rollback(tool_call=deleted)
    assert (workspace.root_path / "blob.bin").read_bytes() == binary
    assert (workspace.root_path / "old.md").read_bytes() == b"keep me\n"
    assert not (workspace.root_path / "sub" / "new.md").exists()


def test_a_rollback_that_would_destroy_a_later_change_is_refused(workspace):
    (workspace.root_path / "a.md").write_text("v1")
    call(workspace, "createDraft", path="a.md", content="v2")
    record = call(workspace, "commitDraft", path="a.md")
    (workspace.root_path / "a.md").write_text("v3, edited by a person")
    with pytest.raises(RollbackRefused, match="changed since"):
        tool_call_rollback(tool_call=record)
    assert (workspace.root_path / "a.md").read_text() == "v3, edited by a person"
    with pytest.raises(RollbackRefused):
        tool_call_rollback(tool_call=call(workspace, "readSource", path="a.md"))


# --- bad input and permissions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("readSource", {}, "'path' is a required property"),
        ("readSource", {"path": 7}, "argument 'path': 7 is not of type 'string'"),
        ("readSource", {"path": "a.md", "mode": "w"}, "Additional properties are not allowed"),
        ("readSource", {"path": "../../etc/passwd"}, "Paths with .. are refused"),
        ("renameFile", {"source": "a.md", "target": "/tmp/x"}, "Absolute and home paths"),
        ("rm", {"path": "a.md"}, "no enabled tool named 'rm'"),
        ("wipeAll", {}, "no enabled tool named 'wipeAll'"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(workspace, tool, arguments, message):
    record = tool_call_run(workspace=workspace, tool=tool, arguments=arguments, policy=OPEN)
    assert record.status == "refused" and message in record.error
    assert record.attempts == 0 and ToolCall.objects.filter(pk=record.pk).exists()


def test_a_tool_error_is_an_error_the_model_can_read(workspace):
    record = call(workspace, "readSource", path="missing.md")
    assert (record.status, record.error) == ("error", "missing.md is not a file in the workspace.")


def test_under_the_default_policy_only_allowed_calls_run(workspace):
    (workspace.root_path / "a.md").write_text("v1")
    read = call(workspace, "readSource", DEFAULT_POLICY, path="a.md")
    delete = call(workspace, "deleteFile", DEFAULT_POLICY, path="a.md")
    assert (read.status, read.decision, read.rule) == ("ok", "allow", "read")
    assert (delete.status, delete.decision) == ("refused", "ask_strong")
    assert (workspace.root_path / "a.md").exists()
    assert delete.policy_name == "default" and delete.reason


def test_a_description_over_250_characters_is_refused_on_save():
    tool = ToolDefinition(
        name="wordy",
        description="x" * 251,
        input_schema={"type": "object"},
        permission_level="L1",
        side_effect="none",
    )
    with pytest.raises(ValueError, match="at most 250"):
        tool.save()
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="At most 250 characters"):
        tool.full_clean()


# --- manage.py call_tool ----------------------------------------------------------------------


def run_command(*args: str) -> dict:
    out = io.StringIO()
    try:
        call_command("call_tool", *args, "--json", stdout=out)
        error = None
    except CommandError as failure:
        error = str(failure)
    return {**json.loads(out.getvalue()), "_error": error}


def test_call_tool_prints_the_t4_shape(workspace):
    (workspace.root_path / "a.md").write_text("hello")
    output = run_command(
        "--workspace", "test", "--tool", "readSource", "--args", '{"path": "a.md"}'
    )
    assert {"ok", "artifact_id", "summary", "path", "diff", "warnings"} <= set(output)
    assert (output["ok"], output["content"], output["_error"]) == (True, "hello", None)


def test_call_tool_refuses_what_needs_a_person_and_exits_non_zero(workspace):
    (workspace.root_path / "a.md").write_text("hello")
    output = run_command(
        "--workspace", "test", "--tool", "deleteFile", "--args", '{"path": "a.md"}'
    )
    assert output["ok"] is False and output["decision"] == "ask_strong"
    assert output["_error"].startswith("ask_strong:")
    assert (workspace.root_path / "a.md").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workspace", "nowhere", "--tool", "readSource"], "No workspace"),
        (["--workspace", "test", "--tool", "readSource", "--args", "{oops"], "not valid JSON"),
        (["--workspace", "test", "--tool", "readSource", "--policy", "nope"], "No policy"),
    ],
)
def test_call_tool_bad_input_is_a_clear_error(workspace, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("call_tool", *args, stdout=io.StringIO())


def test_an_admin_rolls_back_a_call_from_the_admin(client, personas, workspace):
    from django.urls import reverse

    (workspace.root_path / "a.md").write_text("v1")
    call(workspace, "createDraft", path="a.md", content="v2")
    record = call(workspace, "commitDraft", path="a.md")
    client.force_login(personas.admin)
    page = client.get(reverse("admin:runs_toolcall_change", args=[record.pk])).content.decode()
    assert "+v2" in page  # the write's diff is shown
    client.post(
        reverse("admin:runs_toolcall_changelist"),
        {"action": "roll_back", "_selected_action": [str(record.pk)]},
    )
    assert (workspace.root_path / "a.md").read_text() == "v1"


def test_the_tool_registry_holds_every_built_in_tool_and_each_one_runs():
    enabled = set(ToolDefinition.objects.filter(enabled=True).values_list("name", flat=True))
    from runs.tools.builtin import IMPLEMENTATIONS
    from runs.tools.execute import IN_PROCESS

    assert enabled == set(IMPLEMENTATIONS) | set(IN_PROCESS)
    assert not ToolDefinition.objects.filter(source="builtin", enabled=False).exists()


def test_the_model_gets_definitions_only_of_tools_the_policy_could_allow():
    from runs.tools.registry import tool_definitions_for

    names = [d["name"] for d in tool_definitions_for(DEFAULT_POLICY)]
    assert names == sorted(
        [
            "commitDraft",
            "createDraft",
            "dangerous",
            "deleteFile",
            "glob",
            "grep",
            "patchDraft",
            "publish",
            "readSource",
            "renameFile",
            "requestApproval",
            "runValidation",
            "searchDocs",
        ]
    )
    readonly = Policy(
        "readonly",
        "L1",
        (Rule("read", "{readSource,grep}", "allow"), Rule("no-grep", "grep", "deny")),
    )
    definitions = tool_definitions_for(readonly)
    assert [d["name"] for d in definitions] == ["readSource"]  # L1, named, not denied outright
    assert set(definitions[0]) == {"name", "description", "input_schema"}


def test_publish_always_needs_a_person_even_under_a_policy_that_allows_everything(workspace):
    record = call(workspace, "publish")
    assert (record.status, record.decision, record.human_only) == ("refused", "ask", True)
    assert "a production change always needs a person" in record.reason


def test_publish_copies_the_workspace_when_a_person_let_it_run(workspace, tmp_path):
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "a.md").write_text("published")
    (workspace.root_path / ".git").mkdir()
    (workspace.root_path / ".git" / "config").write_text("x")
    target = tmp_path / "site"
    reply = run_isolated(
        impl="publish",
        root=str(workspace.root),
        drafts=str(tmp_path),
        args={},
        context={"publish_root": str(target)},
        timeout=10,
    )
    assert reply["ok"] and (target / "docs" / "a.md").read_text() == "published"
    assert not (target / ".git").exists()
    nowhere = run_isolated(
        impl="publish",
        root=str(workspace.root),
        drafts=str(tmp_path),
        args={},
        context={"publish_root": ""},
        timeout=10,
    )
    assert nowhere["error"] == "This workspace has no publish folder; an admin sets one first."
