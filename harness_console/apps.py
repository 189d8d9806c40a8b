from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.core.signals import request_started
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
        if settings.USE_TEST_DATABASES:
            request_started.connect(forget_content_types, dispatch_uid="harness_test_types")


def forget_content_types(**kwargs: Any) -> None:
    """Under tests only (daphne as a subprocess of the test session): the tests empty the
    database between them, and Django creates the content types anew, with new ids; a
    server that outlives a test must not log an admin change under the ids it cached in an
    earlier one (a foreign key error at commit)."""
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()
