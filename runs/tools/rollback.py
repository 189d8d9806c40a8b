"""Undoing writes (SPEC R8): the exact bytes from before, all or nothing, and never over a
change the call did not make."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone

from policies.core.paths import PathRefused
from policies.models import Workspace
from policies.paths import resolve_in_workspace

from ..models import ToolCall, WriteRecord


class RollbackRefused(Exception):
    """A rollback that would destroy a later change; nothing was rolled back."""


def tool_call_rollback(*, tool_call: ToolCall) -> list[str]:
    """Restore the exact bytes from before the call's writes, newest write first."""
    records = list(tool_call.writes.filter(rolled_back_at__isnull=True).order_by("-order"))
    if not records:
        raise RollbackRefused("This call has no writes left to roll back.")
    with transaction.atomic():
        return writes_restore(records=records, workspace=tool_call.workspace, who="this call")


def writes_restore(*, records: Sequence[WriteRecord], workspace: Workspace, who: str) -> list[str]:
    """Put back the before bytes of ``records`` (in the order given), all or nothing.

    Every file must still hold what was written; if any changed since, or now leads outside
    the workspace, nothing is restored (a rollback never destroys work it did not make).
    Call inside a transaction, so the marks roll back with a failure.
    """
    targets = []
    for record in records:
        try:
            target = resolve_in_workspace(workspace.root, record.path).absolute
        except PathRefused as error:
            raise RollbackRefused(f"{record.path} cannot be restored: {error}") from None
        current = target.read_bytes() if target.is_file() else None
        expected = bytes(record.after) if record.after is not None else None
        if current != expected:
            raise RollbackRefused(
                f"{record.path} changed since {who} wrote it; nothing was rolled back."
            )
        targets.append((record, target))
    for record, target in targets:
        if record.before is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(bytes(record.before))
        WriteRecord.objects.filter(pk=record.pk).update(rolled_back_at=timezone.now())
    return [record.path for record, _ in targets]
