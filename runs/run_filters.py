"""The runs list's filters: the runs behind a dashboard figure, exactly (SPEC O6, issue 7).

A retrospective bar counts the runs of rollup cells: runs that finished in some UTC days,
by outcome, failure kind, model, tool, approval or verification result. Each filter here
selects the same runs with the same boundaries (``runs.observability.rollups.day_bounds``)
and the same groupings (a tool "error" is an error or a timeout; a failure of no known kind is
"other"), so following a chart's link gives a list whose total is the chart's number.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from typing import Any
from urllib.parse import urlencode

from django.db.models import Exists, OuterRef, Q

from approvals.models import ApprovalRequest
from policies.models import Agent, EvalTraffic, Workspace

from .core import status as run_status
from .core.failures import LABELS as FAILURE_LABELS
from .core.failures import OTHER
from .models import ModelCall, ToolCall
from .observability.core import rollup
from .observability.rollups import day_bounds
from .refusals import runs_refused
from .run_search import BadSearch, runs_searched, search_words

# In the order they appear in a list's address (and its pager's links).
FIELDS = (
    "status",
    "agent",
    "workspace",
    "requester",
    "finished",
    "finished_from",
    "finished_to",
    "failure_kind",
    "model",
    "tool",
    "tool_status",
    "approval",
    "verification",
    "evals",
    "refused",
    "q",
)
# The filters the list's form shows as selects; the others ride along as hidden fields.
SELECTS = ("status", "agent", "workspace", "requester", "evals")
# What the form shows: its selects and the search box.
SHOWN = (*SELECTS, "q")
# The eval set's runs: left out unless asked for (or an eval agent or workspace is named).
EVALS = ("include", "only")
DAY_FIELDS = ("finished", "finished_from", "finished_to")
# The rollups count timeouts among a tool's errors (runs.observability.core.rollup.ERROR_STATUSES).
TOOL_STATUSES: dict[str, tuple[str, ...]] = {
    "ok": ("ok",),
    "error": tuple(sorted(rollup.ERROR_STATUSES)),
    "timeout": ("timeout",),
    "refused": ("refused",),
    "running": ("running",),
}
APPROVALS = ("decided",)
REFUSED = ("1",)
VERIFICATIONS = ("pass", "fail")
MAX_NAME = 200
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


class BadFilter(ValueError):
    """A filter value the list cannot honour; the message says which and what is allowed."""


def run_filters_read(params: Mapping[str, Any]) -> dict[str, str]:
    """Every filter of the address, stripped; absent ones are empty strings."""
    return {name: str(params.get(name, "") or "").strip() for name in FIELDS}


def _day(filters: Mapping[str, str], name: str) -> date | None:
    text = filters.get(name, "")
    if not text:
        return None
    try:
        if not _DAY.fullmatch(text):
            raise ValueError(text)
        return date.fromisoformat(text)
    except ValueError:
        raise BadFilter(f"{name} must be a day written YYYY-MM-DD, not {text!r}.") from None


def _one_of(filters: Mapping[str, str], name: str, allowed: Any, what: str) -> None:
    value = filters.get(name, "")
    if value and value not in allowed:
        choices = ", ".join(sorted(allowed))
        raise BadFilter(f"Unknown {what} {value!r}; use one of: {choices}.")


def run_filters_check(filters: Mapping[str, str]) -> dict[str, date]:
    """Raise :class:`BadFilter` for the first bad value; return the parsed days."""
    status = filters.get("status", "")
    if status and status not in run_status.SHOWN_STATUSES:
        choices = ", ".join(run_status.SHOWN_STATUSES)
        raise BadFilter(f"Unknown status {status!r}; one of: {choices}.")
    days = {name: day for name in DAY_FIELDS if (day := _day(filters, name)) is not None}
    first, last = days.get("finished_from"), days.get("finished_to")
    if first and last and first > last:
        raise BadFilter(f"finished_from ({first}) is after finished_to ({last}).")
    _one_of(filters, "failure_kind", FAILURE_LABELS, "failure kind")
    _one_of(filters, "tool_status", TOOL_STATUSES, "tool status")
    if filters.get("tool_status") and not filters.get("tool"):
        raise BadFilter("tool_status needs a tool: say which tool's calls to look at.")
    _one_of(filters, "approval", APPROVALS, "approval filter")
    _one_of(filters, "verification", VERIFICATIONS, "verification result")
    _one_of(filters, "evals", EVALS, "evals choice")
    _one_of(filters, "refused", REFUSED, "refused filter")
    if query := filters.get("q"):
        try:
            search_words(query)
        except BadSearch as error:
            raise BadFilter(str(error)) from None
    for name in ("agent", "workspace", "requester", "model", "tool"):
        if len(filters.get(name, "")) > MAX_NAME:
            raise BadFilter(f"{name} is too long to be a name ({MAX_NAME} characters at most).")
    _known(filters)
    return days


def _known(filters: Mapping[str, str]) -> None:
    """An agent, workspace or requester that does not exist is a mistake in the address,
    not an empty result (as the retrospective says too)."""
    from django.contrib.auth import get_user_model

    for name, rows, field in (
        ("agent", Agent.objects, "slug"),
        ("workspace", Workspace.objects, "slug"),
        ("requester", get_user_model().objects, "username"),
    ):
        value = filters.get(name, "")
        if value and not rows.filter(**{field: value}).exists():
            raise BadFilter(f"Unknown {name} {value!r}.")


def status_matching(status: str) -> Q:
    """Runs shown with ``status`` (``run_status.SHOWN_STATUSES``): a cancelled run is stored
    as failed, of the failure kind cancelled, and listed as cancelled, never as failed."""
    cancelled = Q(status=run_status.FAILED, failure_kind=run_status.CANCELLED_KIND)
    if status == run_status.SHOWN_CANCELLED:
        return cancelled
    if status == run_status.FAILED:
        return Q(status=run_status.FAILED) & ~cancelled
    return Q(status=status)


def runs_filtered(runs: EvalTraffic, filters: Mapping[str, str]) -> EvalTraffic:
    """``runs`` narrowed by checked ``filters``. Child rows are matched with EXISTS, so a
    run with three calls of a model is listed (and counted) once."""
    days = run_filters_check(filters)
    exact = {"agent": "agent__slug", "workspace": "workspace__slug"}
    exact |= {"requester": "requester__username", "verification": "verification__result"}
    runs = runs.filter(**{f: filters[name] for name, f in exact.items() if filters.get(name)})
    if status := filters.get("status"):
        runs = runs.filter(status_matching(status))
    if filters.get("evals") == "only":
        runs = runs.of_evals()
    elif filters.get("evals") != "include" and not (
        filters.get("agent") or filters.get("workspace")
    ):
        # Named by agent or workspace, a list holds just what was named, eval set or not.
        runs = runs.without_evals()
    if day := days.get("finished"):
        start, end = day_bounds(day)
        runs = runs.filter(finished_at__gte=start, finished_at__lt=end)
    if first := days.get("finished_from"):
        runs = runs.filter(finished_at__gte=day_bounds(first)[0])
    if last := days.get("finished_to"):
        runs = runs.filter(finished_at__lt=day_bounds(last)[1])
    if kind := filters.get("failure_kind"):
        # The rollups count a failure of no recorded kind as "other".
        kinds = Q(failure_kind=kind) | (Q(failure_kind="") if kind == OTHER else Q())
        runs = runs.filter(kinds, status=run_status.FAILED)
    if model := filters.get("model"):
        runs = runs.filter(Exists(ModelCall.objects.filter(run=OuterRef("pk"), model=model)))
    if tool := filters.get("tool"):
        calls = ToolCall.objects.filter(run=OuterRef("pk"), tool=tool)
        if tool_status := filters.get("tool_status"):
            calls = calls.filter(status__in=TOOL_STATUSES[tool_status])
        runs = runs.filter(Exists(calls))
    if filters.get("approval") == "decided":
        # As the approval latency counts them: decided by a person, with a moment.
        decided = ApprovalRequest.objects.filter(
            run=OuterRef("pk"), status__in=rollup.HUMAN_DECIDED, decided_at__isnull=False
        )
        runs = runs.filter(Exists(decided))
    if filters.get("refused"):
        runs = runs_refused(runs)
    if query := filters.get("q"):
        runs = runs_searched(runs, query)
    return runs


def run_filters_query(filters: Mapping[str, str]) -> str:
    """The filters as an address query, for the pager's links and the form's round trip."""
    return urlencode([(name, filters[name]) for name in FIELDS if filters.get(name)])


def run_filters_described(filters: Mapping[str, str]) -> list[str]:
    """The filters the form does not show, in words, so a list opened from a chart says
    which runs it holds."""
    said = []
    if filters.get("finished"):
        said.append(f"finished on {filters['finished']} (UTC)")
    first, last = filters.get("finished_from"), filters.get("finished_to")
    if first and last:
        said.append(f"finished from {first} to {last} (UTC)")
    elif first:
        said.append(f"finished on or after {first} (UTC)")
    elif last:
        said.append(f"finished on or before {last} (UTC)")
    if kind := filters.get("failure_kind"):
        said.append(f"failed ({FAILURE_LABELS.get(kind, kind)})")
    if filters.get("model"):
        said.append(f"called the model {filters['model']}")
    if filters.get("tool"):
        how = {"error": " with an error or a timeout", "": ""}.get(
            filters.get("tool_status", ""), f" with status {filters.get('tool_status')}"
        )
        said.append(f"called the tool {filters['tool']}{how}")
    if filters.get("approval") == "decided":
        said.append("had an approval decided by a person")
    if verification := filters.get("verification"):
        said.append("passed verification" if verification == "pass" else "failed verification")
    if filters.get("refused"):
        said.append("had an action refused by the harness")
    return said
