"""The approval pages' forms: the queue's and the history's filters, and a decision.

The filters parse query strings a person may have edited by hand: a value they cannot use
becomes a message, never a server error. The decision form only carries what was typed
back to the page; ``approval_decide`` is the authority on what is a valid decision.
"""

from __future__ import annotations

import datetime
from typing import Any

from django import forms

from policies.models import Agent, EvalTraffic

from .core.risk import LEVELS
from .models import ApprovalRequest
from .selectors import SORTS

RISKS = tuple(name for _threshold, name in LEVELS)
MAX_FILTER_CHARS = 150


class QueueFilterForm(forms.Form):
    """Risk, kind, agent and sort of the queue; an unknown value is ignored, and said so."""

    risk = forms.ChoiceField(choices=[("", "any"), *((r, r) for r in RISKS)], required=False)
    kind = forms.ChoiceField(choices=[("", "any"), *ApprovalRequest.Kind.choices], required=False)
    agent = forms.CharField(required=False, max_length=MAX_FILTER_CHARS)
    sort = forms.ChoiceField(choices=[(s, s) for s in SORTS], required=False)

    def __init__(self, data: Any, *, agent_slugs: list[str]) -> None:
        super().__init__(data)
        self.agent_slugs = agent_slugs

    def clean_agent(self) -> str:
        agent = self.cleaned_data["agent"].strip()
        if agent and agent not in self.agent_slugs:
            raise forms.ValidationError(f"No agent {agent!r}.")
        return agent

    def filters(self) -> dict[str, str]:
        """The values that can be used; each one that cannot is left out (see notices)."""
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        values = {name: cleaned.get(name) or "" for name in ("risk", "kind", "agent", "sort")}
        values["sort"] = values["sort"] or "oldest"
        return values

    def notices(self) -> list[str]:
        return [
            f"Unknown {name} filter value “{str(self.data.get(name, ''))[:MAX_FILTER_CHARS]}”: "
            "ignored."
            for name in self.errors
        ]


class HistoryFilterForm(forms.Form):
    """Status, decider, agent, kind and requested date range of decided requests."""

    status = forms.ChoiceField(
        choices=[("", "any decided"), *ApprovalRequest.Status.choices], required=False
    )
    decided_by = forms.CharField(required=False, max_length=MAX_FILTER_CHARS)
    agent = forms.CharField(required=False, max_length=MAX_FILTER_CHARS)
    kind = forms.ChoiceField(choices=[("", "any"), *ApprovalRequest.Kind.choices], required=False)
    date_from = forms.DateField(required=False, label="From")
    date_to = forms.DateField(required=False, label="To")

    def clean_agent(self) -> str:
        agent = self.cleaned_data["agent"].strip()
        if agent and not Agent.objects.filter(slug=agent).exists():
            raise forms.ValidationError(f"No agent {agent!r}.")
        return agent

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("date_from"), cleaned.get("date_to")
        if start and end and end < start:
            raise forms.ValidationError("The “to” date is before the “from” date.")
        return cleaned

    def messages(self) -> list[str]:
        """Each problem with the filters, naming the filter; those filters are ignored."""
        result = []
        for name, errors in self.errors.items():
            label = "Filters" if name == "__all__" else self.fields[name].label or name
            result.append(
                f"{str(label).replace('_', ' ').capitalize()}: {' '.join(str(e) for e in errors)}"
            )
        return result

    def apply(self, requests: EvalTraffic) -> EvalTraffic:
        """Narrow ``requests`` by every filter that is valid; without a status, pending
        requests are left out (they belong to the queue)."""
        self.is_valid()
        cleaned: dict[str, Any] = getattr(self, "cleaned_data", {})
        status = cleaned.get("status") or ""
        if status:
            requests = requests.filter(status=status)
        else:
            requests = requests.exclude(status=ApprovalRequest.Status.PENDING)
        if decided_by := (cleaned.get("decided_by") or "").strip():
            # Part of a name finds it: "apr" finds april-approver.
            requests = requests.filter(decided_by__username__icontains=decided_by)
        if agent := (cleaned.get("agent") or "").strip():
            requests = requests.filter(run__agent__slug=agent)
        else:  # the eval set's scripted decisions: on its agents' pages, not in everyone's
            requests = requests.without_evals()
        if kind := cleaned.get("kind") or "":
            requests = requests.filter(kind=kind)
        if "__all__" not in self.errors:
            start: datetime.date | None = cleaned.get("date_from")
            end: datetime.date | None = cleaned.get("date_to")
            if start:
                requests = requests.filter(requested_at__date__gte=start)
            if end:
                requests = requests.filter(requested_at__date__lte=end)
        return requests

    def query(self) -> dict[str, str]:
        """The valid filters as query parameters, for the pager's links."""
        self.is_valid()
        cleaned: dict[str, Any] = getattr(self, "cleaned_data", {})
        return {name: str(value) for name, value in cleaned.items() if value}


class DecisionForm(forms.Form):
    """What the approver typed, kept when the page comes back with an error."""

    decision = forms.CharField(required=False)
    comment = forms.CharField(required=False, strip=False)
    confirm = forms.CharField(required=False, strip=False)
    remember = forms.BooleanField(required=False)
    digest = forms.CharField(required=False)
    edited_diff = forms.CharField(required=False, strip=False)
    # The ticked "reject hunk" boxes are read by hunks_left_out(); the field is where a
    # problem with them is shown.
    rejected_hunks = forms.CharField(required=False)
    next = forms.CharField(required=False)  # the page to go back to (the run's), if any

    def decision_kwargs(self) -> dict[str, Any]:
        """The arguments of ``approval_decide``; a patch, or hunks left out, travel only
        with an approval."""
        data = self.data
        decision = str(data.get("decision", ""))
        approving = decision == "approve"
        return {
            "decision": decision,
            "comment": str(data.get("comment", "")),
            "confirm": str(data.get("confirm", "")),
            "remember": data.get("remember") in ("on", "true", "1"),
            "digest": str(data.get("digest", "")),
            "edited_diff": str(data.get("edited_diff", "")) if approving else "",
            "rejected_hunks": self.hunks_left_out() if approving else {},
        }

    def hunks_left_out(self) -> dict[str, list[int | str]]:
        """The hunks ticked "reject", path → numbers, from ``<path>:<number>`` values (a
        path may hold a colon: the number is after the last). A number that is not one is
        passed on as it was, for ``approval_decide`` to name."""
        values = self.data.getlist("rejected_hunk") if hasattr(self.data, "getlist") else []
        rejected: dict[str, list[int | str]] = {}
        for value in values:
            path, _, number = str(value).rpartition(":")
            rejected.setdefault(path, []).append(
                int(number) if number.isascii() and number.isdigit() else number
            )
        return rejected

    def rejected_keys(self) -> set[str]:
        """What was ticked, to tick it again when the page comes back with an error."""
        values = self.data.getlist("rejected_hunk") if hasattr(self.data, "getlist") else []
        return {str(v) for v in values}
