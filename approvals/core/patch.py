"""Parsing, validating and applying an approver's (possibly edited) unified diff, pure.

Approvers review the diff a run's tool produced (``policies.core.diffs.file_diff``) and
may edit it before approving. Editors break hunk header counts as soon as a ``+`` line is
added or removed, so the counts are recomputed from each hunk's body; the content is what
matters, so every context and removed line must match the current file exactly (a hunk may
move up or down as a whole, nearest position first, like ``patch --fuzz=0``).

Lines the approver did not touch come out byte for byte: :func:`apply_patch` applies to
the text with ``"\\n"`` line ends and gives a file with ``"\\r\\n"`` ends (or no final
newline) back the same way. A file with other line separators ``str.splitlines()`` knows
(form feed, ``\\x85``, lone ``"\\r"``, ...) or mixed ends is not edited: the producer's diff
already split its lines differently from its bytes. ``"\\ No newline at end of file"``
markers are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# git's extended header lines carry nothing the producer relies on.
_IGNORED = ("diff ", "index ", "new file mode", "deleted file mode", "old mode", "new mode")
_BOUNDARY = ("--- ", "@@", "diff ", "Binary file")
MAX_OFFSET = 5000  # how far (in lines) a hunk may have moved from where its header says


class PatchError(ValueError):
    """A patch that cannot be parsed or does not apply; the message is for the approver."""


@dataclass(frozen=True)
class Hunk:
    """One hunk: where it starts in the old file (1-based) and its (op, text) body lines."""

    old_start: int
    lines: tuple[tuple[str, str], ...]

    @property
    def old_lines(self) -> list[str]:
        return [text for op, text in self.lines if op != "+"]

    @property
    def new_lines(self) -> list[str]:
        return [text for op, text in self.lines if op != "-"]


@dataclass(frozen=True)
class FilePatch:
    """The hunks for one file; a path is None for ``/dev/null`` (creation or deletion)."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


def _path(header: str) -> str | None:
    name = header.split("\t")[0]
    if name == "/dev/null":
        return None
    return name[2:] if name.startswith(("a/", "b/")) else name


def _quote(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _scan(text: str) -> Iterator[tuple[int, str, Any, str]]:
    """Tokenise a patch into (line number, kind, data, raw line), shared by parsing and rendering.

    Since counts are not trusted, a ``---``/``+++`` pair inside a hunk is a file header only
    once the header's old-side count is used up or when a hunk header follows it; otherwise
    it is a removed line that happens to start with ``--``.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    # Where each run of blank lines ends, found once: looking ahead from every blank line
    # of a long run would be quadratic.
    blank_end = list(range(len(lines) + 1))
    for k in range(len(lines) - 1, -1, -1):
        if lines[k] == "":
            blank_end[k] = blank_end[k + 1]
    in_hunk, remaining, i = False, 0, 0
    while i < len(lines):
        line, no = lines[i], i + 1
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        after = lines[i + 2] if i + 2 < len(lines) else ""
        i += 1
        header = line.startswith("--- ") and nxt.startswith("+++ ")
        if header and (not in_hunk or remaining <= 0 or after.startswith("@@")):
            in_hunk, i = False, i + 1
            yield no, "file", (_path(line[4:]), _path(nxt[4:])), line
            continue
        if line.startswith("@@"):
            if m := _HUNK.match(line):
                in_hunk, remaining = True, int(m[2] or 1)
                yield no, "hunk", tuple(int(g) if g else 1 for g in m.groups()), line
            else:
                in_hunk = False
                yield no, "junk", f"malformed hunk header {_quote(line)}", line
        elif line.startswith("Binary file"):
            in_hunk = False
            yield no, "binary", line[len("Binary file ") :].rpartition(": ")[0] or line, line
        elif line.startswith(_IGNORED):
            in_hunk = False
        elif in_hunk and line.startswith("\\"):
            continue
        elif in_hunk and line == "" and remaining <= 0:
            # Blank lines past the hunk's promised old lines, up to a boundary, are
            # textarea padding, not context.
            j = blank_end[i]
            if j < len(lines) and not lines[j].startswith(_BOUNDARY):
                remaining -= 1
                yield no, "body", (" ", ""), line
            else:
                i = j
        elif in_hunk and (line == "" or line[0] in " -+"):
            op = line[:1] or " "
            remaining -= op != "+"
            yield no, "body", (op, line[1:]), line
        elif in_hunk:
            yield no, "junk", f"unknown line prefix {line[0]!r} in {_quote(line)}", line
        elif line == "":
            continue  # blank lines between files: textarea padding
        elif line.startswith("--- "):
            yield no, "junk", f"{_quote(line)} is not followed by a '+++' line", line
        else:
            yield no, "junk", f"{_quote(line)} is neither a file header nor in a hunk", line


@dataclass
class _Building:
    old: str | None
    new: str | None
    hunks: list[tuple[int, list[tuple[str, str]]]] = field(default_factory=list)


def shows_a_change(diff: str) -> bool:
    """Whether a diff shows any change to see: a hunk, or a binary change described."""
    return any(line.startswith(("@@", "Binary file ")) for line in diff.splitlines())


def parse_patch(text: str) -> list[FilePatch]:
    """Parse a unified diff strictly: garbage is refused rather than guessed at."""
    files: list[_Building] = []
    for no, kind, data, _raw in _scan(text):
        if kind == "file":
            old, new = data
            if old is None and new is None:
                raise PatchError(f"patch line {no}: both sides of the header are /dev/null")
            if old is not None and new is not None and old != new:
                raise PatchError(f"patch line {no}: renaming {old} to {new} is not supported")
            files.append(_Building(old, new))
        elif kind == "hunk":
            if not files:
                raise PatchError(f"patch line {no}: a hunk before any '---'/'+++' file header")
            files[-1].hunks.append((data[0], []))
        elif kind == "body":
            files[-1].hunks[-1][1].append(data)
        elif kind == "binary":
            raise PatchError(f"{data}: binary files cannot be edited")
        else:
            raise PatchError(f"patch line {no}: {data}")
    if not files:
        raise PatchError("the patch is empty")
    result = []
    for b in files:
        patch = FilePatch(b.old, b.new, tuple(Hunk(s, tuple(body)) for s, body in b.hunks))
        if not patch.hunks:
            raise PatchError(f"{patch.path}: the patch has no hunks")
        for n, hunk in enumerate(patch.hunks, 1):
            if not hunk.lines:
                raise PatchError(f"{patch.path}, hunk {n}: the hunk is empty")
        result.append(patch)
    return result


def apply_file_patch(original: str, patch: FilePatch) -> str:
    """Apply one file's hunks in order to ``original``; "" when the patch deletes the file."""
    lines = original.splitlines()
    out: list[str] = []
    cursor = offset = 0  # cursor: first original line not yet copied
    prev_end = 0  # where the previous hunk ended, in the patch's own numbering
    for n, hunk in enumerate(patch.hunks, 1):
        where = f"{patch.path}, hunk {n}"
        old = hunk.old_lines
        start = max(hunk.old_start - 1 if old else hunk.old_start, 0)
        if start < prev_end:
            raise PatchError(f"{where}: overlaps the previous hunk or is out of order")
        prev_end = start + len(old)
        wanted = min(max(start + offset, cursor), len(lines))
        found = _find(lines, old, wanted, cursor)
        if found is None:  # Report the first difference where the hunk should have been.
            got = [*lines[wanted : wanted + len(old)], None]
            i = next(i for i, text in enumerate(old) if got[i] != text)
            seen = got[i]
            has = f"ends at line {len(lines)}" if seen is None else f"has {_quote(seen)}"
            raise PatchError(
                f"{where} (line {wanted + i + 1}): the patch expects {_quote(old[i])} "
                f"but the file {has}"
            )
        out += lines[cursor:found] + hunk.new_lines
        cursor, offset = found + len(old), found - start
    out += lines[cursor:]
    if patch.new_path is None:
        if out:
            raise PatchError(f"{patch.path}: the patch deletes the file but leaves lines in it")
        return ""
    return "\n".join(out) + "\n" if out else ""


def _find(lines: list[str], old: list[str], wanted: int, cursor: int) -> int | None:
    """Where ``old`` occurs nearest ``wanted`` (forward first on a tie), never before
    ``cursor`` nor further than MAX_OFFSET lines away: lazily, nearest first, so a hunk in
    place costs one comparison and a long file is not sorted per hunk."""
    last = len(lines) - len(old)
    for distance in range(MAX_OFFSET + 1):
        for at in (wanted + distance, wanted - distance) if distance else (wanted,):
            near = cursor <= at <= last and (not old or lines[at] == old[0])
            if near and lines[at : at + len(old)] == old:
                return at
        if wanted + distance > last and wanted - distance < cursor:
            break
    return None


# Characters str.splitlines() breaks lines at besides "\n" (and "\r\n", handled apart):
# an edit would silently turn each into a newline, so such a file is not edited.
_OTHER_BREAKS = frozenset("\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _normalised(path: str, text: str) -> tuple[str, bool, bool]:
    """The text with "\n" line ends, whether it used "\r\n", and whether it lacked a final
    newline — so that lines the approver did not touch come out byte for byte."""
    crlf = "\r\n" in text
    body = text.replace("\r\n", "\n") if crlf else text
    if crlf and body.count("\n") != text.count("\r\n"):
        raise PatchError(f"{path}: the file mixes \\r\\n and \\n line ends; it cannot be edited")
    if odd := _OTHER_BREAKS.intersection(body):
        shown = ", ".join(sorted(repr(ch) for ch in odd))
        raise PatchError(
            f"{path}: the file has line separators an edit would turn into newlines ({shown})"
        )
    return body, crlf, bool(body) and not body.endswith("\n")


def apply_patch(
    originals: Mapping[str, str | None], text: str, allowed_paths: Collection[str]
) -> dict[str, str | None]:
    """Parse, check and apply a patch to the files it may touch; path → new text or None.

    ``originals[path]`` is the current text, None (or missing) when the file does not exist.
    Nothing is written here: the caller writes only once every file has applied.
    """
    result: dict[str, str | None] = {}
    for patch in parse_patch(text):
        path = patch.path
        if path not in allowed_paths:
            allowed = ", ".join(sorted(allowed_paths)) or "no files"
            raise PatchError(f"{path}: the patch may only change {allowed}")
        if path in result:
            raise PatchError(f"{path}: the patch changes this file more than once")
        current = originals.get(path)
        if current is None and patch.old_path is not None:
            raise PatchError(f"{path}: the file does not exist, so the patch must create it")
        if current is not None and patch.old_path is None:
            raise PatchError(f"{path}: the patch creates the file but it already exists")
        body, crlf, unterminated = _normalised(path, current or "")
        new = apply_file_patch(body, patch)
        if unterminated and new.endswith("\n"):
            new = new[:-1]
        result[path] = (
            None if patch.new_path is None else (new.replace("\n", "\r\n") if crlf else new)
        )
    return result


RowKind = Literal["hunk", "context", "change", "add", "del"]


@dataclass(frozen=True)
class InlineRow:
    """One line of the inline view; a number is None where the line has no such side."""

    kind: Literal["hunk", "context", "add", "del"]
    old_no: int | None
    new_no: int | None
    text: str
    hunk: int = 0  # the hunk it belongs to, from 1 in its file (0: before any)


@dataclass(frozen=True)
class SideRow:
    """One line of the side-by-side view: old on the left, new on the right."""

    kind: RowKind
    left_no: int | None
    left_text: str | None
    right_no: int | None
    right_text: str | None
    hunk: int = 0


@dataclass
class DiffFile:
    """One file's rows; a binary file has only its description line to show."""

    path: str
    binary: bool
    inline: list[InlineRow] = field(default_factory=list)
    side: list[SideRow] = field(default_factory=list)


def diff_rows(text: str) -> list[DiffFile]:
    """Rows for an inline and a side-by-side view; never raises: odd lines become context.
    Each row names its hunk, numbered in its file as :func:`parse_patch` numbers them."""
    files: list[DiffFile] = []
    dels: list[tuple[int, str]] = []
    adds: list[tuple[int, str]] = []
    old_no = new_no = 1
    hunk = 0

    def current() -> DiffFile:
        if not files or files[-1].binary:
            files.append(DiffFile("", False))
        return files[-1]

    def inline(kind: Any, old: int | None, new: int | None, body: str) -> None:
        current().inline.append(InlineRow(kind, old, new, body, hunk))

    def side(kind: RowKind, left: Any, left_text: Any, right: Any, right_text: Any) -> None:
        current().side.append(SideRow(kind, left, left_text, right, right_text, hunk))

    def flush() -> None:
        for i in range(max(len(dels), len(adds))):
            d, a = dels[i] if i < len(dels) else None, adds[i] if i < len(adds) else None
            kind: RowKind = "change" if d and a else "del" if d else "add"
            side(kind, *(d or (None, None)), *(a or (None, None)))
        dels.clear()
        adds.clear()

    for _no, kind, data, raw in _scan(text):
        op, body = data if kind == "body" else ("", raw)
        if op != "+" and (op != "-" or adds):
            flush()
        if kind == "file":
            old, new = data
            files.append(DiffFile(new or old or "", False))
            hunk = 0
        elif kind == "binary":
            files.append(DiffFile(str(data), True, [InlineRow("context", None, None, raw)]))
            files[-1].side.append(SideRow("context", None, raw, None, raw))
            hunk = 0
        elif kind == "hunk":
            o_start, o_len, n_start, n_len = data
            old_no, new_no = o_start + (not o_len), n_start + (not n_len)
            hunk = hunk + 1 if files and not files[-1].binary else 1
            inline("hunk", None, None, raw)
            side("hunk", None, raw, None, raw)
        elif op == "-":
            inline("del", old_no, None, body)
            dels.append((old_no, body))
            old_no += 1
        elif op == "+":
            inline("add", None, new_no, body)
            adds.append((new_no, body))
            new_no += 1
        elif op == " ":
            inline("context", old_no, new_no, body)
            side("context", old_no, body, new_no, body)
            old_no, new_no = old_no + 1, new_no + 1
        else:
            inline("context", None, None, raw)
            side("context", None, raw, None, raw)
    flush()
    return files
