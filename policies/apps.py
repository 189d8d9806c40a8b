from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class PoliciesConfig(AppConfig):
    name = "policies"

    def ready(self) -> None:
        # Django imports an app's config before its models: the receiver, which names a
        # model, is imported once they are loaded (the one way Django allows).
        from .config_stamp import MODELS, config_row_changed  # names models: after loading
        from .signals import workspace_saved  # the same

        post_save.connect(
            workspace_saved, sender="policies.Workspace", dispatch_uid="workspace_saved"
        )
        for model in MODELS:  # what decides tool calls changed: workers read it again
            for signal in (post_save, post_delete):
                signal.connect(
                    config_row_changed, sender=model, dispatch_uid=f"config-stamp-{model}"
                )
