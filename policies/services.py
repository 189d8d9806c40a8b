"""Write paths of context configuration; each edit drops the affected cache on commit."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import IntegrityError, transaction

from .instruction_cache import instructions_invalidate
from .models import Agent, InstructionVersion

MAX_INSTRUCTION_CHARS = 200_000


class InstructionError(ValueError):
    """An instruction edit that cannot be saved; the message says why."""


def instruction_update(
    *,
    agent: Agent,
    text: str,
    author: Any,
    note: str = "",
    restored_from: InstructionVersion | None = None,
) -> InstructionVersion:
    """Save ``text`` as the agent's next instruction version.

    Two admins saving at once both succeed, one after the other: the version number is
    taken under the agent's row lock, and the unique constraint catches anything else.
    """
    text = text.replace("\r\n", "\n")
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise InstructionError(
            f"The instructions are {len(text):,} characters; the limit is "
            f"{MAX_INSTRUCTION_CHARS:,}."
        )
    with transaction.atomic():
        Agent.objects.select_for_update().filter(pk=agent.pk).exists()
        current = instructions_current(agent)
        if current is not None and current.text == text and restored_from is None:
            raise InstructionError(
                f"The text is the same as version {current.version}, in force; nothing saved."
            )
        latest = current.version if current else None
        try:
            version = InstructionVersion.objects.create(
                agent=agent,
                version=(latest or 0) + 1,
                text=text,
                note=note[:200],
                author=author if getattr(author, "pk", None) else None,
                restored_from=restored_from,
            )
        except IntegrityError as error:
            raise InstructionError(
                "Another edit was saved at the same moment; try again."
            ) from error
        transaction.on_commit(partial(instructions_invalidate, agent_id=agent.pk))
    return version


def instruction_restore(*, version: InstructionVersion, author: Any) -> InstructionVersion:
    """Restoring never rewrites history: the old text becomes the newest version."""
    return instruction_update(
        agent=version.agent,
        text=version.text,
        author=author,
        note=f"Restored version {version.version}",
        restored_from=version,
    )


def instructions_current(agent: Agent) -> InstructionVersion | None:
    return InstructionVersion.objects.filter(agent=agent).order_by("-version").first()
