"""Syntax-highlighted, template-ready rows of a diff (see ``approvals.core.patch.diff_rows``).

Every text goes through Pygments, whose HTML formatter escapes ``&``, ``<`` and ``>``, so the
template may mark the returned strings safe as element content (not as attribute values:
quotes are left as they are): a diff line is never inserted raw. Lines are highlighted one at a
time (a diff shows fragments, not whole files), which loses multi-line constructs such as
docstrings but can never misalign rows.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import PurePosixPath

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from approvals.core.patch import DiffFile

_FORMATTER = HtmlFormatter(nowrap=True)
_TEXT = TextLexer(stripnl=False)


@lru_cache(maxsize=256)
def _lexer_for(filename: str) -> Lexer:
    """The lexer for ``x.<extension>`` (or an extension-less name such as ``Makefile``), cached
    because Pygments' filename lookup scans every lexer's patterns."""
    try:
        return get_lexer_for_filename(filename, stripnl=False)
    except ClassNotFound:
        return _TEXT


def lexer_for(path: str) -> Lexer:
    name = PurePosixPath(path).name
    suffix = PurePosixPath(name).suffix
    return _lexer_for(f"x{suffix.lower()}" if suffix else name) if name else _TEXT


def _html(text: str | None, lexer: Lexer) -> str | None:
    if text is None:
        return None
    out = highlight(text, lexer, _FORMATTER)
    return out[:-1] if out.endswith("\n") else out


def highlight_rows(files: list[DiffFile]) -> list[dict]:
    """Template dicts for each file, its rows' text replaced by escaped, highlighted HTML."""
    result = []
    for f in files:
        lexer = _TEXT if f.binary else lexer_for(f.path)
        inline = [
            {
                "kind": r.kind,
                "old_no": r.old_no,
                "new_no": r.new_no,
                "html": _html(r.text, _TEXT if r.kind == "hunk" else lexer),
                "hunk": r.hunk,
            }
            for r in f.inline
        ]
        side = []
        for r in f.side:
            row_lexer = _TEXT if r.kind == "hunk" else lexer
            side.append(
                {
                    "kind": r.kind,
                    "left_no": r.left_no,
                    "left_html": _html(r.left_text, row_lexer),
                    "right_no": r.right_no,
                    "right_html": _html(r.right_text, row_lexer),
                    "hunk": r.hunk,
                }
            )
        result.append(
            {
                "path": f.path,
                "binary": f.binary,
                "language": lexer.name,
                "inline": inline,
                "side": side,
            }
        )
    return result


def hunk_marks(files: list[dict], rejected: set[str]) -> list[dict]:
    """Each row of ``files`` (from :func:`highlight_rows`) told its hunk's key, as the
    decision form names it (``<path>:<number>``), and whether that hunk is rejected."""
    for f in files:
        for row in (*f["inline"], *f["side"]):
            row["hunk_key"] = f"{f['path']}:{row['hunk']}" if row["hunk"] else ""
            row["rejected"] = row["hunk_key"] in rejected
    return files


def highlight_css() -> str:
    """The stylesheet for the highlighted rows, scoped to ``.hl`` containers."""
    return HtmlFormatter(style="default").get_style_defs(".hl")
