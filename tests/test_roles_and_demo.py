"""Roles come from a migration; the demo seed is idempotent and prints its logins."""

from __future__ import annotations

import io
import json

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.core.management.sql import emit_post_migrate_signal

from policies.models import Agent, Workspace

pytestmark = pytest.mark.django_db


def perms(role: str) -> set[str]:
    group = Group.objects.get(name=role)
    return {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()}


def test_the_migration_created_the_four_roles():
    # pytest-django's test database was built by running the migrations: nothing else made them.
    assert set(Group.objects.values_list("name", flat=True)) >= {
        "admin",
        "approver",
        "operator",
        "ops",
    }


def test_each_role_holds_what_it_needs_and_no_more():
    assert {"runs.add_run", "runs.view_run"} <= perms("operator")
    assert "approvals.decide_approval" not in perms("operator")
    assert {"approvals.decide_approval", "runs.view_dashboards"} <= perms("approver")
    assert "runs.add_run" not in perms("approver")
    assert "runs.view_dashboards" in perms("ops")
    assert not {"runs.add_run", "approvals.decide_approval"} & perms("ops")
    assert {
        "policies.change_agent",
        "approvals.decide_approval",
        "runs.view_dashboards",
        "auth.add_user",
    } <= perms("admin")
    assert "runs.change_runevent" in perms("admin")  # held, but the admin refuses it (read-only)


def run_seed() -> str:
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def test_the_demo_seed_is_idempotent_and_prints_working_logins(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    first, second = run_seed(), run_seed()
    assert first == second
    logins = json.loads((tmp_path / "demo-logins.json").read_text())
    for role in ("admin", "approver", "operator", "ops"):
        assert f"{role} / {logins[role]}" in first
        user = User.objects.get(username=role)
        assert user.check_password(logins[role])
        assert list(user.groups.values_list("name", flat=True)) == [role]
    assert User.objects.get(username="admin").is_staff
    assert (User.objects.count(), Workspace.objects.count(), Agent.objects.count()) == (4, 1, 1)
    root = tmp_path / "workspaces" / "demo"
    assert Workspace.objects.get().root == str(root)
    for agents_md in ("AGENTS.md", "docs/AGENTS.md", "src/AGENTS.md"):
        assert (root / agents_md).is_file()
    assert oct((tmp_path / "demo-logins.json").stat().st_mode & 0o777) == "0o600"


def test_the_demo_seed_resets_a_password_it_no_longer_knows(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    run_seed()
    (tmp_path / "demo-logins.json").unlink()
    output = run_seed()
    logins = json.loads((tmp_path / "demo-logins.json").read_text())
    assert User.objects.get(username="ops").check_password(logins["ops"])
    assert f"ops / {logins['ops']}" in output


def test_the_channel_layer_database_holds_only_its_own_tables():
    from harness_console.db_routers import ChannelLayerRouter

    if not settings.EMBEDDED:  # production: Redis carries the layer, one database only
        assert list(settings.DATABASES) == ["default"]
        assert "channels_lite" not in settings.INSTALLED_APPS
        return

    router = ChannelLayerRouter()
    assert router.allow_migrate("channels", "channels_lite")
    assert not router.allow_migrate("channels", "runs")
    assert not router.allow_migrate("default", "channels_lite")
    assert router.allow_migrate("default", "runs")


def _auth_rows() -> dict[str, set[tuple[object, ...]]]:
    return {
        "content types": set(ContentType.objects.values_list("pk", "app_label", "model")),
        "permissions": set(Permission.objects.values_list("pk", "content_type", "codename")),
        "roles": {
            (group.name, frozenset(group.permissions.values_list("pk", flat=True)))
            for group in Group.objects.all()
        },
    }


def _flushed_and_checked() -> dict[str, set[tuple[object, ...]]]:
    """A flush as a transactional test's teardown makes, then what it left: as the
    post_migrate signal leaves it (sending the signal for real changes nothing)."""
    # As a transactional test's teardown flushes: its sequences kept.
    call_command("flush", interactive=False, verbosity=0, reset_sequences=False)
    after = _auth_rows()
    assert after["permissions"] and {"admin", "approver", "operator", "ops"} <= {
        name for name, _ in after["roles"]
    }
    emit_post_migrate_signal(0, False, "default")
    assert _auth_rows() == after
    return after


@pytest.mark.django_db(transaction=True)
def test_a_flush_leaves_the_rows_post_migrate_makes():
    # The tests' flush puts back the rows its first post_migrate made in this process
    # (tests/post_migrate_rows.py) rather than sending the signal again: the second flush
    # here restores them, whatever the test damaged.
    first = _flushed_and_checked()
    Group.objects.get(name="ops").permissions.clear()
    Permission.objects.filter(codename="view_dashboards").delete()
    Group.objects.create(name="made-by-a-test")
    assert _flushed_and_checked() == first
