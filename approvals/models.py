"""Approval requests (SPEC P5, A3): a run that needs a person waits on one of these."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from policies.models import EvalAware

from .core.patch import shows_a_change

EDITABLE_TOOLS = frozenset({"commitDraft"})  # tool calls whose patch an approver may edit


class ApprovalRequest(EvalAware):
    """One question to a person, and its answer; a run waiting on it holds no worker.

    Kinds: a tool call the policy asked about (``tool_call``), the commit of a run's drafts
    after verification (``commit``), or a plan the model asked a person to approve
    (``plan``). The decision is taken once: of two concurrent decisions exactly one wins.
    """

    EVAL_FLAG = "run__agent__for_evals"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"
        CANCELLED = "cancelled"
        INVALIDATED = "invalidated"

    class Kind(models.TextChoices):
        TOOL_CALL = "tool_call", "tool call"
        COMMIT = "commit", "commit drafts"
        PLAN = "plan", "plan"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="approvals")
    kind = models.CharField(max_length=16, choices=Kind)
    status = models.CharField(max_length=16, choices=Status, default=Status.PENDING)
    tool_use_id = models.CharField(max_length=200, blank=True)
    tool = models.CharField(max_length=120, blank=True)
    arguments = models.JSONField(default=dict, blank=True)
    paths = models.JSONField(default=list, blank=True)
    diff = models.TextField(blank=True)
    summary = models.TextField(blank=True)
    rule = models.CharField(max_length=63, blank=True)
    reason = models.TextField(blank=True)  # why it asks: the rule's reason
    risk = models.CharField(max_length=16, blank=True)
    strong_confirmation = models.BooleanField(default=False)  # type the path to approve
    confirm_text = models.CharField(max_length=1024, blank=True)  # what must be typed
    # What the approver is shown, bound to what runs: arguments and file digests (A-binding).
    digest = models.CharField(max_length=64, blank=True)
    policy_version = models.PositiveIntegerField(null=True, blank=True)
    requested_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="approval_decisions",
    )
    comment = models.TextField(blank=True)
    remember = models.BooleanField(default=False)  # "remember for this run" (P4)
    # The session grant "remember" made: revoked if this approval is invalidated.
    grant = models.ForeignKey(
        "runs.SessionGrant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The bytes each path held when asked (sha256, or None: absent): part of the digest.
    file_hashes = models.JSONField(default=dict, blank=True)
    required_approvals = models.PositiveSmallIntegerField(default=1)  # M of N for L3 (A4)
    expires_at = models.DateTimeField(null=True, blank=True)  # A5
    remind_at = models.DateTimeField(null=True, blank=True)  # None: no reminder
    reminded_at = models.DateTimeField(null=True, blank=True)
    # The patch applied instead of the proposed change: the approver's edit (A3), or the
    # hunks they accepted when they rejected some (B7).
    edited_diff = models.TextField(blank=True)
    # The hunks the approver rejected, path → their numbers in ``diff`` (from 1; B7).
    rejected_hunks = models.JSONField(default=dict, blank=True)
    # What the approval binds to: ``digest`` when approved as shown, else a digest that
    # covers the accepted set too (``approvals.core.fingerprint.accepted_digest``).
    accepted_digest = models.CharField(max_length=64, blank=True)
    status_reason = models.TextField(blank=True)  # why expired, invalidated or cancelled

    class Meta:
        ordering = ["requested_at"]
        indexes = [
            models.Index(fields=["status", "requested_at"]),
            models.Index(fields=["status", "expires_at"]),
            models.Index(fields=["status", "remind_at"]),
        ]
        constraints = [
            # An invalidated request is asked again under the same tool_use id.
            models.UniqueConstraint(
                fields=["run", "kind", "tool_use_id"],
                condition=~models.Q(status="invalidated"),
                name="approval_once_per_question",
            ),
            # A run commits once: a newer commit request replaces a pending one
            # (runs.approval_outcomes.approval_ask), and the database holds it to that.
            models.UniqueConstraint(
                fields=["run"],
                condition=models.Q(status="pending", kind="commit"),
                name="one_pending_commit_per_run",
            ),
        ]
        permissions = [("decide_approval", "Can decide approval requests of runs")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} for run {self.run_id} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status == self.Status.PENDING

    @property
    def confirm_expected(self) -> str:
        """What an approver types for a strong confirmation."""
        return self.confirm_text or (self.paths[0] if self.paths else "")

    @property
    def rejected_hunk_labels(self) -> list[str]:
        """``hunk 2 of docs/x.md`` for each hunk its approver rejected, for the pages."""
        return [
            f"hunk {n} of {path}" for path, numbers in self.rejected_hunks.items() for n in numbers
        ]

    def _patch_refusal(self) -> str:
        if self.kind != self.Kind.COMMIT and self.tool not in EDITABLE_TOOLS:
            return "tool"
        if self.required_approvals > 1:
            return "several"
        if not self.diff:
            return "empty"
        if any(line.startswith("Binary file ") for line in self.diff.splitlines()):
            return "binary"
        return ""

    @property
    def approve_refusal(self) -> str:
        """Why this request cannot be approved, or "": a commit whose diff shows no change
        (no hunk, no binary change, no file it creates) would commit nothing anyone saw.
        The harness never asks so (a draft that reads as its file is dropped); this holds
        for whatever path such a request might still come by."""
        if self.kind != self.Kind.COMMIT and self.tool not in EDITABLE_TOOLS:
            return ""
        if not self.is_pending or shows_a_change(self.diff):
            return ""
        if any(self.file_hashes.get(path) is None for path in self.paths):
            return ""  # it creates a file, empty: a change, though its diff has no line
        return (
            "This request changes no file: approving it would commit nothing. "
            "Reject it with a reason (the model reads it)."
        )

    @property
    def edit_refusal(self) -> str:
        """Why the patch cannot be edited before approving, or "": only a text change to
        commit has one, and one approver may not rewrite what several must approve."""
        return {
            "tool": f"A {self.tool} call has no patch to edit.",
            "several": (
                "A request that needs several approvers cannot be edited by one: reject it "
                "with the change you want instead."
            ),
            "empty": "There is no patch to edit.",
            "binary": "A binary change is described, not shown: there is nothing to edit.",
            "": "",
        }[self._patch_refusal()]

    @property
    def hunks_refusal(self) -> str:
        """Why its hunks cannot be accepted or rejected one by one, or "": where the patch
        could be edited, for the same reasons (B7)."""
        return {
            "tool": f"A {self.tool} call has no patch to choose hunks of.",
            "several": (
                "A request that needs several approvers is approved whole or rejected: one "
                "approver cannot leave part of it out."
            ),
            "empty": "There is no patch to choose hunks of.",
            "binary": "A binary change is described, not shown: it has no hunks to choose.",
            "": "",
        }[self._patch_refusal()]

    @property
    def remember_refusal(self) -> str:
        """Why "remember for this run" is not offered, or "": a grant allows later calls
        with nobody asked, so it is never wider than what one approver may give."""
        if self.kind != self.Kind.TOOL_CALL:
            return "Only a tool call can be remembered for the run."
        if self.required_approvals > 1:
            return (
                "This action needs several approvers; remembering it would let later calls "
                "through with none."
            )
        if not self.paths or not self.paths[0]:
            return (
                f"A {self.tool} call has no path to remember: the grant would allow every "
                f"{self.tool} call of the run."
            )
        return ""


class ImmutableRecord(Exception):
    """An attempt to rewrite the audit trail."""


class _AppendOnly(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise ImmutableRecord("Recorded decisions cannot be changed.")

    def delete(self) -> Any:
        raise ImmutableRecord("Recorded decisions cannot be deleted.")


class ApprovalDecision(models.Model):
    """One person's decision on one request, as they took it (SPEC A6): who, when, the
    digest of what their page showed, their comment and any edit. Never changed afterwards:
    the model refuses updates and deletes, the admin and the API offer neither.

    A request needing M approvers (A4) collects M of these before it is approved; a single
    rejection rejects it.
    """

    class Decision(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"

    approval = models.ForeignKey(
        ApprovalRequest, on_delete=models.PROTECT, related_name="decisions"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approval_votes"
    )
    decision = models.CharField(max_length=8, choices=Decision)
    comment = models.TextField(blank=True)
    shown_digest = models.CharField(max_length=64)
    edited_diff = models.TextField(blank=True)  # the patch applied instead, as on the request
    rejected_hunks = models.JSONField(default=dict, blank=True)  # path → hunk numbers (B7)
    accepted_digest = models.CharField(max_length=64, blank=True)  # what this vote approved
    remember = models.BooleanField(default=False)
    decided_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = _AppendOnly.as_manager()

    class Meta:
        ordering = ["decided_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["approval", "user"], name="one_decision_per_approver")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.decision} {self.approval_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableRecord("A recorded decision cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise ImmutableRecord("A recorded decision cannot be deleted.")


class ApprovalLinkUse(models.Model):
    """A decide-from-anywhere link that was used (issue 18, B14): the link's nonce, hashed,
    is unique, so a link decides once. The row is written in the transaction of the
    decision it carried: a decision that fails leaves the link usable, and of two
    concurrent uses the second waits on the first's row and is refused."""

    nonce_hash = models.CharField(max_length=64, unique=True)  # sha256 of the link's nonce
    approval = models.ForeignKey(
        ApprovalRequest, on_delete=models.PROTECT, related_name="link_uses"
    )
    decision = models.CharField(max_length=8, choices=ApprovalDecision.Decision)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approval_link_uses"
    )
    used_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["used_at", "id"]

    def __str__(self) -> str:
        return f"{self.decision} link for {self.approval_id} used by {self.user_id}"
