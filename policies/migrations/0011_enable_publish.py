"""publish is built: enable it in the registry (it still always needs a person)."""

from django.db import migrations


def enable(apps, schema_editor):
    apps.get_model("policies", "ToolDefinition").objects.filter(name="publish").update(
        enabled=True, description="Publish the workspace to its publish folder. A production "
        "change: a person always decides.")


class Migration(migrations.Migration):
    dependencies = [("policies", "0010_mcpserver")]
    operations = [migrations.RunPython(enable, migrations.RunPython.noop)]
