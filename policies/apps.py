from __future__ import annotations

from django.apps import AppConfig


class PoliciesConfig(AppConfig):
    name = "policies"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from .models import Workspace
        from .signals import workspace_saved

        post_save.connect(workspace_saved, sender=Workspace, dispatch_uid="workspace_saved")
