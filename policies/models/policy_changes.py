"""A policy change waiting for a second admin (B16): a policy may require that its edits
take effect only once another admin approves them. The edit is kept here, as the whole
policy it would make, with the rule diff and the simulator's result on recent calls, until
an admin who is not its author approves (then it is written, as any edit) or rejects it."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .eval_traffic import EvalAware
from .permissions import Policy, PolicyRevision


class PolicyChangeRequest(EvalAware):
    EVAL_FLAG = "policy__for_evals"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        STALE = "stale"  # the policy changed after it was proposed: propose again

    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="change_requests")
    status = models.CharField(max_length=16, choices=Status, default=Status.PENDING)
    # The revision it was proposed against: it applies only while that is the latest.
    base = models.ForeignKey(PolicyRevision, on_delete=models.PROTECT, related_name="+")
    snapshot = models.JSONField()  # the policy as it would be (policy_revisions.snapshot_of)
    diff = models.TextField(blank=True)
    effect = models.JSONField(default=dict)  # calls looked at, decisions it would change
    note = models.CharField(max_length=200, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"change to {self.policy.name} by {self.author} ({self.status})"
