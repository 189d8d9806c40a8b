"""Review at hunk level (issue 18, B7): a request and each decision keep the hunks the
approver rejected and the digest of what was accepted. Earlier rows have neither (blank:
approved as shown, or with an edit that predates the accepted digest)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0006_approval_link_use'),
    ]

    operations = [
        migrations.AddField(
            model_name='approvaldecision',
            name='accepted_digest',
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name='approvaldecision',
            name='rejected_hunks',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name='approvalrequest',
            name='accepted_digest',
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name='approvalrequest',
            name='rejected_hunks',
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
