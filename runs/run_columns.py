"""The runs list's columns (issue 19): what tells five identical requests apart (a short
id, when each was created), what each cost and how it ended, and the flags a plain status
hides (refused actions, a failure's kind).

Every column is a field of the run or one subquery per page row (turns, refusals, a tool's
calls), so a page of fifty runs is one query, not fifty-one. A list opened from a chart
adds the columns that chart is about (``extra_columns``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from .models import ModelCall, Run, ToolCall
from .refusals import REFUSED

# The filters a chart's link carries, and the column it is about: a failure's reason, the
# cost (cost and tokens per day link by model), a tool's calls.
EXTRA_COLUMNS: tuple[tuple[str, str], ...] = (
    ("failure_kind", "failure"),
    ("model", "cost"),
    ("tool", "tool_calls"),
)


def extra_columns(filters: Mapping[str, str]) -> set[str]:
    """The columns the filters present add: a failed list shows why its runs failed."""
    shown = {column for name, column in EXTRA_COLUMNS if filters.get(name)}
    if filters.get("status") == "failed":
        shown.add("failure")
    return shown


def _counted(rows: QuerySet[Any]) -> Coalesce:
    counted = rows.order_by().values("run").annotate(n=Count("pk")).values("n")[:1]
    return Coalesce(Subquery(counted), 0)


def runs_with_columns(runs: QuerySet[Run], filters: Mapping[str, str]) -> QuerySet[Run]:
    """``runs`` with what the list's columns need: ``turns`` (model calls), ``refused``
    (refused actions) and, under a tool filter, ``tool_call_count`` and ``tool_last_status``
    (that tool's calls in the run and the latest one's status)."""
    # Refusals are counted among the run's calls (by the run's index), not looked up by
    # status: a status index would have the database read every refused call per row.
    per_run = ToolCall.objects.filter(run=OuterRef("pk")).order_by().values("run")
    refused = per_run.annotate(n=Count("pk", filter=Q(status=REFUSED))).values("n")[:1]
    runs = runs.select_related("agent", "workspace", "requester").annotate(
        turns=_counted(ModelCall.objects.filter(run=OuterRef("pk"))),
        refused=Coalesce(Subquery(refused), 0),
    )
    if tool := filters.get("tool"):
        calls = ToolCall.objects.filter(run=OuterRef("pk"), tool=tool)
        last = calls.order_by("-started_at").values("status")[:1]
        runs = runs.annotate(tool_call_count=_counted(calls), tool_last_status=Subquery(last))
    return runs
