from __future__ import annotations

from django.apps import AppConfig


class HarnessConsoleConfig(AppConfig):
    name = "harness_console"
    verbose_name = "Harness Console"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from .roles import roles_sync_after_migrate

        post_migrate.connect(roles_sync_after_migrate, dispatch_uid="harness_roles_sync")
