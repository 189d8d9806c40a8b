"""The approval pages (SPEC A1–A6): the live queue, the review page with its decision form,
and the history. Thin: check who is asking, call one selector or service, render."""

from __future__ import annotations

import json
from functools import cache
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import BooleanField, ExpressionWrapper, Prefetch, Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_http_methods

from harness_console.roles import may_decide
from harness_console.web.fragments import wants_fragment
from harness_console.web.redirects import safe_next
from policies.models import Agent
from runs.approval_outcomes import approval_decide, approvals_decide_group

from .core.hunks import HunkRef, hunks_of
from .core.patch import PatchError, diff_rows
from .diff_view import highlight_css, highlight_rows, hunk_marks
from .fingerprint import changes_since_asked
from .forms import RISKS, DecisionForm, HistoryFilterForm, QueueFilterForm
from .groups import groups_in
from .models import ApprovalDecision, ApprovalRequest
from .outcomes import AlreadyDecided
from .selectors import (
    SORTS,
    approval_for_user,
    may_read,
    pending_count_for,
    pending_counts,
    policy_changes_for,
    queue_for,
    queue_neighbours,
)

# A page of work: approvers decide from the top. 200 rows kept 1,000 model instances alive
# per request and set off full garbage collections (bench/approvals.py: p95 141 ms).
QUEUE_LIMIT = 50
MAX_DIFF_LINES = 5000
KIND_LABELS = {kind: str(label) for kind, label in ApprovalRequest.Kind.choices}
# What a queue row shows: not the diff, the arguments or the run's task and loop state,
# which can each be large and would be read for every row for nothing.
QUEUE_COLUMNS = (
    "kind",
    "status",
    "tool",
    "summary",
    "risk",
    "strong_confirmation",
    "requested_at",
    "expires_at",
    "required_approvals",
    "run__request",
    "run__agent__name",
    "run__requester__username",
    "digest",  # with kind, tool and rule: which requests are the same action (groups)
    "rule",
    "confirm_text",
)
HISTORY_PAGE_SIZE = 50
HISTORY_UNSHOWN = (
    "diff",
    "edited_diff",
    "arguments",
    "file_hashes",
    "run__task",
    "run__loop",
    "run__verification",
    "run__compaction",
    "run__agent__identity",
)


# --- the queue ------------------------------------------------------------------------------
@login_required
def approval_queue(request: HttpRequest) -> HttpResponse:
    """Pending requests this approver may decide, at most QUEUE_LIMIT rows: one query for
    the rows, one count when there are more, one for the requests on their own runs."""
    user = request.user
    if not may_decide(user):
        raise PermissionDenied("Only approvers open the approval queue.")
    agents = list(Agent.objects.without_evals().order_by("name").values_list("slug", "name"))
    form = QueueFilterForm(request.GET, agent_slugs=[slug for slug, _name in agents])
    filters = form.filters()
    pending = queue_for(user, **filters).only(*QUEUE_COLUMNS)
    rows = list(pending[:QUEUE_LIMIT])
    for row in rows:  # get_kind_display() costs a slow isinstance() per row
        row.kind_label = KIND_LABELS.get(row.kind, row.kind)  # type: ignore[attr-defined]
    filtered = any(filters[k] for k in ("risk", "kind", "agent"))
    counts = pending_counts(user)
    if len(rows) < QUEUE_LIMIT:
        total = len(rows)
    else:
        total = pending.count() if filtered else counts["theirs"]
    fragment = wants_fragment(request)
    # The second admin's part (B16): in the table the live queue fetches again, and in
    # the navigation's count.
    policy_changes = list(policy_changes_for(user)[:QUEUE_LIMIT])
    theirs = sum(change.author_id != user.pk for change in policy_changes)
    context = {
        "policy_changes": policy_changes,
        "rows": rows,
        "groups": groups_in(rows),
        "total": total,
        "more": max(0, total - len(rows)),
        "filters": filters,
        "filtered": filtered,
        "notices": form.notices(),
        "own": counts["own"],
        # The navigation's count, without asking again.
        "approvals_pending": counts["theirs"] + theirs,
        "fragment": fragment,
        "risks": RISKS,
        "kinds": ApprovalRequest.Kind.choices,
        "agents": agents,
        "sorts": list(SORTS),
    }
    template = "approvals/queue_table.html" if fragment else "approvals/queue.html"
    return render(request, template, context)


@login_required
@require_http_methods(["POST"])
def approval_group_decide_view(request: HttpRequest) -> HttpResponse:
    """Decide the identical requests of one queue group in one step (B15): each member is
    posted with the digest its approver was shown, and decided on its own; the message
    says how many were decided, and which were not and why."""
    if not may_decide(request.user):
        raise PermissionDenied("Only approvers decide approval requests.")
    members = [
        (pk, digest)
        for pk, _, digest in (m.partition(":") for m in request.POST.getlist("member"))
        if digest
    ]
    decision = request.POST.get("decision", "")
    try:
        done = approvals_decide_group(
            members=members,
            user=request.user,
            decision=decision,
            comment=request.POST.get("comment", ""),
            confirm=request.POST.get("confirm", ""),
        )
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return redirect("approvals:queue")
    verb = "Approved" if decision == "approve" else "Rejected"
    if done.decided:
        what = done.decided[0].approval.summary or "the request"
        messages.success(
            request, f"{verb} {len(done.decided)} of {len(members)} identical requests “{what}”."
        )
    reasons = {why for _approval, why in done.refused}
    if done.refused and not done.decided and len(reasons) == 1:  # one problem, said once
        messages.error(request, f"None of the {len(members)} requests was decided: {reasons.pop()}")
        return redirect("approvals:queue")
    for approval, why in done.refused:
        messages.warning(request, f"Not decided: {approval.summary} (run {approval.run_id}): {why}")
    return redirect("approvals:queue")


@login_required
def approval_count(request: HttpRequest) -> HttpResponse:
    """The navigation's count alone: every page of an approver refreshes it when the
    approvals socket says something changed."""
    if not may_decide(request.user):
        raise PermissionDenied("Only approvers count approval requests.")
    count = pending_count_for(request.user)
    return render(request, "approvals/nav_count.html", {"approvals_pending": count})


# --- the review page ------------------------------------------------------------------------
@login_required
def approval_review(request: HttpRequest, approval_id: Any) -> HttpResponse:
    approval = approval_for_user(request.user, approval_id)
    return _review(request, approval, DecisionForm())


@cache
def _highlight_css() -> str:
    return highlight_css()


def _review(
    request: HttpRequest,
    approval: ApprovalRequest,
    form: DecisionForm,
    *,
    status: int = 200,
    error: str = "",
) -> HttpResponse:
    user = request.user
    run = approval.run
    # Once approved with an edit, the edit is the change that counts: it is shown first;
    # approved without some hunks, the proposed change is shown with those marked.
    shown = approval.diff if approval.rejected_hunks else approval.edited_diff or approval.diff
    lines = shown.splitlines(keepends=True)
    rejected = _rejected_keys(approval, form)
    # Highlighting costs per line: a huge diff shows its beginning, the API has it whole.
    rows = highlight_rows(diff_rows("".join(lines[:MAX_DIFF_LINES]))) if lines else []
    files = hunk_marks(rows, rejected)
    decisions = list(approval.decisions.select_related("user"))
    votes = sum(d.decision == ApprovalDecision.Decision.APPROVE for d in decisions)
    voted = any(d.user_id == user.pk for d in decisions)
    is_requester = run.requester_id == user.pk
    task = run.task or {}
    context = {
        "approval": approval,
        "run": run,
        "files": files,
        "applied_edit": bool(approval.edited_diff) and not approval.rejected_hunks,
        "rejected_keys": rejected,
        "changed_since": changes_since_asked(approval) if approval.is_pending else [],
        "diff_lines": len(lines),
        "diff_cut": len(lines) > MAX_DIFF_LINES,
        "max_diff_lines": MAX_DIFF_LINES,
        "arguments": json.dumps(approval.arguments, indent=2, sort_keys=True, ensure_ascii=False),
        "risk": task.get("risk") or {},
        "task": task,
        "decisions": decisions,
        "votes": votes,
        "voted": voted,
        "is_requester": is_requester,
        "may_decide": may_decide(user),
        "can_decide": approval.is_pending and may_decide(user) and not is_requester and not voted,
        **_editor(approval, form),
        "hunk_choice": _hunk_choice(approval),
        "siblings": ApprovalRequest.objects.filter(
            run=run, status=ApprovalRequest.Status.PENDING
        ).exclude(pk=approval.pk),
        "form": form,
        "error": error,
        "highlight_css": _highlight_css(),
        **queue_neighbours(user, approval),
    }
    return render(request, "approvals/review.html", context, status=status)


def _editor(approval: ApprovalRequest, form: DecisionForm) -> dict[str, Any]:
    """The patch editor, where the request has a patch one approver may edit (A3); open,
    with what was typed, when the page comes back with an edit."""
    editable = approval.is_pending and not approval.edit_refusal
    typed = (form["edited_diff"].value() or "") if form.is_bound else ""
    changed = bool(typed) and typed.replace("\r\n", "\n") != approval.diff
    return {
        "editable": editable,
        "edit_open": changed or "edited_diff" in form.errors,
        "edited_text": typed or approval.diff,
    }


def _hunk_choice(approval: ApprovalRequest) -> list[HunkRef]:
    """The hunks an approver may accept or reject one by one (B7): where the patch could
    be edited, and only when there are two or more (rejecting the one hunk of a change is
    rejecting the request)."""
    if not approval.is_pending or approval.hunks_refusal:
        return []
    try:
        refs = hunks_of(approval.diff)
    except PatchError:
        return []
    return refs if len(refs) > 1 else []


def _rejected_keys(approval: ApprovalRequest, form: DecisionForm) -> set[str]:
    """The hunks shown rejected: as decided, or as ticked on the page that came back."""
    if approval.rejected_hunks:
        return {f"{path}:{n}" for path, numbers in approval.rejected_hunks.items() for n in numbers}
    return form.rejected_keys() if form.is_bound else set()


# --- deciding -------------------------------------------------------------------------------
@login_required
@require_http_methods(["GET", "POST"])
def approval_decide_view(request: HttpRequest, approval_id: Any) -> HttpResponse:
    """The one page door to decide (the run page's form posts here too). Record one
    decision; then back to the page it came from (``next``, the run's page), or on to the
    next request in the queue. A refusal brings the review page back with what was typed
    and the reason next to its field (at this address: a reload or Back lands here with
    GET, which goes back to the review page)."""
    approval = approval_for_user(request.user, approval_id)
    if request.method == "GET":
        return redirect("approvals:review", approval_id=approval.pk)
    form = DecisionForm(request.POST)
    arguments = form.decision_kwargs()
    if (cleared := _cleared_edit(form, arguments)) is not None:
        form.add_error("edited_diff", cleared)
        return _review(request, approval, form, status=400)
    try:
        decided = approval_decide(approval=approval, user=request.user, **arguments).approval
    except ValidationError as error:
        problems = (
            error.message_dict if hasattr(error, "error_dict") else {"__all__": error.messages}
        )
        for field, texts in problems.items():
            form.add_error(field if field in form.fields else None, texts)
        return _review(request, approval, form, status=400)
    except AlreadyDecided as error:
        fresh = approval_for_user(request.user, approval.pk)
        return _review(request, fresh, form, status=409, error=str(error))
    messages.success(request, _decided_message(decided, arguments["decision"]))
    if back := safe_next(request, form.data.get("next")):
        return HttpResponseRedirect(back)
    following = queue_for(request.user).exclude(pk=decided.pk).first()
    if following is None:
        return redirect("approvals:queue")
    return redirect("approvals:review", approval_id=following.pk)


def _cleared_edit(form: DecisionForm, arguments: dict[str, Any]) -> str | None:
    """An approval from the page with the patch editor open and emptied: the approver
    meant to approve no change, not the proposed one (which an empty edit would mean)."""
    sent = "edited_diff" in form.data and not arguments["edited_diff"].strip()
    if arguments["decision"] != "approve" or not sent:
        return None
    return (
        "The edited patch is empty: approving it would commit nothing. Close the editor to "
        "approve the change as proposed, or reject it with a reason."
    )


def _decided_message(approval: ApprovalRequest, decision: str) -> str:
    what = f"“{approval.summary or approval.get_kind_display()}”"
    if approval.is_pending:  # one vote of several (A4)
        votes = approval.decisions.filter(decision=ApprovalDecision.Decision.APPROVE).count()
        return (
            f"Your approval of {what} is recorded: {votes} of "
            f"{approval.required_approvals} approvals."
        )
    verb = "Approved" if decision == "approve" else "Rejected"
    if approval.rejected_hunks:  # as for an edit: written only when the run commits
        count = sum(len(numbers) for numbers in approval.rejected_hunks.values())
        return (
            f"{verb} {what} without the {count} hunk{pluralize(count)} you rejected; the "
            "model is told which. The rest is written when the run commits, if the files are "
            "still as you saw them; if another change reached them first, the run asks again "
            "with the change rebased onto it, your rejected hunks left out."
        )
    if approval.edited_diff:  # written only when the run commits: say so, never "applied"
        return (
            f"{verb} {what} with your edit. It is written when the run commits, if the files "
            "are still as you saw them; if another change reached them first, the run asks "
            "again with your edit rebased onto it."
        )
    return f"{verb} {what}."


# --- the history ----------------------------------------------------------------------------
@login_required
def approval_history(request: HttpRequest) -> HttpResponse:
    """Every request no longer pending, newest first, 50 a page; a filter that cannot be
    read is named in a message and left out."""
    if not may_read(request.user):
        raise PermissionDenied("Only approvers read the approval history.")
    form = HistoryFilterForm(request.GET)
    requests = form.apply(
        ApprovalRequest.objects.select_related("run__agent", "decided_by")
        .defer(*HISTORY_UNSHOWN)
        .annotate(was_edited=ExpressionWrapper(~Q(edited_diff=""), output_field=BooleanField()))
        .prefetch_related(
            Prefetch("decisions", queryset=ApprovalDecision.objects.select_related("user"))
        )
        .order_by("-requested_at")
    )
    page = Paginator(requests, HISTORY_PAGE_SIZE).get_page(request.GET.get("page"))
    fragment = wants_fragment(request)
    context = {
        "form": form,
        "problems": form.messages(),
        "page": page,
        "query": urlencode(form.query()),
        "statuses": ApprovalRequest.Status.choices,
        "kinds": ApprovalRequest.Kind.choices,
        # The eval set's agents only when one of them is the current choice.
        "agents": (
            Agent.objects.without_evals() | Agent.objects.filter(slug=request.GET.get("agent", ""))
        )
        .order_by("name")
        .values_list("slug", "name"),
    }
    template = "approvals/history_table.html" if fragment else "approvals/history.html"
    status = 400 if form.errors and not fragment else 200
    return render(request, template, context, status=status)
