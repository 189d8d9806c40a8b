"""The approvals audit migration on a database with requests recorded before it: pending
ones get a deadline, decided ones their decision as an audit row."""

from __future__ import annotations

import datetime

from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from approvals.models import ApprovalDecision, ApprovalRequest
from tests.conftest import EVERYWHERE

pytestmark = EVERYWHERE


def test_requests_from_before_get_a_deadline_and_their_decisions(personas, run):
    call_command("migrate", "approvals", "0001", verbosity=0)
    try:
        old = (
            MigrationExecutor(connection)
            .loader.project_state(("approvals", "0001_initial"))
            .apps.get_model("approvals", "ApprovalRequest")
        )
        decided_at = timezone.now() - datetime.timedelta(days=3)
        common = {"run_id": run.pk, "kind": "commit", "digest": "a" * 64}
        old.objects.create(tool_use_id="c1", status="pending", **common)
        old.objects.create(
            tool_use_id="c2",
            status="rejected",
            decided_by_id=personas.approver.pk,
            decided_at=decided_at,
            comment="not like this",
            **common,
        )
        old.objects.create(tool_use_id="c3", status="expired", **common)
    finally:
        # Every app to its latest: going back to approvals 0001 also unapplied the
        # migrations of other apps that depend on approvals (runs' rollups backfill).
        call_command("migrate", verbosity=0)
    pending = ApprovalRequest.objects.get(tool_use_id="c1")
    assert pending.expires_at is not None and pending.expires_at > timezone.now()
    (decision,) = ApprovalDecision.objects.filter(approval__tool_use_id="c2")
    assert (decision.user, decision.decision, decision.comment) == (
        personas.approver,
        "reject",
        "not like this",
    )
    assert decision.decided_at == decided_at and decision.shown_digest == "a" * 64
    assert not ApprovalDecision.objects.filter(approval__tool_use_id="c3").exists()
