"""Carries news of new run events to WebSocket consumers through the channel layer.

The database is the source of truth; a lost message only delays a page until its next
reconnect, which replays from the database. So publishing never raises into a service.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

OPS_GROUP = "ops"
RUN_EVENT_MESSAGE = "run.event"


def run_group(run_id: Any) -> str:
    """Channel group of one run: ``run.<hex>`` (group names allow letters, digits and dots)."""
    return f"run.{getattr(run_id, 'hex', str(run_id).replace('-', ''))}"


def user_group(user_id: Any) -> str:
    """Every open page of one user, to close them all when the user logs out."""
    return f"user.{user_id}"


def user_logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is None or (layer := get_channel_layer()) is None:
        return
    try:
        async_to_sync(layer.group_send)(user_group(user.pk), {"type": "session.ended"})
    except Exception:
        logger.exception("Could not close the live pages of user %s", user.pk)


def event_message(event: Any) -> dict[str, Any]:
    return {
        "type": RUN_EVENT_MESSAGE,
        "run_id": str(event.run_id),
        "seq": event.seq,
        "event_type": event.type,
        "payload": event.payload,
        "created_at": event.created_at.isoformat(),
    }


def event_publish(event: Any) -> None:
    """Send one committed event to its run's group and to the ops group."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = event_message(event)
    for group in (run_group(event.run_id), OPS_GROUP):
        try:
            async_to_sync(layer.group_send)(group, message)
        except Exception:
            logger.exception("Could not publish run event %s #%s", event.run_id, event.seq)
