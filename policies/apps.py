from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_save


class PoliciesConfig(AppConfig):
    name = "policies"

    def ready(self) -> None:
        # Django imports an app's config before its models: the receiver, which names a
        # model, is imported once they are loaded (the one way Django allows).
        from .signals import workspace_saved

        post_save.connect(
            workspace_saved, sender="policies.Workspace", dispatch_uid="workspace_saved"
        )
