"""A file-writing tool's effects, computed in its child process, applied by the worker (SPEC
R9, T5): the one door through which a tool's output reaches the drafts or the workspace.

The child never writes. It describes each change (:func:`effect_write`, :func:`effect_remove`,
:func:`effect_move`) and returns the list with its reply; the worker applies it
(:func:`effects_apply`) inside the same transaction that records the call and checks the
run's fencing token. So a worker that lost its lease (frozen past its expiry while its tool
ran, then woken after another worker re-ran the call) cannot change a file: its fence fails
and its effects are dropped, and a recovering worker that finds the call's files unchanged
may run it again safely. Writing local regular files under the transaction is bounded work;
anything that could block (a FIFO, a device, a link put in a file's place) is refused before
the first byte changes.
"""

from __future__ import annotations

import base64
import os
import secrets
import stat
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from policies.core.paths import PathRefused
from policies.paths import resolve_in_workspace

Area = Literal["drafts", "workspace"]
AREAS: tuple[Area, ...] = ("drafts", "workspace")

EFFECTS: ContextVar[list[dict[str, Any]] | None] = ContextVar("effects", default=None)


class EffectRefused(Exception):
    """An effect that cannot be applied as described; nothing of the call was applied."""


# --- in the child: describing ----------------------------------------------------------------
def effects_collect() -> list[dict[str, Any]]:
    """Start collecting this call's effects (the child does, before the tool runs)."""
    collected: list[dict[str, Any]] = []
    EFFECTS.set(collected)
    return collected


def _add(effect: dict[str, Any]) -> None:
    collected = EFFECTS.get()
    if collected is None:
        raise RuntimeError("A tool wrote outside a tool call: effects are not being collected.")
    collected.append(effect)


def effect_write(area: Area, relative: str, data: bytes) -> None:
    _add({"op": "write", "area": area, "path": relative, "data": base64.b64encode(data).decode()})


def effect_remove(area: Area, relative: str) -> None:
    _add({"op": "remove", "area": area, "path": relative})


def effect_move(area: Area, relative: str, to: str) -> None:
    _add({"op": "move", "area": area, "path": relative, "to": to})


# --- in the worker: applying -----------------------------------------------------------------
@dataclass(frozen=True)
class _Planned:
    op: str
    target: Path
    relative: str
    data: bytes | None = None
    to: Path | None = None


def effects_applied(reply: dict[str, Any], *, may_write: bool, root: Path, drafts: Path) -> dict:
    """The reply as it is recorded, once its effects are applied (or refused: then none is,
    and the call is an error that says why). A tool that may not write never does."""
    effects = reply.pop("effects", None)
    if not effects:
        return reply
    if not may_write:
        return _failed(reply, "This tool may not change files; its changes were dropped.")
    try:
        effects_apply(effects, root=root, drafts=drafts)
    except EffectRefused as error:
        return _failed(reply, f"Its changes were not applied: {error}")
    except OSError as error:  # the disk failed mid-way: say what was and was not done
        applied = getattr(error, "applied", [])
        reply = _failed(reply, f"Its changes failed part-way ({error.strerror or error}).")
        reply["writes"] = [
            w for w in reply.get("writes", []) if f"workspace:{w['path']}" in applied
        ]
        reply["applied"] = applied
    return reply


def _failed(reply: dict[str, Any], error: str) -> dict[str, Any]:
    kept = {k: v for k, v in reply.items() if k not in ("writes", "diff", "artifact_id")}
    return {**kept, "ok": False, "error": error, "retryable": False, "writes": []}


def effects_apply(effects: Any, *, root: Path, drafts: Path) -> list[str]:
    """Apply a call's effects, each checked first; the paths changed, "area:path".

    1. Every effect is parsed and its paths resolved again (links followed, inside its
       area); a file it changes must be a regular file (or absent, for a write).
    2. Only then are they applied in order: a write through a new file renamed into place
       (a crash leaves the old bytes or the new, never half), never through a link.

    Call inside the fenced transaction that records the call.
    """
    if not effects:
        return []
    if not isinstance(effects, list):
        raise EffectRefused("The tool's effects are not a list.")
    planned = [_plan(effect, root=root, drafts=drafts) for effect in effects]
    changed: list[str] = []
    for item in planned:
        try:
            _perform(item)
        except OSError as error:
            error.applied = changed  # type: ignore[attr-defined]
            raise
        changed.append(item.relative)
    return changed


def _plan(effect: Any, *, root: Path, drafts: Path) -> _Planned:
    if not isinstance(effect, dict) or effect.get("area") not in AREAS:
        raise EffectRefused(f"Not an effect: {str(effect)[:200]}")
    area, op = effect["area"], effect.get("op")
    base = root if area == "workspace" else drafts
    target = _resolve(base, effect.get("path"), area)
    label = f"{area}:{effect['path']}"
    if op == "write":
        try:
            data = base64.b64decode(str(effect.get("data", "")), validate=True)
        except ValueError:
            raise EffectRefused(f"{label}: the bytes to write are not base64.") from None
        _regular_or_absent(target, label)
        return _Planned("write", target, label, data=data)
    if op == "remove":
        _regular(target, label)
        return _Planned("remove", target, label)
    if op == "move":
        _regular(target, label)
        to = _resolve(base, effect.get("to"), area)
        if os.path.lexists(to):
            raise EffectRefused(
                f"{area}:{effect.get('to')} exists already; a move never overwrites."
            )
        return _Planned("move", target, label, to=to)
    raise EffectRefused(f"{label}: unknown effect {op!r}.")


def _resolve(base: Path, relative: Any, area: str) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    try:
        resolved = resolve_in_workspace(base, relative)
    except PathRefused as error:
        raise EffectRefused(f"{area}:{relative}: {error}") from None
    if resolved.relative != relative:  # a link swapped in since the tool resolved it
        raise EffectRefused(f"{area}:{relative} now leads to {resolved.relative}; nothing done.")
    return resolved.absolute


def _regular_or_absent(path: Path, label: str) -> None:
    if os.path.lexists(path):
        _regular(path, label)


def _regular(path: Path, label: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise EffectRefused(f"{label} does not exist.") from None
    if not stat.S_ISREG(mode):
        raise EffectRefused(f"{label} is not a regular file; it is left as it is.")


def _perform(item: _Planned) -> None:
    if item.op == "remove":
        item.target.unlink()
    elif item.op == "move":
        assert item.to is not None
        item.to.parent.mkdir(parents=True, exist_ok=True)
        os.rename(item.target, item.to)
    else:
        assert item.data is not None
        _write_replacing(item.target, item.data)


def _write_replacing(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(os.lstat(target).st_mode) if target.exists() else 0o644
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.harness-write")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
