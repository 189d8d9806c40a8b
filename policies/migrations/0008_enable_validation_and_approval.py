"""runValidation and requestApproval are built: enable them in the registry."""

from django.db import migrations


def enable(apps, schema_editor):
    apps.get_model("policies", "ToolDefinition").objects.filter(
        name__in=["runValidation", "requestApproval"]).update(enabled=True)
    apps.get_model("policies", "ToolDefinition").objects.filter(name="runValidation").update(
        description="Check a file (its draft if there is one): JSON and YAML well-formedness, "
        "Markdown code fences and broken internal links.")


class Migration(migrations.Migration):
    dependencies = [("policies", "0007_enable_shell")]
    operations = [migrations.RunPython(enable, migrations.RunPython.noop)]
