"""Seed the default policy of SPEC P3 (policies/core/default_policy.py)."""

from django.db import migrations


def seed(apps, schema_editor):
    from policies.core.default_policy import DEFAULT_POLICY

    Policy = apps.get_model("policies", "Policy")
    PolicyRule = apps.get_model("policies", "PolicyRule")
    policy, created = Policy.objects.get_or_create(
        name=DEFAULT_POLICY.name,
        defaults={"ceiling": DEFAULT_POLICY.ceiling,
                  "description": "SPEC P3: read and draft freely; confirm changes; "
                                 "strongly confirm deletes; a person publishes."},
    )
    if created:
        for order, rule in enumerate(DEFAULT_POLICY.rules, start=1):
            PolicyRule.objects.create(policy=policy, order=order * 10, key=rule.id,
                                      tool=rule.tool, path=rule.path,
                                      decision=rule.decision, reason=rule.reason)


class Migration(migrations.Migration):
    dependencies = [("policies", "0002_policy_policyrule")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
