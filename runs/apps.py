from __future__ import annotations

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        from .live import user_logged_out as close_live_pages

        user_logged_out.connect(close_live_pages, dispatch_uid="runs_close_live_pages")
