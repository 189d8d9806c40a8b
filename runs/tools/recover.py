"""Reconciling a tool call found running after its worker died (SPEC R9): the journal's
pre-images tell whether its writes happened, so it is neither lost nor done twice."""

from __future__ import annotations

import base64

from django.utils import timezone

from policies.models import ToolDefinition

from ..models import ToolCall
from .decide import side_effect
from .journal import image, image_decode, recoverable
from .record import tool_call_record


def image_of(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def tool_call_recover(*, record: ToolCall) -> str:
    """A call found running after its worker died: did it take effect?

    ``"rerun"``: it had no effect yet (or none it could have), so it may run now — the
    running row is removed first; ``"recovered"``: its writes are on disk, so they are
    recorded from the bytes before and after, exactly once; ``"unknown"``: a call with
    effects we cannot observe (shell, network, publish) is never repeated, and the model
    is told its outcome is unknown.
    """
    definition = ToolDefinition.objects.filter(name=record.tool).first()
    if definition is None or side_effect(definition) == "none":
        record.delete()
        return "rerun"
    images = record.pre_images or {}
    if not recoverable(definition) or not images or "too-large" in images.values():
        record.status, record.finished_at = "error", timezone.now()
        record.error = (
            "The worker stopped during this call; its outcome is unknown, so it was not repeated."
        )
        record.output = {"ok": False, "error": record.error, "interrupted": True}
        record.save()
        return "unknown"
    drafts = record.workspace.drafts_path / str(record.run_id)
    changed: list[tuple[str, bytes | None, bytes | None]] = []
    for key, before in images.items():
        area, path = key.split(":", 1)
        base = record.workspace.root_path if area == "workspace" else drafts
        now = image(base / path)
        if now != before and area == "workspace":
            changed.append((path, image_decode(before), image_decode(now)))
        elif now != before:
            changed.append(("", None, None))  # a draft changed: the call ran
    if not changed:
        record.delete()
        return "rerun"
    writes = [
        {
            "path": path,
            "before": image_of(before),
            "after": image_of(after),
        }
        for path, before, after in changed
        if path
    ]
    if definition.implementation == "commitDraft" or record.tool == "commitDraft":
        for path, _, after in changed:
            draft = drafts / path
            if path and after is not None and image(draft) == image_of(after):
                draft.unlink()  # the commit wrote the file but died before removing its draft
    tool_call_record(
        record,
        {
            "ok": True,
            "path": record.path,
            "recovered": True,
            "summary": "The call had completed when its worker stopped; recovered from disk.",
            "writes": writes,
        },
    )
    return "recovered"
