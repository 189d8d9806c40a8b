"""The ``secret-redaction`` hook: secrets in a tool's output become ``[REDACTED:<kind>]``
before the model, the transcript or anyone else sees them.

It walks strings at any depth of dicts, lists and tuples; dict keys are kept, and a string
under a key that names a secret (``password``, ``client_secret``, ``GITHUB_TOKEN``) is
redacted whole. Known shapes are matched first, then generic assignments, then the admin's
own patterns, so a key inside ``api_key=sk-ant-...`` is reported as the Anthropic key it is.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .hooks import HookSettingsError, Replace

# Built-in kinds, in the order they are applied.
BUILTIN_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
        r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|[\s\S]*\Z)",
    ),
    ("anthropic_key", r"sk-ant-[A-Za-z0-9][A-Za-z0-9_-]{15,}"),
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("github_token", r"\bgithub_pat_[A-Za-z0-9_]{22,}|\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    ("slack_token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
)
# Names of settings that hold secrets (DB_PASSWORD, client_secret, api-key, GITHUB_TOKEN).
_SECRET_NAME: Final = r"(?:[A-Za-z0-9]+[_-])*(?:password|passwd|secret|api[_-]?key|token)"  # noqa: S105
# Generic assignments: the name and separator stay, the value goes. Quoted values with any
# spacing (password = "x", "token": "x"); bare values right after "=" (API_KEY=x in env
# files, ?token=x in URLs); YAML at the start of a line (password: x). Not source code's
# `token = get_token()`, which would break the files an agent reads before it edits them.
_NOT_DONE: Final = r"(?!\[REDACTED)"
ASSIGNMENTS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (
        re.compile(
            rf"(?i)(?P<head>\b{_SECRET_NAME}\b[\"']?\s*[:=]\s*(?P<q>[\"']))"
            rf"{_NOT_DONE}[^\"'\n]+(?P=q)"
        ),
        r"\g<head>[REDACTED:assignment]\g<q>",
    ),
    (
        re.compile(rf"(?i)(?P<head>\b{_SECRET_NAME}=){_NOT_DONE}[^\s\"'&,;()\[\]{{}}<>]{{3,}}"),
        r"\g<head>[REDACTED:assignment]",
    ),
    (
        re.compile(rf"(?im)(?P<head>^[ \t-]*{_SECRET_NAME}:[ \t]+){_NOT_DONE}[^\s\"'#]\S*"),
        r"\g<head>[REDACTED:assignment]",
    ),
)
SECRET_KEY: Final = re.compile(rf"(?i)^{_SECRET_NAME}$")
SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "patterns": {
            "type": "array",
            "description": "Extra regular expressions; each match is redacted.",
            "items": {
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["pattern"],
                        "properties": {
                            "kind": {"type": "string", "pattern": "^[a-z0-9_]{1,40}$"},
                            "pattern": {"type": "string", "minLength": 1},
                        },
                    },
                ]
            },
        },
        "fields": {
            "type": "array",
            "description": 'Event keys to redact; default ["output"].',
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
        },
    },
}
EXAMPLE: Final = {"patterns": [{"kind": "employee_id", "pattern": r"EMP-\d{6}"}]}


@dataclass(frozen=True)
class Redactor:
    patterns: tuple[tuple[str, re.Pattern[str]], ...]

    def redact(self, value: Any) -> tuple[Any, Counter[str]]:
        """``value`` with every secret replaced, and how many of each kind were."""
        counts: Counter[str] = Counter()
        return self._walk(value, counts, None), counts

    def _walk(self, value: Any, counts: Counter[str], key: str | None) -> Any:
        if isinstance(value, str):
            if key is not None and value and SECRET_KEY.match(key) and not _done(value):
                counts["assignment"] += 1
                return "[REDACTED:assignment]"
            return self._text(value, counts)
        if isinstance(value, Mapping):
            return {k: self._walk(v, counts, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self._walk(v, counts, None) for v in value)
        return value

    def _text(self, text: str, counts: Counter[str]) -> str:
        for kind, pattern in self.patterns:
            text, n = pattern.subn(f"[REDACTED:{kind}]", text)
            if n:
                counts[kind] += n
        for pattern, replacement in ASSIGNMENTS:
            text, n = pattern.subn(replacement, text)
            if n:
                counts["assignment"] += n
        return text


def _done(value: str) -> bool:
    return value.startswith("[REDACTED:") and value.endswith("]")


def redactor_build(extra: Sequence[Any] = ()) -> Redactor:
    """The built-in patterns and the admin's ``extra`` ones, compiled; a bad one is a
    :class:`HookSettingsError` naming it."""
    compiled = [(kind, re.compile(p)) for kind, p in BUILTIN_PATTERNS]
    for index, item in enumerate(extra):
        kind, source = (
            ("custom", item)
            if isinstance(item, str)
            else (item.get("kind", "custom"), item["pattern"])
        )
        try:
            pattern = re.compile(source)
        except re.error as error:
            raise HookSettingsError(
                f"patterns[{index}]: {source!r} is not a valid regular expression: {error}."
            ) from error
        if pattern.fullmatch(""):
            raise HookSettingsError(
                f"patterns[{index}]: {source!r} matches the empty text, so it would redact "
                "between every character; make it match at least one character."
            )
        compiled.append((kind, pattern))
    return Redactor(tuple(compiled))


DEFAULT_REDACTOR: Final = redactor_build()


def secret_redaction(settings: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], Any]:
    """Reads the event's ``output`` (or the configured ``fields``); returns
    ``Replace({"output": redacted}, details={"redacted": n, "kinds": {...}})`` when it found
    something, and ``None`` when it did not."""
    redactor = redactor_build(settings.get("patterns", ()))
    fields = tuple(settings.get("fields", ("output",)))

    def handler(event: Mapping[str, Any]) -> Replace | None:
        changes: dict[str, Any] = {}
        total: Counter[str] = Counter()
        for name in fields:
            if name in event:
                redacted, counts = redactor.redact(event[name])
                if counts.total():
                    changes[name] = redacted
                    total.update(counts)
        if not changes:
            return None
        kinds = dict(sorted(total.items()))
        return Replace(changes, details={"redacted": total.total(), "kinds": kinds})

    return handler
