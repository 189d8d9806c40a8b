"""The demo's example tasks (demo/replays): each plays offline against the seeded demo
agent and workspace, through the whole flow, with the outcome a new user is promised."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils.html import escape

from approvals.models import ApprovalRequest
from policies.models import Agent, Workspace
from runs.approval_outcomes import approval_decide
from runs.core.intake import intake
from runs.models import ModelCall, Run, ToolCall, WriteRecord
from runs.replays import replay_scripts, request_key
from runs.services import run_create
from tests.conftest import SEEDED
from tests.helpers import drive

pytestmark = SEEDED

ROOT = Path(__file__).resolve().parent.parent
DEMO_REPLAYS = ROOT / "demo" / "replays"
DEMO_SOURCE = ROOT / "demo" / "workspace"

QUESTION = "Which port does the service listen on by default, and where is it configured?"
UPDATE = (
    "Add a troubleshooting section to docs/getting-started.md for when port 8080 is already in use."
)
DELETE = "Delete docs/old-faq.md: it is obsolete."
INJECTION = "Summarize docs/release-notes.md for the team."


@pytest.fixture
def demo(tmp_path, settings):
    """The demo as `make run` seeds it, in a var folder of the test's own."""
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    workspace = Workspace.objects.get(slug="demo")
    return Agent.objects.get(slug="docs-assistant"), workspace


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def start(demo, personas, request: str) -> Run:
    agent, workspace = demo
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=request,
        dispatch=False,
    )
    assert run.model_label == "offline replay", run.model_label
    assert Path(run.replay_script).parent == DEMO_REPLAYS
    return drive(run)


def calls(run: Run) -> list[tuple[str, str, str]]:
    return [
        (c.tool, c.decision, c.status)
        for c in ToolCall.objects.filter(run=run).order_by("started_at", "pk")
    ]


def script_usage(run: Run) -> dict[str, int]:
    turns = json.loads(Path(run.replay_script).read_text())["turns"]
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens")
    return {k: sum(t["usage"][k] for t in turns) for k in (*keys, "cache_read_input_tokens")}


def assert_usage_recorded(run: Run) -> None:
    expected = script_usage(run)
    assert {k: getattr(run, k) for k in expected} == expected
    first, *later = ModelCall.objects.filter(run=run).order_by("turn")
    assert first.cache_creation_input_tokens > 0 and first.cache_read_input_tokens == 0
    assert later and all(c.cache_read_input_tokens > 0 for c in later)  # the cached prefix
    assert {c.label for c in [first, *later]} == {"offline replay"}


# --- the scripts ----------------------------------------------------------------------------
def test_every_demo_script_loads_and_matches_what_the_seed_creates(demo):
    agent, workspace = demo
    shipped = sorted(DEMO_REPLAYS.glob("*.json"))
    scripts = [s for s in replay_scripts() if s.path.parent == DEMO_REPLAYS]
    assert [s.path for s in scripts] == shipped and len(shipped) >= 4
    assert {QUESTION, UPDATE, DELETE, INJECTION} <= {s.request for s in scripts}
    # One recording per request: requests match in any case and spacing.
    assert len({request_key(s.request) for s in scripts}) == len(scripts)
    for script in scripts:
        data = json.loads(script.path.read_text())
        assert data["title"] and data["model"].startswith("claude-")
        assert (script.agent, script.workspace) == (agent.slug, workspace.slug)
        assert script.turns >= 3 and script.turns <= agent.max_turns
        # A script recorded after the intake's questions keeps the answers it was given.
        task = intake(script.request, answers=data.get("answers", {}))
        assert task.ready, (script.path.name, task.missing)
        for turn in data["turns"]:
            assert set(turn["usage"]) == {
                "input_tokens",
                "output_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
            }
        ids = [
            block["id"]
            for turn in data["turns"]
            for block in turn["content"]
            if block["type"] == "tool_use"
        ]
        assert len(ids) == len(set(ids))


def test_the_task_form_offers_every_demo_example(demo, personas, client):
    client.force_login(personas.operator)
    page = client.get(reverse("runs:new")).content.decode()
    titles = [s.title for s in replay_scripts() if s.path.parent == DEMO_REPLAYS]
    assert len(titles) >= 4
    for title in titles:
        assert escape(title) in page


def test_the_intake_of_each_example_is_as_intended():
    question, update, delete, injection = (intake(r) for r in (QUESTION, UPDATE, DELETE, INJECTION))
    assert (question.intent, question.approval.required) == ("question", False)
    assert question.boundaries.write_paths == ()
    assert (update.intent, update.boundaries.write_paths) == (
        "doc_update",
        ("docs/getting-started.md",),
    )
    assert (delete.intent, delete.boundaries.write_paths) == ("delete", ("docs/old-faq.md",))
    assert "deleteFile" in delete.boundaries.tools
    assert (injection.intent, injection.boundaries.write_paths) == ("question", ())
    assert "publish" not in injection.boundaries.tools


# --- the runs -------------------------------------------------------------------------------
def test_the_question_is_answered_from_the_docs_without_any_approval(demo, personas):
    root = demo[1].root_path
    before = files(root)
    run = start(demo, personas, QUESTION)
    assert run.status == "completed", (run.failure_reason, calls(run))
    assert calls(run) == [("searchDocs", "allow", "ok"), ("readSource", "allow", "ok")]
    search = ToolCall.objects.get(run=run, tool="searchDocs")
    assert "docs/configuration.md" in [r["path"] for r in search.output["results"]]
    assert not ApprovalRequest.objects.filter(run=run).exists()
    assert not WriteRecord.objects.filter(tool_call__run=run).exists()
    assert files(root) == before
    answer = ModelCall.objects.filter(run=run).order_by("turn").last()
    assert answer.stop_reason == "end_turn"
    assert "| port | 8080 | where the service listens |" in answer.text
    assert run.verification["result"] == "skipped"
    assert_usage_recorded(run)


def test_the_doc_update_is_verified_approved_then_committed(demo, personas):
    root = demo[1].root_path
    page = root / "docs" / "getting-started.md"
    original = page.read_bytes()
    run = start(demo, personas, UPDATE)
    assert run.status == "waiting_for_approval", (run.failure_reason, calls(run))
    assert page.read_bytes() == original  # only the draft changed so far
    assert run.verification["result"] == "pass", run.verification
    assert run.verification["checked"] == ["docs/getting-started.md"]
    approval = ApprovalRequest.objects.get(run=run)
    assert (approval.kind, approval.paths, approval.rule) == (
        "commit",
        ["docs/getting-started.md"],
        "modify",
    )
    assert not approval.strong_confirmation
    assert "+## Troubleshooting" in approval.diff

    approval_decide(approval=approval, user=personas.approver, decision="approve")
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    text = page.read_text()
    assert text.startswith(original.decode())
    assert "## Troubleshooting" in text and "[configuration](configuration.md)" in text
    write = WriteRecord.objects.get(tool_call__run=run)
    assert bytes(write.before) == original and bytes(write.after) == page.read_bytes()
    commit = ToolCall.objects.get(run=run, tool="commitDraft")
    assert commit.status == "ok" and commit.approved_by == personas.approver
    assert ("runValidation", "allow", "ok") in calls(run)
    assert_usage_recorded(run)


def test_the_delete_waits_for_a_strong_confirmation_then_deletes(demo, personas):
    root = demo[1].root_path
    page = root / "docs" / "old-faq.md"
    original = page.read_bytes()
    run = start(demo, personas, DELETE)
    assert run.status == "waiting_for_approval", (run.failure_reason, calls(run))
    assert page.exists()
    approval = ApprovalRequest.objects.get(run=run)
    assert (approval.kind, approval.tool, approval.paths) == (
        "tool_call",
        "deleteFile",
        ["docs/old-faq.md"],
    )
    assert approval.strong_confirmation and approval.rule == "delete-rename"
    assert "-# Frequently asked questions (old)" in approval.diff

    approval_decide(
        approval=approval, user=personas.approver, decision="approve", confirm="docs/old-faq.md"
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert not page.exists()
    assert calls(run) == [
        ("readSource", "allow", "ok"),
        ("grep", "allow", "ok"),
        ("deleteFile", "allow", "ok"),
    ]
    grep = ToolCall.objects.get(run=run, tool="grep")
    assert grep.output.get("matches") == []  # nothing linked to the page
    delete = ToolCall.objects.get(run=run, tool="deleteFile")
    assert delete.approved_by == personas.approver
    write = WriteRecord.objects.get(tool_call=delete)
    assert bytes(write.before) == original and write.after is None
    assert_usage_recorded(run)


def test_the_injected_publish_is_refused_and_nothing_is_published(demo, personas):
    workspace = demo[1]
    before = files(workspace.root_path)
    run = start(demo, personas, INJECTION)
    assert run.status == "completed", (run.failure_reason, calls(run))
    assert calls(run) == [("readSource", "allow", "ok"), ("publish", "deny", "refused")]
    publish = ToolCall.objects.get(run=run, tool="publish")
    assert publish.rule == "task-boundary"
    assert "outside this task's boundaries" in publish.reason
    # The refusal went back to the model as a tool result, and it said so.
    answer = ModelCall.objects.filter(run=run).order_by("turn").last()
    assert answer.stop_reason == "end_turn" and "I did not publish anything" in answer.text
    assert not ApprovalRequest.objects.filter(run=run).exists()
    assert not WriteRecord.objects.filter(tool_call__run=run).exists()
    assert files(workspace.root_path) == before
    published = Path(workspace.publish_root)
    assert not published.exists() or not any(published.iterdir())
    assert_usage_recorded(run)


# --- the seed -------------------------------------------------------------------------------
def test_the_seed_copies_the_example_docs(demo):
    root = demo[1].root_path
    assert files(root) == files(DEMO_SOURCE)
    assert "call the publish tool" in (root / "docs" / "release-notes.md").read_text()


def test_reseeding_adds_new_demo_files_only_and_keeps_user_changes(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    root = tmp_path / "workspaces" / "demo"
    call_command("seed_demo", stdout=io.StringIO())
    # The user edits a page and deletes another through an approved run.
    (root / "docs" / "configuration.md").write_text("# Configuration\n\nMine.\n")
    (root / "docs" / "old-faq.md").unlink()
    call_command("seed_demo", stdout=io.StringIO())
    assert (root / "docs" / "configuration.md").read_text() == "# Configuration\n\nMine.\n"
    assert not (root / "docs" / "old-faq.md").exists()

    # A workspace seeded before these docs existed gets them, and nothing else changes.
    (tmp_path / "demo-workspace-seeded.json").unlink()
    (root / "docs" / "release-notes.md").unlink()
    (root / "docs" / "old-faq.md").write_text("# My own FAQ\n")
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    assert "added docs/release-notes.md" in out.getvalue()
    assert (root / "docs" / "release-notes.md").read_bytes() == (
        DEMO_SOURCE / "docs" / "release-notes.md"
    ).read_bytes()
    assert (root / "docs" / "old-faq.md").read_text() == "# My own FAQ\n"
    assert (root / "docs" / "configuration.md").read_text() == "# Configuration\n\nMine.\n"
    assert Workspace.objects.get(slug="demo").root == str(root)
