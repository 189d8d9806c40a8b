"""runValidation's validators (SPEC T3), pluggable by file suffix: JSON and YAML
well-formedness, Markdown structure (closed code fences) and broken internal links."""

from __future__ import annotations

import contextlib
import json
import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from policies.core.paths import PathRefused
from policies.paths import resolve_in_workspace

from .common import (
    MAX_READ_BYTES,
    Output,
    ToolFailure,
    draft_path,
    read_bounded,
    resolve_at_use,
    utf8_text,
)

Problem = dict[str, Any]
Validator = Callable[[str, str, Path], list[Problem]]
VALIDATORS: dict[str, list[tuple[str, Validator]]] = {}


def register_validator(name: str, suffixes: tuple[str, ...]) -> Callable[[Validator], Validator]:
    """Add a validator for files ending in ``suffixes`` (the plug-in point)."""

    def add(function: Validator) -> Validator:
        for suffix in suffixes:
            VALIDATORS.setdefault(suffix, []).append((name, function))
        return function

    return add


@register_validator("json", (".json",))
def _json(text: str, path: str, root: Path) -> list[Problem]:
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return [{"line": error.lineno, "message": f"invalid JSON: {error.msg}"}]
    return []


@register_validator("yaml", (".yaml", ".yml"))
def _yaml(text: str, path: str, root: Path) -> list[Problem]:
    try:
        list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        return [{"line": line, "message": f"invalid YAML: {getattr(error, 'problem', error)}"}]
    return []


@register_validator("markdown", (".md", ".markdown"))
def _markdown(text: str, path: str, root: Path) -> list[Problem]:
    problems: list[Problem] = []
    fence: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        marker = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if marker:
            if fence is None:
                fence = (number, marker.group(1)[0])
            elif marker.group(1)[0] == fence[1]:
                fence = None
    if fence is not None:
        problems.append({"line": fence[0], "message": "a code fence is opened and never closed"})
    return problems


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@register_validator("links", (".md", ".markdown"))
def _links(text: str, path: str, root: Path) -> list[Problem]:
    """Relative links must lead to a file of the workspace; URLs and anchors are skipped."""
    problems: list[Problem] = []
    folder = Path(path).parent
    for number, line in enumerate(text.splitlines(), start=1):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue
            relative = target.split("#", 1)[0]
            if not relative:
                continue
            # A link is a URL: "../README.md" from docs/ is the root's README, resolved by
            # its text as a reader's browser does; only then is the file looked up (where a
            # path holding ".." is refused outright).
            joined = posixpath.normpath((folder / relative).as_posix())
            resolved = None
            if joined != ".." and not joined.startswith("../"):
                with contextlib.suppress(PathRefused):
                    resolved = resolve_in_workspace(root, joined)
            if resolved is None:
                problems.append(
                    {"line": number, "message": f"link {target} leads outside the workspace"}
                )
                continue
            if not resolved.absolute.exists():
                problems.append({"line": number, "message": f"broken link: {target}"})
    return problems


def run_validation(root: Path, drafts: Path, args: dict) -> Output:
    resolved = resolve_at_use(root, args, "path")
    which, data = "draft", read_bounded(draft_path(drafts, resolved.relative), MAX_READ_BYTES)
    if data is None:
        which, data = "file", read_bounded(resolved.absolute, MAX_READ_BYTES)
    if data is None:
        raise ToolFailure(f"{resolved.relative} has neither a draft nor a file to validate.")
    text = utf8_text(data, resolved.relative)
    validators = VALIDATORS.get(Path(resolved.relative).suffix.lower(), [])
    if not validators:
        raise ToolFailure(
            f"No validator knows {Path(resolved.relative).suffix or 'this'} files; "
            f"known: {', '.join(sorted(VALIDATORS))}."
        )
    problems = [
        {"validator": name, **problem}
        for name, validator in validators
        for problem in validator(text, resolved.relative, root)
    ]
    return {
        "ok": True,
        "path": resolved.relative,
        "valid": not problems,
        "problems": problems,
        "summary": f"The {which} of {resolved.relative}: "
        + ("valid." if not problems else f"{len(problems)} problem(s)."),
    }


def request_approval(root: Path, drafts: Path, args: dict) -> Output:
    """The model asks for a person; the call is recorded and the answer comes from the
    approval queue, never from the model."""
    return {
        "ok": True,
        "decision": "ask",
        "approval": "requested",
        "summary": f"Approval requested: {args['summary'][:500]}",
    }
