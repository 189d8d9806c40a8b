"""Celery tasks of the run domain: thin wrappers that reload by id and call one service."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from celery import shared_task
from channels.layers import get_channel_layer

from . import services


@shared_task(ignore_result=True)
def run_start(run_id: str) -> None:
    """At-most-once: the claim is a conditional update, so a duplicate delivery does nothing.

    No retries: a run whose worker died is found again by the sweeper, not by redelivery.
    """
    services.run_claim(run_id=run_id, worker=run_start.request.hostname or "worker")


@shared_task(ignore_result=True)
def live_layer_trim() -> None:
    """The embedded channel layer keeps delivered rows until they expire; drop expired ones."""
    layer = get_channel_layer()
    clean = getattr(layer, "clean_expired", None)
    if clean is not None:
        async_to_sync(clean)()
