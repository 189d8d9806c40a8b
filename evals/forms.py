"""The "add to eval set" form of a failed run's page: the case's name and title, and what
the operator expects the replay to do (a case's ``expect`` object, parsed into
``evals.core.cases.Expectations``)."""

from __future__ import annotations

import re
from typing import Any, Final

from django import forms

from runs.core import status as run_status
from runs.models import Run

from .core.cases import CATEGORIES, EFFECTS, OUTCOME_STATUSES
from .from_runs import REASON_PREFILL, EvalCaseRefused, eval_case_name_check, recorded_approvals

# Failure kinds (runs.core.failures) whose reason names a person's act.
REJECTED_KIND: Final = "rejected"
REJECTED_PREFIX: Final = "rejected by"
EXPIRED_KIND: Final = "approval_expired"
TOOL_RE = re.compile(r"^[A-Za-z0-9_.:/*-]{1,200}$")


def _tools(raw: str, what: str) -> list[str]:
    """A comma-separated list of tool names, each checked (a typo would match nothing)."""
    names = [part.strip() for part in raw.split(",") if part.strip()]
    bad = [name for name in names if not TOOL_RE.match(name)]
    if bad:
        raise forms.ValidationError(
            f"{', '.join(repr(b) for b in bad)} is not a tool name; list the {what} "
            "separated by commas, like readSource, publish."
        )
    return list(dict.fromkeys(names))


def _tool_list(label: str, help_text: str = "") -> forms.CharField:
    """A comma-separated list of tool names (read by ``_tools``)."""
    return forms.CharField(
        label=label,
        required=False,
        max_length=2000,
        help_text=f"Comma-separated. {help_text}".strip(),
    )


class EvalCaseForm(forms.Form):
    name = forms.CharField(
        max_length=48,
        help_text="1–48 lowercase letters, digits and hyphens; unique in the eval set.",
        error_messages={"max_length": "A case name has at most 48 characters."},
    )
    title = forms.CharField(max_length=300, help_text="One line: what the case checks.")
    status = forms.ChoiceField(
        label="Expected final status",
        choices=[(s, s.replace("_", " ")) for s in OUTCOME_STATUSES],
        error_messages={
            "invalid_choice": "%(value)s is not a final status; choose one of "
            + ", ".join(OUTCOME_STATUSES)
            + "."
        },
    )
    failure_contains = forms.CharField(
        label="Failure reason must contain",
        required=False,
        max_length=2000,
        help_text="Optional; compared without regard to case.",
    )
    denied = _tool_list("Tools that must be denied", "Each must have a refused call in the replay.")
    approvals = _tool_list(
        "Approvals that must be requested", "Tools (commit for a commit); empty: not checked."
    )
    not_run = _tool_list("Tools that must never run")
    never = forms.MultipleChoiceField(
        label="Effects that must never happen",
        required=False,
        choices=[(key, f"{key}: {sentence}") for key, sentence in EFFECTS.items()],
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "invalid_choice": "%(value)s is not a known effect; the effects are "
            + ", ".join(EFFECTS)
            + "."
        },
    )

    def clean_name(self) -> str:
        """Checked here too (the service checks again when it saves), so a clash is said
        together with the form's other errors."""
        name = self.cleaned_data["name"].strip()
        try:
            eval_case_name_check(name)
        except EvalCaseRefused as error:
            raise forms.ValidationError(str(error)) from None
        return name

    def clean_title(self) -> str:
        title = self.cleaned_data["title"].strip()
        if not title:
            raise forms.ValidationError("Give the case a title.")
        return title

    def clean_denied(self) -> list[str]:
        return _tools(self.cleaned_data["denied"], "tools that must be denied")

    def clean_approvals(self) -> list[str] | None:
        raw = self.cleaned_data["approvals"]
        return _tools(raw, "approvals") or None

    def clean_not_run(self) -> list[str]:
        return _tools(self.cleaned_data["not_run"], "tools that must never run")

    def expect(self) -> dict[str, Any]:
        """The case's ``expect`` object: only what the operator gave (an absent key is not
        checked)."""
        data = self.cleaned_data
        expect: dict[str, Any] = {"status": data["status"]}
        if data["failure_contains"].strip():
            expect["failure_contains"] = data["failure_contains"].strip()
        for key in ("denied", "not_run", "never"):
            if data[key]:
                expect[key] = list(data[key])
        if data["approvals"] is not None:
            expect["approvals"] = data["approvals"]
        return expect


def eval_case_initial(run: Run) -> dict[str, Any]:
    """By default the case replays to the same failure, asserting only what a replay
    reproduces: the run's status, the approvals it asked for and the start of its failure
    reason; the operator edits it into what should have happened.

    Where the reason names a person's act, the replay's differs: a rejection names the
    eval set's approver and its scripted comment ("rejected by eval-approver: ..."), so
    only "rejected by" is expected; an expiry does not happen in a replay, which leaves the
    run waiting for that approval; a cancellation is an act no replay repeats, so neither
    status nor reason is pre-filled. A rolled-back run completed before a person undid it,
    and a replay completes the same way."""
    lines = run.request.strip().splitlines()
    initial = {
        "name": f"run-{run.pk.hex[:8]}",
        "title": lines[0][:120] if lines else "",
        "status": run_status.COMPLETED if run.status == run_status.ROLLED_BACK else run.status,
        "failure_contains": run.failure_reason.strip()[:REASON_PREFILL].strip(),
        "approvals": ", ".join(recorded_approvals(run)),
    }
    if run.failure_kind == REJECTED_KIND:
        initial["failure_contains"] = REJECTED_PREFIX
    elif run.failure_kind == EXPIRED_KIND:
        initial.update(status=run_status.WAITING_FOR_APPROVAL, failure_contains="")
    elif run.failure_kind == run_status.CANCELLED_KIND:
        initial.pop("status")
        initial["failure_contains"] = ""
    return initial


MODEL_LABELS: Final = {"replay": "offline replay (recorded turns)", "anthropic": "Anthropic API"}


class SuiteStartForm(forms.Form):
    """Start a suite from the evals page: one category or all, and the model if a key is
    set (the live model is not offered without one: it could not run)."""

    category = forms.ChoiceField(
        required=False,
        choices=[("", "every category"), *((c, c) for c in CATEGORIES)],
        error_messages={
            "invalid_choice": "%(value)s is not a category; choose one of "
            + ", ".join(CATEGORIES)
            + ", or every category."
        },
    )
    model = forms.ChoiceField(
        initial="replay",
        error_messages={
            "invalid_choice": "%(value)s is not a model this console can run the suite "
            "with; the offline replay needs nothing, the Anthropic API needs ANTHROPIC_API_KEY."
        },
    )

    def __init__(self, *args: Any, key_set: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        models = ("replay", "anthropic") if key_set else ("replay",)
        field = self.fields["model"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(m, MODEL_LABELS[m]) for m in models]
