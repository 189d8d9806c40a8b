"""Permission policies: a level ceiling, ordered glob rules and their versions (SPEC P1–P3)."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from wcmatch import glob

from ..core.permissions import DECISIONS, LEVELS, PolicyError, Rule, decision_of
from .eval_traffic import EvalAware


class Policy(EvalAware):
    """A permission policy: a level ceiling and ordered rules (SPEC P1, P2). Every save bumps
    the version, which each recorded decision keeps."""

    name = models.SlugField(max_length=63, unique=True)
    description = models.CharField(max_length=300, blank=True)
    ceiling = models.CharField(max_length=2, choices=[(lv, lv) for lv in LEVELS], default="L2")
    version = models.PositiveIntegerField(default=1, editable=False)
    updated_at = models.DateTimeField(auto_now=True)
    # Approvals under this policy (SPEC A4, A5).
    approval_expiry_minutes = models.PositiveIntegerField(
        default=24 * 60,
        validators=[MinValueValidator(1), MaxValueValidator(30 * 24 * 60)],
        help_text="A pending approval request expires after this long; its run then fails.",
    )
    approval_reminder_minutes = models.PositiveIntegerField(
        default=60,
        validators=[MaxValueValidator(30 * 24 * 60)],
        help_text="Remind the approvers this long before a request expires (0: no reminder).",
    )
    for_evals = models.BooleanField(
        default=False,
        editable=False,
        help_text="Made by the eval set for one case's rules; never offered to agents.",
    )
    l3_approvals_required = models.PositiveSmallIntegerField(
        "approvers for L3 actions",
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(5)],
        help_text="Distinct approvers an L3 action (delete, shell, publish, ...) needs.",
    )

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "policies"

    def __str__(self) -> str:
        return self.name


class PolicyChange(EvalAware):
    """When a policy became which version: the retrospective dashboard marks these on its
    time axis, beside instruction versions, to explain a change in the figures."""

    EVAL_FLAG = "policy__for_evals"

    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="changes")
    version = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.policy.name} v{self.version}"


class PolicyRule(models.Model):
    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="rules")
    order = models.PositiveIntegerField(help_text="Rules are considered in this order.")
    key = models.SlugField(max_length=63, help_text="A short name shown in every decision.")
    tool = models.CharField(max_length=200, help_text="Tool name pattern: *, mcp:*, {a,b}.")
    path = models.CharField(
        max_length=500, blank=True, help_text="Glob over workspace paths (** spans folders)."
    )
    decision = models.CharField(max_length=16, choices=[(d, d) for d in DECISIONS])
    reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["policy", "order", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["policy", "key"],
                name="policy_rule_unique_key",
                violation_error_message="Two rules of a policy cannot share a key.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.tool} {self.path} → {self.decision}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        try:
            self.as_rule()
        except PolicyError as error:
            raise ValidationError(str(error)) from error
        try:
            glob.translate(self.path or "*", flags=glob.GLOBSTAR | glob.BRACE)
        except Exception as error:
            raise ValidationError({"path": f"Not a valid glob: {error}"}) from error

    def as_rule(self) -> Rule:
        return Rule(self.key, self.tool, decision_of(self.decision), self.path, self.reason)
