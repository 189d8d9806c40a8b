"""Hook bindings configured in the admin (SPEC C7): settings checked before anything is saved,
an agent's bindings loaded in order, run through the same runner, and the admin form."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from policies.hooks import HooksCompleted, HooksHalted, hook_bindings_for, hooks_run
from policies.models import Agent, HookBinding

pytestmark = pytest.mark.django_db

ANTHROPIC_KEY = "sk-ant-api03-" + "Zz9-" * 20 + "endAA"
FREEZE = {"windows": [{"name": "Christmas", "start": "2025-12-24", "end": "2025-12-27"}]}


def binding(**fields) -> HookBinding:
    row = HookBinding(**{"phase": "post_tool_use", "handler": "secret-redaction", **fields})
    row.full_clean()
    row.save()
    return row


def errors_of(**fields) -> dict:
    row = HookBinding(**{"phase": "post_tool_use", "handler": "secret-redaction", **fields})
    with pytest.raises(ValidationError) as raised:
        row.full_clean()
    return raised.value.message_dict


def test_a_bad_regex_is_a_settings_error_that_says_why():
    errors = errors_of(settings={"patterns": ["(unclosed"]})
    assert errors["settings"] == [
        "secret-redaction settings: patterns[0]: '(unclosed' is not a valid regular "
        "expression: missing ), unterminated subpattern at position 0."
    ]


def test_a_handler_bound_to_a_phase_it_does_not_serve_is_refused():
    errors = errors_of(phase="pre_tool_use")
    assert errors == {
        "phase": ["secret-redaction runs at post_tool_use only, not at pre_tool_use."]
    }


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"handler": "webhook-notifier", "settings": {"url": "file:///etc/passwd"}},
            "settings",
            "only http:// and https://",
        ),
        ({"handler": "change-freeze", "phase": "pre_tool_use"}, "settings", "Give the freeze"),
        ({"time_limit_seconds": 0.05}, "time_limit_seconds", "At least 0.1 seconds."),
        ({"time_limit_seconds": 31}, "time_limit_seconds", "At most 30 seconds"),
        ({"handler": "shell-out"}, "handler", "is not a valid choice"),
    ],
)
def test_bad_bindings_are_refused_field_by_field(fields, field, message):
    assert message in " ".join(errors_of(**fields)[field])


def test_an_agents_bindings_are_its_own_and_the_global_ones_in_order(agent):
    other = Agent.objects.create(slug="other", name="Other", identity="x")
    late = binding(order=20)
    early = binding(order=5, agent=agent)
    binding(order=1, agent=other)
    binding(order=2, enabled=False)
    freeze = binding(phase="pre_tool_use", handler="change-freeze", settings=FREEZE, order=50)
    loaded = hook_bindings_for(agent)
    assert [b.binding_id for b in loaded] == [early.pk, late.pk, freeze.pk]  # phase, order
    assert [b.binding_id for b in hook_bindings_for(None)] == [late.pk, freeze.pk]
    assert (loaded[2].name, loaded[2].phase, loaded[2].time_limit) == (
        "change-freeze",
        "pre_tool_use",
        2.0,
    )
    assert loaded[2].fail_open is False


def test_bindings_from_the_database_redact_a_tool_output(agent):
    binding(settings={"patterns": [r"EMP-\d{6}"]}, agent=agent)
    event = {"run_id": 7, "tool": "readSource", "output": {"text": f"{ANTHROPIC_KEY} EMP-000042"}}
    outcome = hooks_run(hook_bindings_for(agent), "post_tool_use", event)
    assert isinstance(outcome, HooksCompleted)
    assert outcome.event["output"] == {"text": "[REDACTED:anthropic_key] [REDACTED:custom]"}
    assert outcome.reports[0].details == {
        "redacted": 2,
        "kinds": {"anthropic_key": 1, "custom": 1},
    }
    assert event["output"]["text"].startswith(ANTHROPIC_KEY)  # the caller's event is untouched


def test_a_freeze_from_the_database_halts_a_write_inside_the_window(agent):
    binding(phase="pre_tool_use", handler="change-freeze", settings=FREEZE)
    event = {"tool": "commitDraft", "side_effect": "filesystem_write"}
    bindings = hook_bindings_for(agent)
    inside = hooks_run(
        bindings, "pre_tool_use", {**event, "now": datetime(2025, 12, 25, tzinfo=UTC)}
    )
    assert isinstance(inside, HooksHalted) and inside.handler == "change-freeze"
    assert inside.reason.startswith("Change freeze (Christmas)")
    outside = hooks_run(
        bindings, "pre_tool_use", {**event, "now": datetime(2026, 1, 5, tzinfo=UTC)}
    )
    assert isinstance(outside, HooksCompleted) and outside.ran == ("change-freeze",)


def test_a_row_saved_with_broken_settings_halts_the_chain_instead_of_vanishing(agent):
    row = HookBinding.objects.create(
        phase="post_tool_use", handler="secret-redaction", settings={"patterns": ["("]}
    )
    outcome = hooks_run(hook_bindings_for(agent), "post_tool_use", {"output": "x"})
    assert isinstance(outcome, HooksHalted)
    assert outcome.reason.startswith(
        f"secret-redaction crashed: HookSettingsError binding #{row.pk} has bad settings: "
        "patterns[0]"
    )
    row.fail_open = True
    row.save(update_fields=["fail_open"])
    outcome = hooks_run(hook_bindings_for(agent), "post_tool_use", {"output": "x"})
    assert isinstance(outcome, HooksCompleted) and outcome.skipped[0].handler == "secret-redaction"


# --- the admin -------------------------------------------------------------------------------


def form(**fields) -> dict:
    return {
        "phase": "post_tool_use",
        "handler": "secret-redaction",
        "settings": "{}",
        "order": "10",
        "agent": "",
        "enabled": "on",
        "time_limit_seconds": "2",
        **fields,
    }


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def test_the_admin_add_form_shows_a_bad_regex_and_saves_nothing(admin_client):
    response = admin_client.post(
        reverse("admin:policies_hookbinding_add"), form(settings='{"patterns": ["[a-"]}')
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "patterns[0]: &#x27;[a-&#x27; is not a valid regular expression" in page
    assert not HookBinding.objects.exists()


def test_the_admin_add_form_refuses_settings_that_are_not_json(admin_client):
    response = admin_client.post(
        reverse("admin:policies_hookbinding_add"), form(settings="{patterns: oops")
    )
    assert "Enter a valid JSON." in response.content.decode()
    assert not HookBinding.objects.exists()


def test_the_admin_saves_a_good_binding_and_lists_it(admin_client, agent):
    response = admin_client.post(
        reverse("admin:policies_hookbinding_add"),
        form(settings="", agent=str(agent.pk), fail_open="on", time_limit_seconds="0.5"),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    row = HookBinding.objects.get()
    assert (row.settings, row.agent, row.fail_open, row.time_limit_seconds) == (
        {},
        agent,
        True,
        0.5,
    )
    page = admin_client.get(reverse("admin:policies_hookbinding_changelist")).content.decode()
    assert "secret-redaction" in page and "post_tool_use" in page
    add_page = admin_client.get(reverse("admin:policies_hookbinding_add")).content.decode()
    assert "webhook-notifier" in add_page and "Example settings" in add_page


def test_only_admins_reach_hook_bindings(client, personas):
    for user in (personas.operator, personas.approver, personas.outsider):
        client.force_login(user)
        response = client.get(reverse("admin:policies_hookbinding_changelist"))
        assert response.status_code in (302, 403), user.username
