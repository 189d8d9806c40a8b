"""A workspace edited in the admin (its folder moved, say) must not keep serving old files."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction

from .instruction_cache import instructions_invalidate


def workspace_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if not created:
        transaction.on_commit(partial(instructions_invalidate, root=instance.root))
