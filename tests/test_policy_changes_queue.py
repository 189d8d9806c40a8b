"""Policy changes waiting for a second admin are part of the approval queue (issue 18,
B16): in the table the live queue fetches again, in the navigation's count of every admin
who may decide them (never their author's), and news on the queue's WebSocket when one is
proposed or decided. Approvers who are not admins see none of it."""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.urls import reverse

from harness_console.web.live import PUBLISHER
from policies.models import Policy, PolicyRule
from policies.policy_changes import policy_change_decide, policy_change_propose
from policies.policy_revisions import snapshot_of
from tests.conftest import EVERYWHERE
from tests.test_run_websocket import communicator, cookie

pytestmark = EVERYWHERE
COUNT = re.compile(r'<span id="nav-approvals-count"[^>]*>(\d+)</span>')


@pytest.fixture
def guarded(db) -> Policy:
    policy = Policy.objects.create(name="guarded", ceiling="L3", changes_need_second_admin=True)
    PolicyRule.objects.create(
        policy=policy, order=10, key="drafts", tool="createDraft", decision="ask", reason="look"
    )
    return policy


def proposal(policy: Policy, author):
    snapshot = snapshot_of(policy)
    snapshot["rules"][0]["decision"] = "allow"
    return policy_change_propose(policy=policy, snapshot=snapshot, author=author, note="open up")


def seen(client, user) -> tuple[str, int, int]:
    """The queue's live fragment, the count it carries out of band, and the count the
    navigation fetches on every other page."""
    client.force_login(user)
    fragment = client.get(reverse("approvals:queue"), {"fragment": "1"}).content.decode()
    count = client.get(reverse("approvals:count")).content.decode()
    return fragment, int(COUNT.search(fragment).group(1)), int(COUNT.search(count).group(1))


def test_a_proposal_is_in_the_live_queue_and_counted_for_the_other_admins_only(
    client, personas, admin_user, guarded
):
    change = proposal(guarded, admin_user)
    row = f'data-policy-change="{change.pk}"'

    fragment, in_fragment, in_nav = seen(client, personas.admin)  # the second admin
    assert row in fragment and "policy change" in fragment and "open up" in fragment
    assert (in_fragment, in_nav) == (1, 1)

    fragment, in_fragment, in_nav = seen(client, admin_user)  # its author
    assert row in fragment and "(yours: another admin decides)" in fragment
    assert (in_fragment, in_nav) == (0, 0)

    fragment, in_fragment, in_nav = seen(client, personas.approver)  # not an admin
    assert row not in fragment and 'id="policy-changes"' not in fragment
    assert (in_fragment, in_nav) == (0, 0)

    policy_change_decide(change=change, user=personas.admin, decision="approve")
    fragment, in_fragment, in_nav = seen(client, personas.admin)
    assert row not in fragment and (in_fragment, in_nav) == (0, 0)


def test_the_queue_socket_hears_a_proposal_and_its_decision(client, personas, admin_user, guarded):
    PUBLISHER.flush()

    async def scenario():
        ws = communicator("/ws/approvals/", cookie=cookie(client, personas.admin))
        connected, _ = await ws.connect(timeout=10)
        assert connected
        change = await database_sync_to_async(proposal)(guarded, admin_user)
        proposed = json.loads(await ws.receive_from(timeout=10))
        await database_sync_to_async(policy_change_decide)(
            change=change, user=personas.admin, decision="reject", comment="not now"
        )
        decided = json.loads(await ws.receive_from(timeout=10))
        await ws.disconnect()
        return change, proposed, decided

    change, proposed, decided = async_to_sync(scenario)()
    assert proposed == {"event": "policy_change", "policy_change": change.pk}
    assert decided == proposed
