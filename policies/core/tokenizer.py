"""Token counting for budgets (SPEC C4).

The default is an estimate, ``ceil(utf8_bytes / 4)``, and says so: every count it produces is
marked ``estimated``. An exact counter replaces it through the ``HARNESS_TOKENIZER`` setting
without touching the assembler, by providing the same three methods.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """What the assembler needs from a token counter.

    ``size`` is an additive measure (``size(a + b) == size(a) + size(b)``, or close to it for
    an exact counter) so the assembler can drop units in linear time; ``tokens_for_size``
    turns a size into tokens; ``count`` is the authoritative count of a final text.
    """

    estimated: bool

    def count(self, text: str) -> int: ...

    def size(self, text: str) -> int: ...

    def tokens_for_size(self, size: int) -> int: ...


def utf8_length(text: str) -> int:
    """Bytes of ``text`` in UTF-8; O(1) for ASCII strings, which CPython flags as such."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class ByteEstimate:
    """``ceil(bytes / 4)``: the estimate of ADR 0006, honest about being one."""

    estimated = True
    bytes_per_token = 4
    # Lets the assembler take ``len`` of ASCII text as its size, and cut blobs by bytes.
    size_is_utf8_length = True

    def size(self, text: str) -> int:
        return utf8_length(text)

    def tokens_for_size(self, size: int) -> int:
        return -(-size // self.bytes_per_token)

    def count(self, text: str) -> int:
        return self.tokens_for_size(utf8_length(text))
