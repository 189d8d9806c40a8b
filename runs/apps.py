from __future__ import annotations

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        from celery.signals import task_received

        # leases imports the models: loaded by the time ready() runs, not at import.
        from .leases import run_received_signal

        # A worker notes which runs' messages it took, so the sweeper leaves them to it.
        task_received.connect(run_received_signal, weak=False, dispatch_uid="run_received")
