"""A policy's version moves only when what it decides moves (issue 18 point 5, B16): an edit
of wording or of the order of rules that never meet keeps the version approvals bind to,
so no pending request is invalidated for it; the edit page says which would be."""

from __future__ import annotations

import itertools

import pytest
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.models import ApprovalRequest
from policies.core.permissions import Call, Policy, Rule, RuleLimits, decide
from policies.core.policy_digest import decision_digest
from policies.core.windows import weekly
from policies.models import Policy as PolicyRow
from policies.models import PolicyChange, PolicyRule
from runs.approval_outcomes import approval_decide
from tests.conftest import EVERYWHERE
from tests.helpers import drive
from tests.test_approvals import waiting_delete


def digest(*rules: Rule, ceiling="L3", required=1) -> str:
    return decision_digest(Policy("p", ceiling, rules), approvals_required=required)


READ = Rule("read", "readSource", "allow", "docs/**", "reading docs is fine")
WRITE = Rule("write", "createDraft", "ask", "docs/**", "a person looks at drafts")
EVERYTHING = Rule("any", "*", "ask", "", "ask about anything else")
SECRETS = Rule("secrets", "*", "deny", "secrets/**", "never")
SHELL = Rule("shell", "runShell", "deny", "", "no shell")


def test_wording_and_names_do_not_change_what_a_policy_decides():
    before = digest(READ, WRITE, SECRETS)
    reworded = (
        Rule("reads", "readSource", "allow", "docs/**", "other words"),
        Rule("drafts", "createDraft", "ask", "docs/**", ""),
        Rule("no-secrets", "*", "deny", "secrets/**", "not ever"),
    )
    assert digest(*reworded) == before


def test_rules_that_never_meet_trade_places_freely():
    assert digest(READ, WRITE) == digest(WRITE, READ)  # two tools, no call matches both
    a = Rule("a", "createDraft", "allow", "docs/a.md")
    b = Rule("b", "createDraft", "ask", "docs/b.md")
    assert digest(a, b, EVERYTHING) == digest(b, a, EVERYTHING)  # two literal paths
    # Denies win wherever they stand: their order never matters.
    assert digest(SECRETS, READ, SHELL) == digest(READ, SHELL, SECRETS)


def test_rules_that_meet_and_decide_apart_keep_their_order():
    assert digest(READ, EVERYTHING) != digest(EVERYTHING, READ)  # readSource docs/x: allow/ask
    glob = Rule("md", "createDraft", "allow", "docs/*.md")
    literal = Rule("one", "createDraft", "ask", "docs/a.md")
    assert digest(glob, literal) != digest(literal, glob)  # the glob matches the literal
    # Two globs are taken to meet (a version too many, never one too few).
    other = Rule("guide", "createDraft", "ask", "docs/guide*")
    assert digest(glob, other) != digest(other, glob)


def test_rules_that_decide_alike_trade_places_even_when_they_meet():
    first = Rule("a", "*", "ask", "")
    second = Rule("b", "readSource", "ask", "docs/**", "same decision")
    assert digest(first, second) == digest(second, first)


@pytest.mark.parametrize(
    "edited",
    [
        pytest.param((Rule("read", "readSource", "ask", "docs/**"), WRITE), id="decision"),
        pytest.param((Rule("read", "readSource", "allow", "docs/*.md"), WRITE), id="path"),
        pytest.param((Rule("read", "readS*", "allow", "docs/**"), WRITE), id="tool"),
        pytest.param((READ,), id="a rule removed"),
        pytest.param((READ, WRITE, SHELL), id="a rule added"),
        pytest.param(
            (
                Rule(
                    "read",
                    "readSource",
                    "allow",
                    "docs/**",
                    limits=RuleLimits(per_minute=5),
                ),
                WRITE,
            ),
            id="a rate limit",
        ),
        pytest.param(
            (
                Rule(
                    "read",
                    "readSource",
                    "allow",
                    "docs/**",
                    limits=RuleLimits(weekly({0, 1, 2, 3, 4}, None, None, "UTC")),
                ),
                WRITE,
            ),
            id="a change window",
        ),
    ],
)
def test_every_change_of_what_decides_is_a_new_digest(edited):
    assert digest(*edited) != digest(READ, WRITE)


def test_the_ceiling_and_the_approvers_needed_are_part_of_what_decides():
    assert digest(READ, ceiling="L2") != digest(READ, ceiling="L3")
    assert digest(READ, required=2) != digest(READ, required=1)


def test_a_rate_counter_is_kept_by_rule_name_so_renaming_a_rated_rule_is_a_change():
    rated = RuleLimits(per_minute=5)
    assert digest(Rule("a", "readSource", "allow", limits=rated)) != digest(
        Rule("b", "readSource", "allow", limits=rated)
    )
    # A deny cannot turn stricter: its limits decide nothing.
    assert digest(Rule("s", "runShell", "deny", limits=rated)) == digest(SHELL)


TOOLS = ["readSource", "createDraft", "deleteFile"]
PATHS = [None, "docs/a.md", "docs/b.md", "docs/guide.md", "src/app.py", "secrets/key.txt"]
rules = st.builds(
    Rule,
    id=st.sampled_from(["r1", "r2", "r3"]),
    tool=st.sampled_from([*TOOLS, "*", "{readSource,createDraft}", "read*"]),
    decision=st.sampled_from(["allow", "ask", "ask_strong", "deny"]),
    path=st.sampled_from(["", "docs/a.md", "docs/b.md", "docs/**", "docs/*.md", "src/**"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(rules, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_two_orders_with_one_digest_decide_every_call_alike(listed, random):
    """The digest's promise, tried: whenever a shuffled policy has the same digest, every
    call over these tools and paths gets the same decision from both."""
    shuffled = list(listed)
    random.shuffle(shuffled)
    one, other = Policy("p", "L3", tuple(listed)), Policy("p", "L3", tuple(shuffled))
    if decision_digest(one) != decision_digest(other):
        return
    for tool, path in itertools.product(TOOLS, PATHS):
        call = Call(tool, "L2", path=path)
        assert decide(one, call).decision == decide(other, call).decision, (tool, path)


# --- through the admin ---------------------------------------------------------------------


def edit_form(policy: PolicyRow, **changed_reasons: str) -> dict:
    """The change form as the admin posts it for the stored rules, with some reasons
    reworded (by rule key), or with ``decision:<key>`` set to a new decision."""
    data = {
        "name": policy.name,
        "description": policy.description,
        "ceiling": policy.ceiling,
        "approval_expiry_minutes": policy.approval_expiry_minutes,
        "approval_reminder_minutes": policy.approval_reminder_minutes,
        "l3_approvals_required": policy.l3_approvals_required,
    }
    stored = list(policy.rules.order_by("order", "id"))
    data |= {"rules-TOTAL_FORMS": len(stored), "rules-INITIAL_FORMS": len(stored)}
    for i, rule in enumerate(stored):
        fields = {
            "id": rule.pk,
            "policy": policy.pk,
            "order": rule.order,
            "key": rule.key,
            "tool": rule.tool,
            "path": rule.path,
            "decision": changed_reasons.get(f"decision:{rule.key}", rule.decision),
            "reason": changed_reasons.get(rule.key, rule.reason),
            "window_days": rule.window_days,
            "window_start": rule.window_start or "",
            "window_end": rule.window_end or "",
            "window_timezone": rule.window_timezone,
            "window_excluded": rule.window_excluded,
            "outside_window": rule.outside_window,
            "rate_limit": rule.rate_limit,
            "rate_scope": rule.rate_scope,
            "over_rate": rule.over_rate,
        }
        data.update({f"rules-{i}-{name}": value for name, value in fields.items()})
    return data


@pytest.fixture
def team(db):
    policy = PolicyRow.objects.create(name="team", ceiling="L3")
    PolicyRule.objects.create(
        policy=policy, order=10, key="read", tool="readSource", decision="allow"
    )
    PolicyRule.objects.create(
        policy=policy, order=20, key="drafts", tool="createDraft", decision="ask", reason="look"
    )
    return policy


def test_a_wording_edit_in_the_admin_keeps_the_version(admin_client, team):
    url = reverse("admin:policies_policy_change", args=[team.pk])
    response = admin_client.post(
        url, edit_form(team, drafts="a person reads every draft"), follow=True
    )
    assert "This edit changes no decision: team stays at version 1" in response.content.decode()
    team.refresh_from_db()
    assert team.version == 1 and not PolicyChange.objects.filter(policy=team).exists()
    assert team.rules.get(key="drafts").reason == "a person reads every draft"  # saved all the same
    # Moving an ask to an allow is a decision: a new version, marked on the dashboards.
    response = admin_client.post(url, edit_form(team, **{"decision:drafts": "allow"}))
    assert response.status_code == 302
    team.refresh_from_db()
    assert team.version == 2
    assert list(PolicyChange.objects.filter(policy=team).values_list("version", flat=True)) == [2]


def test_swapping_the_order_of_two_rules_for_other_tools_keeps_the_version(admin_client, team):
    data = edit_form(team)
    data["rules-0-order"], data["rules-1-order"] = 20, 10
    admin_client.post(reverse("admin:policies_policy_change", args=[team.pk]), data)
    team.refresh_from_db()
    assert team.version == 1
    assert list(team.rules.order_by("order").values_list("key", flat=True)) == ["drafts", "read"]


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_wording_edit_leaves_a_pending_request_valid_and_a_decision_edit_does_not(
    admin_client, personas, agent, workspace
):
    """A delete waits on the default policy; its rules are reworded in the admin: the
    preview says nothing is invalidated, the request stays current and, approved, commits.
    A second edit that changes a decision is previewed as invalidating it, by name."""
    run, approval = waiting_delete(personas, agent, workspace)
    default = PolicyRow.objects.get(name="default")
    url = reverse("admin:policies_policy_change", args=[default.pk])
    page = admin_client.get(url).content.decode()
    assert 'id="policy-pending-bound"' in page and "1 pending request is bound to version 1" in page
    reworded = {rule.key: f"{rule.reason} (reworded)" for rule in default.rules.all()}
    preview = admin_client.post(url, {**edit_form(default, **reworded), "_simulate": "1"})
    html = preview.content.decode()
    assert "This edit changes no decision: saving keeps version 1" in html
    assert 'id="pending-invalidated"' not in html
    admin_client.post(url, edit_form(default, **reworded))
    default.refresh_from_db()
    assert default.version == 1
    review = admin_client.get(reverse("approvals:review", args=[approval.pk])).content.decode()
    assert "the policy changed" not in review

    deciding = approval.rule
    stricter = {f"decision:{deciding}": "deny"}
    html = admin_client.post(url, {**edit_form(default, **stricter), "_simulate": "1"}).content
    html = html.decode()
    assert "invalidates the <strong>1</strong> pending request bound to version 1" in html
    assert f'data-approval="{approval.pk}"' in html
    default.refresh_from_db()
    assert default.version == 1  # a preview saves nothing

    approval_decide(
        approval=approval, user=personas.approver, decision="approve", confirm="docs/old-faq.md"
    )
    run = drive(run)
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED, approval.status_reason
    assert run.status == "completed", run.failure_reason
    assert not (workspace.root_path / "docs" / "old-faq.md").exists()


# --- revisions: author, note, diff, restore ----------------------------------------------------
def test_every_saved_edit_is_a_revision_with_its_author_and_note(admin_client, admin_user, team):
    from policies.models import PolicyRevision

    url = reverse("admin:policies_policy_change", args=[team.pk])
    admin_client.post(url, {**edit_form(team, drafts="reworded"), "change_note": "clearer"})
    admin_client.post(
        url, {**edit_form(team, **{"decision:drafts": "allow"}), "change_note": "drafts free"}
    )
    revisions = list(PolicyRevision.objects.filter(policy=team).order_by("number"))
    assert [(r.number, r.decision_version, r.note) for r in revisions] == [
        (1, 1, "clearer"),
        (2, 2, "drafts free"),
    ]
    assert {r.author for r in revisions} == {admin_user}
    page = admin_client.get(
        reverse("admin:policies_policyrevision_change", args=[revisions[1].pk])
    ).content.decode()
    assert "-rule 20 drafts: createDraft (any path) → ask — reworded" in page
    assert "+rule 20 drafts: createDraft (any path) → allow — reworded" in page
    edit = admin_client.get(url).content.decode()
    assert "2 revisions (author, note, diff, restore)" in edit


def test_two_revisions_compare_and_an_old_one_is_restored_as_a_new_edit(admin_client, team):
    from policies.models import PolicyRevision

    url = reverse("admin:policies_policy_change", args=[team.pk])
    admin_client.post(url, {**edit_form(team), "change_note": "first look"})
    admin_client.post(url, edit_form(team, **{"decision:drafts": "allow"}))
    admin_client.post(url, edit_form(team, drafts="anything goes"))
    first, _second, third = PolicyRevision.objects.filter(policy=team).order_by("number")
    compared = admin_client.get(
        reverse("admin:policies_policyrevision_compare", args=[third.pk]), {"against": first.pk}
    ).content.decode()
    assert "-rule 20 drafts: createDraft (any path) → ask — look" in compared
    assert "+rule 20 drafts: createDraft (any path) → allow — anything goes" in compared
    restore = reverse("admin:policies_policyrevision_restore", args=[first.pk])
    preview = admin_client.get(restore).content.decode()
    assert "+rule 20 drafts: createDraft (any path) → ask — look" in preview
    team.refresh_from_db()
    assert team.version == 2  # the preview changed nothing
    admin_client.post(restore)
    team.refresh_from_db()
    assert team.version == 3  # ask again: a decision moved
    drafts = team.rules.get(key="drafts")
    assert (drafts.decision, drafts.reason) == ("ask", "look")
    restored = PolicyRevision.objects.filter(policy=team).order_by("-number").first()
    assert (restored.number, restored.restored_from, restored.note) == (
        4,
        first,
        "restored revision 1",
    )
    assert restored.snapshot["rules"] == first.snapshot["rules"]


@pytest.mark.django_db
def test_every_policy_that_was_there_has_its_first_revision():
    from policies.models import PolicyRevision

    default = PolicyRow.objects.get(name="default")
    first = PolicyRevision.objects.get(policy=default, number=1)
    assert first.note == "as it was when revisions began"
    assert len(first.snapshot["rules"]) == default.rules.count() > 0


@pytest.mark.parametrize("who", ["approver", "operator", "ops"])
def test_only_admins_restore_a_revision(client, personas, team, who):
    from policies.models import PolicyRevision
    from policies.policy_revisions import revision_record

    revision = revision_record(policy=team, note="x")
    client.force_login(getattr(personas, who))
    response = client.post(reverse("admin:policies_policyrevision_restore", args=[revision.pk]))
    assert response.status_code in (302, 403)
    assert PolicyRevision.objects.filter(policy=team).count() == 1


# --- changes that need a second admin ---------------------------------------------------------
@pytest.fixture
def guarded(team):
    PolicyRow.objects.filter(pk=team.pk).update(changes_need_second_admin=True)
    team.refresh_from_db()
    return team


def propose(admin_client, policy, **changes):
    from policies.models import PolicyChangeRequest

    data = edit_form(policy, **changes)
    data["changes_need_second_admin"] = "on" if policy.changes_need_second_admin else ""
    data.update(changes.pop("extra", {}))
    response = admin_client.post(
        reverse("admin:policies_policy_change", args=[policy.pk]), data, follow=True
    )
    return response, PolicyChangeRequest.objects.filter(policy=policy).order_by("-pk").first()


@pytest.mark.django_db(transaction=True)
def test_a_guarded_policy_takes_an_edit_only_once_a_second_admin_approves(
    admin_client, admin_user, client, personas, guarded
):
    response, change = propose(admin_client, guarded, **{"decision:drafts": "allow"})
    html = response.content.decode()
    assert "your edit is proposed, not applied" in html
    assert "-rule 20 drafts: createDraft (any path) → ask — look" in html
    assert "+rule 20 drafts: createDraft (any path) → allow — look" in html
    assert 'id="policy-change-own"' in html and 'id="policy-change-decide"' not in html
    assert "this change would decide <strong>0</strong> differently" in html  # the simulator
    guarded.refresh_from_db()
    assert guarded.version == 1 and guarded.rules.get(key="drafts").decision == "ask"
    # The author cannot decide their own change, even by posting.
    decide = reverse("admin:policies_policychangerequest_decide", args=[change.pk])
    assert admin_client.post(decide, {"decision": "approve"}).status_code == 403
    change.refresh_from_db()
    assert change.status == "pending"
    # A second admin sees it in the approval queue, and approves it.
    client.force_login(personas.admin)
    queue = client.get(reverse("approvals:queue")).content.decode()
    assert f'data-policy-change="{change.pk}"' in queue
    assert client.post(decide, {"decision": "reject"}).status_code == 302  # no reason: refused
    change.refresh_from_db()
    assert change.status == "pending"
    client.post(decide, {"decision": "approve"})
    change.refresh_from_db()
    guarded.refresh_from_db()
    assert (change.status, change.decided_by) == ("approved", personas.admin)
    assert guarded.version == 2 and guarded.rules.get(key="drafts").decision == "allow"
    latest = guarded.revisions.order_by("-number").first()
    assert latest.author == admin_user
    assert latest.note.endswith(f"(approved by {personas.admin.get_username()})")


@pytest.mark.django_db(transaction=True)
def test_a_proposal_the_policy_moved_past_is_stale(admin_client, client, personas, guarded):
    _, first = propose(admin_client, guarded, **{"decision:drafts": "allow"})
    _, second = propose(admin_client, guarded, drafts="reworded only")
    client.force_login(personas.admin)
    client.post(
        reverse("admin:policies_policychangerequest_decide", args=[first.pk]),
        {"decision": "approve"},
    )
    response = client.post(
        reverse("admin:policies_policychangerequest_decide", args=[second.pk]),
        {"decision": "approve"},
        follow=True,
    )
    assert "it is stale" in response.content.decode()
    second.refresh_from_db()
    guarded.refresh_from_db()
    assert second.status == "stale"
    assert guarded.rules.get(key="drafts").reason == "look"  # the stale one wrote nothing


@pytest.mark.django_db(transaction=True)
def test_switching_the_guard_off_is_itself_a_change_for_a_second_admin(admin_client, guarded):
    data_off = {"extra": {"changes_need_second_admin": ""}}
    _, change = propose(admin_client, guarded, **data_off)
    guarded.refresh_from_db()
    assert guarded.changes_need_second_admin and change.status == "pending"
    assert change.snapshot["changes_need_second_admin"] is False
