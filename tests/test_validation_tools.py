"""runValidation and requestApproval (SPEC T3)."""

from __future__ import annotations

import pytest

from policies.core.default_policy import DEFAULT_POLICY
from runs.tools.call import tool_call_run

pytestmark = pytest.mark.django_db


def validate(workspace, path):
    return tool_call_run(
        workspace=workspace, tool="runValidation", arguments={"path": path}, policy=DEFAULT_POLICY
    )


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.json", '{"a": 1,}', "invalid JSON"),
        ("a.yaml", "key: [unclosed\n", "invalid YAML"),
        ("a.md", "# Title\n\n```python\nprint(1)\n", "never closed"),
        ("a.md", "# T\n\nSee [setup](docs/setup.md).\n", "broken link: docs/setup.md"),
        ("a.md", "# T\n\n[x](../../etc/passwd)\n", "leads outside the workspace"),
    ],
)
def test_each_validator_finds_its_problem(workspace, name, content, message):
    (workspace.root_path / name).write_text(content)
    record = validate(workspace, name)
    assert record.status == "ok" and record.output["valid"] is False
    assert any(message in p["message"] for p in record.output["problems"])


def test_well_formed_files_and_good_links_pass(workspace):
    root = workspace.root_path
    (root / "docs").mkdir()
    (root / "docs" / "setup.md").write_text("# Setup\n")
    (root / "a.md").write_text(
        "# T\n\n[setup](docs/setup.md#install) [web](https://x.org) [top](#t)\n\n```\ncode\n```\n"
    )
    (root / "a.json").write_text('{"a": [1, 2]}')
    (root / "a.yml").write_text("a: 1\n---\nb: 2\n")
    for name in ("a.md", "a.json", "a.yml"):
        record = validate(workspace, name)
        assert (record.status, record.output["valid"]) == ("ok", True), record.output


def test_the_draft_is_validated_when_there_is_one(workspace):
    (workspace.root_path / "a.json").write_text("{}")
    tool_call_run(
        workspace=workspace,
        tool="createDraft",
        arguments={"path": "a.json", "content": "{broken"},
        policy=DEFAULT_POLICY,
    )
    record = validate(workspace, "a.json")
    assert record.output["valid"] is False and record.output["summary"].startswith("The draft")


def test_an_unknown_file_kind_is_a_clear_tool_error(workspace):
    (workspace.root_path / "a.bin").write_text("x")
    record = validate(workspace, "a.bin")
    assert record.status == "error" and "No validator knows .bin files" in record.error


def test_request_approval_records_an_ask(workspace):
    record = tool_call_run(
        workspace=workspace,
        tool="requestApproval",
        arguments={"summary": "Rewrite the install guide"},
        policy=DEFAULT_POLICY,
    )
    assert record.status == "ok" and record.output["decision"] == "ask"
    assert record.output["summary"] == "Approval requested: Rewrite the install guide"
