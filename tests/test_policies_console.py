"""Policies stored in the console: the seeded default, the admin's explainer, versions,
and ``manage.py check_permission`` (SPEC P3, P6)."""

from __future__ import annotations

import io
import json
import os

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from policies.core.paths import PathRefused
from policies.models import Policy, PolicyRule
from policies.permissions import permission_check, policy_for_agent, policy_load

pytestmark = pytest.mark.django_db


def check(*args: str) -> dict:
    out = io.StringIO()
    call_command("check_permission", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_the_default_policy_is_seeded_by_a_migration():
    policy = Policy.objects.get(name="default")
    assert policy.ceiling == "L3"
    assert list(policy.rules.values_list("key", flat=True))[:3] == [
        "deny-git",
        "deny-secrets",
        "read",
    ]


@pytest.mark.parametrize(
    ("tool", "extra", "decision", "human_only", "rule"),
    [
        ("readSource", ["--path", "docs/a.md"], "allow", False, "read"),
        (
            "createDraft",
            ["--args", '{"path": "docs/a.md", "content": "x"}'],
            "allow",
            False,
            "drafts",
        ),
        ("commitDraft", ["--path", "docs/a.md"], "ask", False, "modify"),
        ("deleteFile", ["--path", "docs/a.md"], "ask_strong", False, "delete-rename"),
        ("publish", [], "ask", True, "publish"),
        ("readSource", ["--path", "config/.env"], "deny", False, "deny-secrets"),
    ],
)
def test_check_permission_prints_the_decision_rule_and_reason(
    tool, extra, decision, human_only, rule
):
    report = check("--policy", "default", "--tool", tool, *extra)
    assert (report["decision"], report["human_only"], report["rule"]) == (
        decision,
        human_only,
        rule,
    )
    assert report["reason"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope", "--tool", "readSource"], "No policy named 'nope'"),
        (["--policy", "default", "--tool", "rm"], "Unknown tool 'rm'"),
        (["--policy", "default", "--tool", "readSource", "--args", "{bad"], "not valid JSON"),
        (["--policy", "default", "--tool", "readSource", "--args", "[1]"], "a JSON object"),
        (
            ["--policy", "default", "--tool", "readSource", "--path", "../etc/passwd"],
            "Paths with .. are refused",
        ),
        (
            ["--policy", "default", "--tool", "readSource", "--args", '{"path": "/etc/passwd"}'],
            "Absolute and home paths are refused",
        ),
    ],
)
def test_check_permission_refuses_bad_input_clearly(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("check_permission", *args, stdout=io.StringIO())


def test_an_agent_without_a_policy_uses_the_default(agent):
    assert policy_for_agent(agent).name == "default"


def test_a_path_is_resolved_in_the_workspace_before_matching(workspace, tmp_path):
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", workspace.root_path / "innocent.md")
    with pytest.raises(PathRefused, match="outside the workspace"):
        permission_check(
            policy=policy_load("default"),
            tool="readSource",
            path="innocent.md",
            workspace_root=workspace.root,
        )
    (workspace.root_path / ".env").write_text("KEY=1")
    os.symlink(workspace.root_path / ".env", workspace.root_path / "notes.md")
    verdict = permission_check(
        policy=policy_load("default"),
        tool="readSource",
        path="notes.md",
        workspace_root=workspace.root,
    )
    assert (verdict.decision, verdict.rule) == ("deny", "deny-secrets")  # its real target


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def test_the_explainer_shows_the_decision_and_every_rule_considered(admin_client):
    policy = Policy.objects.get(name="default")
    html = admin_client.get(
        reverse("admin:policies_policy_test", args=[policy.pk]),
        {"tool": "commitDraft", "path": "docs/a.md"},
    ).content.decode()
    assert '<h2 id="decision">ask' in html and '<strong id="decided-by">modify</strong>' in html
    assert html.count("<tr data-rule=") == policy.rules.count()


def test_the_explainer_reports_a_refused_path(admin_client):
    policy = Policy.objects.get(name="default")
    html = admin_client.get(
        reverse("admin:policies_policy_test", args=[policy.pk]),
        {"tool": "readSource", "path": "../../etc/passwd"},
    ).content.decode()
    assert "Refused before any rule: Paths with .. are refused" in html


def rule_form(policy, rows):
    data = {
        "name": policy.name,
        "description": policy.description,
        "ceiling": policy.ceiling,
        "approval_expiry_minutes": policy.approval_expiry_minutes,
        "approval_reminder_minutes": policy.approval_reminder_minutes,
        "l3_approvals_required": policy.l3_approvals_required,
        "rules-TOTAL_FORMS": len(rows),
        "rules-INITIAL_FORMS": 0,
    }
    for i, (order, key, tool, path, decision, *limits) in enumerate(rows):
        fields = {
            "order": order,
            "key": key,
            "tool": tool,
            "path": path,
            "decision": decision,
            **RULE_LIMITS_AS_POSTED,
            **(limits[0] if limits else {}),
        }
        data.update({f"rules-{i}-{name}": value for name, value in fields.items()})
    return data


# What the rule form posts for a rule with no window and no rate (its defaults).
RULE_LIMITS_AS_POSTED = {
    "window_timezone": "UTC",
    "outside_window": "deny",
    "rate_limit": 0,
    "rate_scope": "run",
    "over_rate": "deny",
}


def test_editing_a_policy_makes_a_new_version(admin_client):
    policy = Policy.objects.create(name="strict", ceiling="L1")
    response = admin_client.post(
        reverse("admin:policies_policy_change", args=[policy.pk]),
        rule_form(policy, [(10, "read", "readSource", "docs/**", "allow")]),
    )
    assert response.status_code == 302
    policy.refresh_from_db()
    assert policy.version == 2 and policy.rules.get().key == "read"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ((10, "bad", "*", "", "perhaps"), "Select a valid choice"),
        ((10, "abs", "*", "/etc/**", "deny"), "relative to the workspace"),
        ((10, "empty", " ", "", "deny"), "This field is required"),
    ],
)
def test_a_bad_rule_is_refused_and_nothing_changes(admin_client, row, message):
    policy = Policy.objects.create(name="strict", ceiling="L1")
    response = admin_client.post(
        reverse("admin:policies_policy_change", args=[policy.pk]), rule_form(policy, [row])
    )
    assert response.status_code == 200 and message in response.content.decode()
    policy.refresh_from_db()
    assert policy.version == 1 and not PolicyRule.objects.filter(policy=policy).exists()


@pytest.mark.parametrize("who", ["approver", "operator", "ops", "outsider"])
def test_only_admins_open_the_explainer(client, personas, who):
    client.force_login(getattr(personas, who))
    policy = Policy.objects.get(name="default")
    response = client.get(reverse("admin:policies_policy_test", args=[policy.pk]))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_effect_of_an_edit_is_shown_before_saving(admin_client, workspace):
    from policies.core.permissions import Policy as CorePolicy
    from policies.core.permissions import Rule as CoreRule
    from runs.tools.call import tool_call_run

    policy = Policy.objects.create(name="team", ceiling="L3")
    PolicyRule.objects.create(
        policy=policy, order=10, key="read", tool="readSource", decision="allow"
    )
    PolicyRule.objects.create(
        policy=policy, order=20, key="drafts", tool="createDraft", decision="allow"
    )
    (workspace.root_path / "a.md").write_text("x")
    saved = policy_load("team")
    reads = [
        tool_call_run(workspace=workspace, tool="readSource", arguments={"path": p}, policy=saved)
        for p in ("a.md", "missing.md")
    ]
    tool_call_run(
        workspace=workspace,
        tool="createDraft",
        arguments={"path": "a.md", "content": "y"},
        policy=saved,
    )
    tool_call_run(
        workspace=workspace, tool="readSource", arguments={"path": "../x"}, policy=saved
    )  # refused before deciding: not part of the comparison
    data = rule_form(
        policy, [(10, "read", "readSource", "", "ask"), (20, "drafts", "createDraft", "", "allow")]
    )
    data["rules-INITIAL_FORMS"] = 2  # an edit of the two saved rules
    for i, key in enumerate(["read", "drafts"]):
        data[f"rules-{i}-id"] = policy.rules.get(key=key).pk
        data[f"rules-{i}-policy"] = policy.pk
    data["_simulate"] = "1"
    html = admin_client.post(
        reverse("admin:policies_policy_change", args=[policy.pk]), data
    ).content.decode()
    assert "Nothing was saved." in html
    assert (
        "Of the last 3 recorded calls under team, this edit changes the decision of "
        "<strong>2</strong>." in html
    )
    assert all(f'data-call="{r.pk}"' in html for r in reads)
    policy.refresh_from_db()
    assert policy.version == 1 and policy.rules.get(key="read").decision == "allow"
    assert policy_load("team") == CorePolicy(
        "team",
        "L3",
        (CoreRule("read", "readSource", "allow"), CoreRule("drafts", "createDraft", "allow")),
    )


def test_a_broken_edit_is_not_simulated(admin_client):
    policy = Policy.objects.create(name="team", ceiling="L3")
    data = rule_form(policy, [(10, "bad", "*", "", "perhaps")])
    data["_simulate"] = "1"
    html = admin_client.post(
        reverse("admin:policies_policy_change", args=[policy.pk]), data
    ).content.decode()
    assert "The edit has errors" in html
