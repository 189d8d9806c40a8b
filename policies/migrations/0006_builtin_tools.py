"""Put the built-in tools in the registry (SPEC T1). Tools this version does not implement
yet are registered disabled, so the permission engine knows them but no model is offered
them and no call can run them."""

from django.db import migrations

IMPLEMENTED = {"readSource", "glob", "grep", "createDraft", "patchDraft", "commitDraft",
               "deleteFile", "renameFile"}


def seed(apps, schema_editor):
    from policies.core.tool_specs import BUILTIN_TOOLS

    ToolDefinition = apps.get_model("policies", "ToolDefinition")
    for spec in BUILTIN_TOOLS.values():
        ToolDefinition.objects.get_or_create(
            name=spec.name,
            defaults={
                "description": spec.description,
                "input_schema": spec.input_schema,
                "permission_level": spec.level,
                "side_effect": spec.side_effect,
                "timeout_sec": spec.timeout_sec,
                "retry": spec.retry,
                "approval_required": spec.approval_required,
                "source": "builtin",
                "enabled": spec.name in IMPLEMENTED,
            },
        )


class Migration(migrations.Migration):
    dependencies = [("policies", "0005_tooldefinition")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
