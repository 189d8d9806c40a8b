"""The agent's answer as Markdown (issue 19): tables, code and links rendered, and nothing
the model wrote able to run in the page.

markdown-it-py renders CommonMark with tables and strikethrough, with raw HTML off (an
answer's ``<script>`` stays text) and its own link check (``javascript:``, ``vbscript:``,
``file:`` and ``data:`` other than images are not made links). nh3 (the Rust ``ammonia``
sanitiser) then keeps only the tags and attributes rendering makes (no images) and only
http, https and mailto URLs, and marks every link ``noopener noreferrer``: two well-kept libraries,
the second a backstop should the first ever let something through.
"""

from __future__ import annotations

from typing import Final

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

_MARKDOWN: Final = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["table", "strikethrough"]
)
TAGS: Final = frozenset(
    {
        "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote",
        "ul", "ol", "li", "strong", "em", "del", "s", "code", "pre",
        "table", "thead", "tbody", "tr", "th", "td", "a",
    }
)  # fmt: skip
# No images: an image the model names would be fetched by every reader's browser, a way
# to send what it read to any server (prompt-injection exfiltration); no style attributes,
# which the page's CSP refuses anyway.
ATTRIBUTES: Final = {"a": {"href", "title"}, "ol": {"start"}, "code": {"class"}}
SCHEMES: Final = frozenset({"http", "https", "mailto"})
MAX_CHARS: Final = 200_000  # a longer answer is shown as its source only


def answer_html(text: str) -> SafeString | None:
    """The answer rendered and sanitised; None when there is nothing to render or it is
    too long to render in a page request."""
    if not text or len(text) > MAX_CHARS:
        return None
    rendered = _MARKDOWN.render(text)
    clean = nh3.clean(
        rendered,
        tags=set(TAGS),
        attributes={tag: set(names) for tag, names in ATTRIBUTES.items()},
        url_schemes=set(SCHEMES),
        link_rel="noopener noreferrer",
    )
    return mark_safe(clean)  # noqa: S308 -- sanitised by nh3 just above
