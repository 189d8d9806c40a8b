"""Risk levels: how urgent a person's attention is.

Intake assesses a request's risk (SPEC R2) and names it by one of these levels; approvals
sort, filter and notify by the same names. The levels live here, in the lower layer, so
that both read one list and approvals never need to import runs.
"""

from __future__ import annotations

from typing import Final, Literal

Level = Literal["low", "medium", "high", "critical"]

# (lowest score, level), in rising order: a score takes the last level it reaches.
LEVELS: Final[tuple[tuple[int, Level], ...]] = (
    (0, "low"),
    (2, "medium"),
    (5, "high"),
    (8, "critical"),
)
