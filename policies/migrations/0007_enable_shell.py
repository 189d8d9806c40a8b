"""The sandboxed shell tool is built: enable it in the registry."""

from django.db import migrations


def enable(apps, schema_editor):
    apps.get_model("policies", "ToolDefinition").objects.filter(name="dangerous").update(
        enabled=True, description="Run a shell command in a sandbox: the workspace writable, "
        "everything else read-only, no network. Level L3.")


class Migration(migrations.Migration):
    dependencies = [("policies", "0006_builtin_tools")]
    operations = [migrations.RunPython(enable, migrations.RunPython.noop)]
