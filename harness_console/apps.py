from __future__ import annotations

from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_migrate

from .roles import roles_sync_after_migrate
from .web.live import user_logged_out as close_live_pages


class HarnessConsoleConfig(AppConfig):
    name = "harness_console"
    verbose_name = "Harness Console"

    def ready(self) -> None:
        post_migrate.connect(roles_sync_after_migrate, dispatch_uid="harness_roles_sync")
        # Logging out closes every live page of that user, in every tab (SPEC L1).
        user_logged_out.connect(close_live_pages, dispatch_uid="harness_close_live_pages")
