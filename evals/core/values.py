"""The strict readers of one JSON value of a case file (SPEC E1): an object of known keys, a
bounded text, a list of texts, a plain relative path. Each raises :class:`CaseError` naming
where the value was, so every part of the parser says a mistake the same way."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from .cases import CaseError


def checked_keys(value: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CaseError(f"{where} must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise CaseError(f"{where} has unknown keys: {', '.join(unknown)}")
    return value


def checked_text(value: Any, where: str, *, required: bool = True, limit: int = 20_000) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise CaseError(f"{where} must be a non-empty string")
    if len(value) > limit or "\x00" in value:
        raise CaseError(f"{where} must be at most {limit} characters, without NUL")
    return value


def checked_strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise CaseError(f"{where} must be a list of non-empty strings")
    return tuple(value)


def checked_path(path: Any, where: str) -> str:
    if not isinstance(path, str) or not path or "\x00" in path:
        raise CaseError(f"{where}: a fixture path must be a non-empty string")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or path != str(pure):
        raise CaseError(f"{where}: {path!r} must be a plain relative path inside the fixture")
    return path
