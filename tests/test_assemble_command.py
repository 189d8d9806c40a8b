"""``manage.py assemble_prompt`` (SPEC C8): the report, and clear errors for bad input."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from policies.models import BusinessRule
from policies.services import instruction_update
from tests.conftest import EVERYWHERE
from tests.stack import ROOT

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("assemble_prompt", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def configured(personas, agent, workspace):
    root = workspace.root_path
    (root / "docs").mkdir()
    (root / "docs" / "AGENTS.md").write_text("Docs rules: short pages.")
    (root / "README.md").write_text("The project is a small service.")
    instruction_update(agent=agent, text="Console instructions win.", author=personas.admin)
    BusinessRule.objects.create(agent=agent, text="Oldest rule.")
    BusinessRule.objects.create(agent=agent, text="Newest rule.")
    return agent, workspace


def test_json_has_each_layer_and_the_prompt(configured):
    agent, workspace = configured
    report = json.loads(
        run(
            "--agent",
            agent.slug,
            "--workspace",
            workspace.name,
            "--task",
            "Fix the link in docs/guide.md",
            "--json",
        )
    )
    layers = report["layers"]
    assert [layer["position"] for layer in layers] == list(range(1, 11))
    for layer in layers:
        assert set(layer) >= {
            "name",
            "position",
            "strategy",
            "budget",
            "tokens",
            "estimated",
            "truncated",
            "kept",
            "dropped",
        }
        assert layer["tokens"] == math.ceil(len(layer["text"].encode()) / 4)
        assert layer["estimated"] is True
    assert report["prompt"] == "\n\n".join(layer["text"] for layer in layers if layer["text"])
    by_name = {layer["name"]: layer for layer in layers}
    assert [k["source_id"] for k in by_name["instruction_files"]["kept"]] == [
        "file:AGENTS.md",
        "file:docs/AGENTS.md",
        "db:instructions",
    ]
    assert by_name["task_state"]["text"] == "Fix the link in docs/guide.md"
    assert report["paths"] == ["docs/guide.md"]  # read from the task as intake reads it
    assert "The project is a small service." in by_name["project_context"]["text"]


def test_without_a_path_only_the_root_s_file_and_the_database_s_are_sent(configured):
    agent, workspace = configured
    text = run("--agent", agent.slug, "--workspace", workspace.slug, "--task", "Fix the link")
    assert "kept    file:AGENTS.md" in text and "kept    db:instructions" in text
    assert "dropped file:docs/AGENTS.md (0): not on the task's path (the task names no file)" in (
        text
    )
    assert "Docs rules" not in text.partition("--- prompt:")[2]


def test_a_budget_override_drops_units_and_says_why(configured):
    agent, workspace = configured
    report = json.loads(
        run(
            "--agent",
            agent.slug,
            "--workspace",
            workspace.slug,
            "--budget",
            "business_rules=4",
            "--budget",
            "identity=0",
            "--json",
        )
    )
    rules = next(layer for layer in report["layers"] if layer["name"] == "business_rules")
    assert [k["source_id"] for k in rules["kept"]] == [f"rule:{BusinessRule.objects.last().pk}"]
    assert rules["dropped"][0]["reason"].startswith("over budget")
    identity = report["layers"][0]
    assert identity["tokens"] == 0 and identity["dropped"][0]["reason"] == "the layer's budget is 0"


def test_the_text_report_lists_layers_and_the_prompt(configured):
    agent, workspace = configured
    text = run(
        "--agent", agent.slug, "--workspace-path", str(workspace.root_path), "--path", "docs/a.md"
    )
    assert " 1. identity [keep_or_drop] " in text and "(estimated)" in text
    assert "scoped to the task's paths: docs/a.md" in text
    assert "kept    file:docs/AGENTS.md" in text
    assert "--- prompt:" in text and "Console instructions win." in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "nobody", "--workspace", "test"], "No agent with the slug 'nobody'"),
        (["--agent", "tester", "--workspace", "nowhere"], "No workspace with the slug or name"),
        (["--agent", "tester", "--workspace-path", "/no/such/dir"], "does not exist"),
        (["--agent", "tester", "--workspace", "test", "--budget", "identity"], "LAYER=TOKENS"),
        (["--agent", "tester", "--workspace", "test", "--budget", "identity=-3"], "whole number"),
        (["--agent", "tester", "--workspace", "test", "--budget", "soul=3"], "Unknown layer soul"),
        (
            ["--agent", "tester", "--workspace", "test", "--budget", "identity=99999999"],
            "between 0 and 1,000,000",
        ),
    ],
)
def test_bad_input_is_a_clear_error(agent, workspace, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)


@EVERYWHERE  # committed data, and no write lock held while another process reads
def test_bad_input_exits_non_zero_from_the_shell(agent, workspace):
    env = {**os.environ, "HARNESS_USE_TEST_DATABASES": "true"}
    result = subprocess.run(
        [sys.executable, "manage.py", "assemble_prompt", "--agent", "nobody", "--workspace", "x"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "No agent with the slug 'nobody'" in result.stderr
    assert "Traceback" not in result.stderr
