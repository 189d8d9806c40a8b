"""searchDocs is built: enable it in the registry."""

from django.db import migrations


def enable(apps, schema_editor):
    apps.get_model("policies", "ToolDefinition").objects.filter(name="searchDocs").update(
        enabled=True, description="Search the workspace's documents (Markdown, text) by words; "
        "ranked results with a snippet each.")


class Migration(migrations.Migration):
    dependencies = [("policies", "0008_enable_validation_and_approval")]
    operations = [migrations.RunPython(enable, migrations.RunPython.noop)]
