from django.db import migrations


def permission_follows(apps, schema_editor):
    """Deciding approvals is the approvals app's permission: the existing row moves to the
    approval request's content type, so every role and user holding it keeps it
    (runs.decide_approval becomes approvals.decide_approval). On a fresh database the roles
    migration made it already, so it moves too."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    moving = Permission.objects.filter(
        content_type__app_label="runs", content_type__model="run", codename="decide_approval"
    )
    if not moving.exists():
        return
    target, _ = ContentType.objects.get_or_create(app_label="approvals", model="approvalrequest")
    Permission.objects.filter(content_type=target, codename="decide_approval").delete()
    moving.update(content_type=target)


def permission_returns(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    target, _ = ContentType.objects.get_or_create(app_label="runs", model="run")
    Permission.objects.filter(
        content_type__app_label="approvals", codename="decide_approval"
    ).update(content_type=target)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0003_backfill_expiry_and_decisions"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("runs", "0020_decide_approval_moves"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="approvalrequest",
            options={
                "ordering": ["requested_at"],
                "permissions": [("decide_approval", "Can decide approval requests of runs")],
            },
        ),
        migrations.RunPython(permission_follows, permission_returns),
    ]
