"""Requests recorded before approvals expired and kept their decisions apart: a pending one
gets a full day from now (not from when it was asked, which would expire it at once), and
each approved or rejected one gets its decision as an audit row, as if recorded then."""

import datetime

from django.db import migrations
from django.utils import timezone


def backfill(apps, schema_editor):
    ApprovalRequest = apps.get_model("approvals", "ApprovalRequest")
    ApprovalDecision = apps.get_model("approvals", "ApprovalDecision")
    ApprovalRequest.objects.filter(status="pending", expires_at__isnull=True).update(
        expires_at=timezone.now() + datetime.timedelta(days=1)
    )
    decided = ApprovalRequest.objects.filter(
        status__in=("approved", "rejected"), decided_by__isnull=False
    ).exclude(decisions__isnull=False)
    for request in decided.iterator():
        decision = ApprovalDecision.objects.create(
            approval=request,
            user_id=request.decided_by_id,
            decision="approve" if request.status == "approved" else "reject",
            comment=request.comment,
            shown_digest=request.digest,
            remember=request.remember,
        )
        if request.decided_at:
            ApprovalDecision.objects.filter(pk=decision.pk).update(decided_at=request.decided_at)


class Migration(migrations.Migration):
    dependencies = [("approvals", "0002_binding_expiry_audit")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
