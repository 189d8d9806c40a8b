"""A run has at most one pending commit request. A database that already holds two keeps
the newest pending and marks the others invalidated, as the harness now does when it asks
again, before the constraint is added."""

from django.conf import settings
from django.db import migrations, models


def keep_the_newest_pending_commit(apps, schema_editor):
    request = apps.get_model("approvals", "ApprovalRequest")
    pending = request.objects.filter(status="pending", kind="commit").order_by(
        "run_id", "-requested_at"
    )
    seen = set()
    for approval in pending.only("pk", "run_id"):
        if approval.run_id in seen:
            request.objects.filter(pk=approval.pk).update(
                status="invalidated", status_reason="replaced by a newer request for this run"
            )
        seen.add(approval.run_id)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0004_decide_approval_moves"),
        ("runs", "0027_model_call_context"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(keep_the_newest_pending_commit, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="approvalrequest",
            constraint=models.UniqueConstraint(
                condition=models.Q(("kind", "commit"), ("status", "pending")),
                fields=("run",),
                name="one_pending_commit_per_run",
            ),
        ),
    ]
