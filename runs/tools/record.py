"""Recording what a tool call did (SPEC T4, T7, P6, R8): its status and output as the model
may see it (at most MAX_RESULT_CHARS: a longer result is cut with a marker and kept whole
as an artifact), and every write with its before and after bytes, its diff and its
rollback."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from django.db import transaction
from django.utils import timezone

from policies.core.diffs import file_diff
from policies.core.instructions import INSTRUCTION_FILE
from policies.instruction_cache import instructions_invalidate
from policies.models import Workspace

from ..models import Artifact, ToolCall, WriteRecord

Insert = Callable[[Any], None]  # a new row, for the caller's transaction to insert
MAX_RESULT_CHARS = 16_000
TIMING_FIELDS = ("elapsed_ms",)  # measured by the harness, never shown to the model
TRUNCATED = "\n[... truncated: the full output is artifact {artifact} ...]"


def clean(value: Any) -> Any:
    """NUL cannot be stored in PostgreSQL text or JSON: replace it, everywhere."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [clean(item) for item in value]
    if isinstance(value, dict):
        return {clean(key): clean(item) for key, item in value.items()}
    return value


def _truncate(output: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The output as the model may see it, and the full text when it had to be cut.

    Long strings are cut and long lists shortened, largest first, until the whole fits.
    The call's timing is measured apart (the model never sees it), so whether a result is
    cut does not depend on how long the tool took.
    """
    timing = {k: output[k] for k in TIMING_FIELDS if k in output}
    output = {k: v for k, v in output.items() if k not in timing}
    full = json.dumps(output, ensure_ascii=False)
    if len(full) <= MAX_RESULT_CHARS:
        return {**output, **timing}, None
    shown = dict(output)
    budget = MAX_RESULT_CHARS // 2
    for key in sorted(shown, key=lambda k: -len(json.dumps(shown[k], ensure_ascii=False))):
        if len(json.dumps(shown, ensure_ascii=False)) <= MAX_RESULT_CHARS:
            break
        value = shown[key]
        if isinstance(value, str) and len(value) > 200:
            shown[key] = value[:budget]
        elif isinstance(value, list) and len(value) > 1:
            kept: list[Any] = []
            for item in value:
                if len(json.dumps([*kept, item], ensure_ascii=False)) > budget:
                    break
                kept.append(item)
            shown[key] = kept
        budget = max(200, budget // 2)
    return {**shown, **timing}, full


def tool_reply_transformed(
    reply: dict[str, Any], transform: Callable[[dict[str, Any]], dict[str, Any]] | None
) -> dict[str, Any]:
    """The reply as the post_tool_use hooks rewrite it (a redacted secret reaches neither
    the model, the page nor an artifact), before any transaction: a hook may call out. The
    bytes a call wrote and its effects are the files' own, not output: the hooks see neither."""
    kept: dict[str, Any] = {k: reply.pop(k) for k in ("writes", "effects") if k in reply}
    reply = clean(reply)
    if transform is not None:
        reply = transform(reply)
    return {**reply, **kept}


def tool_call_record(
    record: ToolCall, reply: dict[str, Any], insert: Insert | None = None
) -> ToolCall:
    """Store the call's status, its output as the model may see it and its writes; call
    with the reply already transformed (:func:`tool_reply_transformed`). ``insert``: a new
    record and its rows are handed to it instead of saved (a checkpoint that inserts them
    with the rest of its step, in its transaction)."""
    writes = reply.pop("writes", [])
    reply = clean(reply)
    record.status = "ok" if reply.get("ok") else ("timeout" if reply.get("timed_out") else "error")
    record.error = "" if reply.get("ok") else str(reply.get("error", "failed"))
    shown, full = _truncate(reply)
    record.finished_at = timezone.now()
    if insert is not None:
        assert record._state.adding, "only a new record is inserted with its checkpoint"
    put = insert or _saved
    with transaction.atomic() if insert is None else nullcontext():
        record.output = shown
        put(record)
        if full is not None:
            artifact = Artifact(
                tool_call=record,
                content=full,
                size=len(full.encode()),
                sha256=hashlib.sha256(full.encode()).hexdigest(),
            )
            put(artifact)
            marker = TRUNCATED.format(artifact=artifact.pk)
            for key in ("content", "diff", "stderr"):
                if isinstance(shown.get(key), str) and len(shown[key]) < len(str(reply[key])):
                    shown[key] += marker
            shown["artifact_id"] = str(artifact.pk)
            shown.setdefault("warnings", []).append(
                f"The output was truncated; the full output is artifact {artifact.pk}."
            )
            record.output = shown
            if insert is None:  # else the record is inserted later, as it is now
                record.save(update_fields=["output"])
        record.written_paths = [write["path"] for write in writes]
        for order, write in enumerate(writes):
            before = base64.b64decode(write["before"]) if write["before"] is not None else None
            after = base64.b64decode(write["after"]) if write["after"] is not None else None
            written = WriteRecord(
                tool_call=record,
                order=order,
                path=write["path"],
                before=before,
                after=after,
                diff=file_diff(before, after, write["path"]),  # describes binary content
                rollback={"action": "restore_before", "path": write["path"]},
            )
            put(written)
    return record


def _saved(row: Any) -> None:
    row.save()


def instructions_after_writes(record: ToolCall, workspace: Workspace) -> None:
    """An AGENTS.md written through the console drops the cached instructions (SPEC C6)."""
    written = getattr(record, "written_paths", None)
    if written is None:
        written = [w.path for w in record.writes.all()]
    if any(path.rsplit("/", 1)[-1] == INSTRUCTION_FILE for path in written):
        instructions_invalidate(root=workspace.root)


def tool_output(record: ToolCall) -> dict[str, Any]:
    """The shape of SPEC T4: {ok, artifact_id, summary, path, diff, warnings} and the rest."""
    output = {
        "ok": record.status == "ok",
        "artifact_id": None,
        "summary": "",
        "path": record.path or None,
        "diff": None,
        "warnings": [],
        **{k: v for k, v in record.output.items() if k not in TIMING_FIELDS},
    }
    if record.status != "ok":
        output["ok"] = False
        output["error"] = record.error
    output["decision"], output["rule"] = record.decision, record.rule or None
    output["tool_call_id"] = str(record.pk)
    return output
