"""Keeps the embedded channel layer's tables on their own SQLite file, and only them there."""

from __future__ import annotations

from typing import Any

from django.db.models import Model

CHANNELS_ALIAS = "channels"
CHANNELS_APP = "channels_lite"


class ChannelLayerRouter:
    """Like channels_lite's own router, but also keeps every other app *out* of its database.

    channels_lite's router answers None for other apps, so ``migrate --database channels``
    would copy every table into the channel file (NOTES.md); answering False prevents it.
    """

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return CHANNELS_ALIAS if model._meta.app_label == CHANNELS_APP else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return CHANNELS_ALIAS if model._meta.app_label == CHANNELS_APP else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return (db == CHANNELS_ALIAS) == (app_label == CHANNELS_APP)
