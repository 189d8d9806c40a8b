"""Permission policies: a level ceiling, ordered glob rules and their versions (SPEC P1–P3)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from wcmatch import glob

from ..core.permissions import (
    DECISIONS,
    LEVELS,
    LIMIT_TURNS,
    RATE_SCOPES,
    PolicyError,
    Rule,
    RuleLimits,
    decision_of,
)
from ..core.windows import WindowError, dates_of, days_of, weekly
from .eval_traffic import EvalAware


class Policy(EvalAware):
    """A permission policy: a level ceiling and ordered rules (SPEC P1, P2). An edit that
    changes what it decides bumps the version, which each recorded decision and pending
    approval keeps (``permissions.policy_record_edit``)."""

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
    changes_need_second_admin = models.BooleanField(
        "changes need a second admin",
        default=False,
        help_text="An edit takes effect only once another admin approves it (in the "
        "approval queue, as a policy change); its author cannot approve it.",
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
    # The rule's change window and rate limit (B6): both optional.
    window_days = models.CharField(
        "window days",
        max_length=60,
        blank=True,
        help_text="Days the rule's decision holds, e.g. mon-fri or sat, sun. Empty: every day.",
    )
    window_start = models.TimeField("from", null=True, blank=True)
    window_end = models.TimeField(
        "until", null=True, blank=True, help_text="Before 'from': the window runs past midnight."
    )
    window_timezone = models.CharField(
        "time zone", max_length=64, blank=True, default="UTC", help_text="e.g. Europe/Paris."
    )
    window_excluded = models.TextField(
        "excluded dates",
        blank=True,
        help_text="Dates outside the window (holidays): 2026-12-25, or 2026-12-24..2026-12-26.",
    )
    outside_window = models.CharField(
        "outside the window",
        max_length=4,
        choices=[(t, t) for t in LIMIT_TURNS],
        default="deny",
    )
    rate_limit = models.PositiveIntegerField(
        "calls a minute", default=0, help_text="At most this many calls in any 60 s; 0: no limit."
    )
    rate_scope = models.CharField(
        "counted per", max_length=9, choices=[(s, s) for s in RATE_SCOPES], default="run"
    )
    over_rate = models.CharField(
        "over the rate", max_length=4, choices=[(t, t) for t in LIMIT_TURNS], default="deny"
    )

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
        except WindowError as error:
            raise ValidationError({"window_days": str(error)}) from error
        except PolicyError as error:
            raise ValidationError(str(error)) from error
        try:
            glob.translate(self.path or "*", flags=glob.GLOBSTAR | glob.BRACE)
        except Exception as error:
            raise ValidationError({"path": f"Not a valid glob: {error}"}) from error

    def as_rule(self) -> Rule:
        return Rule(
            self.key,
            self.tool,
            decision_of(self.decision),
            self.path,
            self.reason,
            rule_limits(*(getattr(self, name) for name in LIMIT_FIELDS)),
        )


LIMIT_FIELDS = (
    "window_days",
    "window_start",
    "window_end",
    "window_timezone",
    "window_excluded",
    "outside_window",
    "rate_limit",
    "rate_scope",
    "over_rate",
)


def rule_limits(
    days: str,
    start: Any,
    end: Any,
    zone: str,
    excluded: str,
    outside: str,
    per_minute: int,
    scope: str,
    over: str,
) -> RuleLimits | None:
    """A rule's limits from its row's fields, or None when it sets none (raises
    WindowError, PolicyError). The time zone alone sets no window."""
    has_window = bool(days.strip() or start or end or excluded.strip())
    if not has_window and not per_minute:
        return None
    window = (
        weekly(days_of(days), start, end, zone or "UTC", dates_of(excluded)) if has_window else None
    )
    return RuleLimits(window, outside, per_minute, scope, over)  # type: ignore[arg-type]


class PolicyRevision(EvalAware):
    """One saved state of a policy, with who saved it and why (B16): every edit makes one,
    whether or not it changed a decision (``decision_version`` is the version approvals
    bind to as of this revision). A snapshot of the whole policy, never rewritten, so any
    two can be compared and any one restored."""

    EVAL_FLAG = "policy__for_evals"

    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    decision_version = models.PositiveIntegerField()
    snapshot = models.JSONField()  # policies.policy_revisions.snapshot_of
    note = models.CharField(max_length=200, blank=True, help_text="What changed and why.")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    restored_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="restorations"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["policy", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "number"], name="policy_revision_unique")
        ]

    def __str__(self) -> str:
        return f"{self.policy.name} revision {self.number} (v{self.decision_version})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ValueError("Policy revisions are never rewritten; save a new one.")
        super().save(*args, **kwargs)
