"""Admin-managed context configuration: layer overrides, instruction versions, business rules."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from wcmatch import glob

from runs.models import Agent

from .core.assembler import STRATEGIES
from .core.hook_handlers import HANDLERS, handler_build, phase_check
from .core.hooks import PHASES, HookSettingsError
from .core.layers import LAYER_NAMES, MAX_BUDGET
from .core.permissions import DECISIONS, LEVELS, SIDE_EFFECTS, PolicyError, Rule
from .core.tool_specs import MAX_DESCRIPTION


class LayerConfig(models.Model):
    """An agent's override of one layer's position, strategy and budget (SPEC C1)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="layer_configs")
    name = models.CharField(max_length=32, choices=[(n, n) for n in LAYER_NAMES])
    position = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Order in the prompt: 1 comes first; empty keeps the default.",
    )
    strategy = models.CharField(max_length=32, blank=True, choices=[(s, s) for s in STRATEGIES])
    budget = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[
            MinValueValidator(0, "A budget cannot be negative."),
            MaxValueValidator(
                MAX_BUDGET, f"A budget over {MAX_BUDGET:,} tokens is larger than any model reads."
            ),
        ],
        help_text="Tokens; 0 leaves the layer out.",
    )

    class Meta:
        ordering = ["agent", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "name"],
                name="layer_config_unique_name",
                violation_error_message="This agent already configures that layer.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug}: {self.name}"


class InstructionVersion(models.Model):
    """One version of an agent's instructions; the newest is in force. Never rewritten."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="instruction_versions")
    version = models.PositiveIntegerField()
    text = models.TextField(blank=True)
    note = models.CharField(max_length=200, blank=True, help_text="What changed and why.")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    restored_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="restorations"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "-version"]
        get_latest_by = "version"
        constraints = [
            models.UniqueConstraint(fields=["agent", "version"], name="instruction_unique_version")
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug} instructions v{self.version}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ValueError("Instruction versions are never rewritten; save a new version.")
        super().save(*args, **kwargs)


class BusinessRule(models.Model):
    """A rule the agent must follow; the layer lists them oldest first (its drop order)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="business_rules")
    text = models.TextField()
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "created_at", "id"]

    def __str__(self) -> str:
        return self.text[:60]

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if not self.text.strip():
            raise ValidationError({"text": "A rule needs some text."})


class Policy(models.Model):
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


class PolicyChange(models.Model):
    """When a policy became which version: the retrospective dashboard marks these on its
    time axis, beside instruction versions, to explain a change in the figures."""

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
        return Rule(self.key, self.tool, self.decision, self.path, self.reason)


class ToolDefinition(models.Model):
    """A tool in the registry (SPEC T1, T2). Only its definition (name, description, input
    schema) ever reaches the model, and only for tools the agent's policy may use."""

    SOURCES = [("builtin", "built-in"), ("mcp", "MCP server")]

    name = models.CharField(max_length=120, unique=True)
    description = models.CharField(max_length=MAX_DESCRIPTION)
    input_schema = models.JSONField(default=dict)
    output_schema = models.JSONField(default=dict, blank=True)
    permission_level = models.CharField(max_length=2, choices=[(lv, lv) for lv in LEVELS])
    side_effect = models.CharField(max_length=32, choices=[(s, s) for s in SIDE_EFFECTS])
    timeout_sec = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(3600)]
    )
    retry = models.PositiveSmallIntegerField(
        default=0, validators=[MaxValueValidator(5)], help_text="Retries for retryable failures."
    )
    approval_required = models.BooleanField(default=False)
    audit = models.BooleanField(default=True)
    source = models.CharField(max_length=16, choices=SOURCES, default="builtin")
    implementation = models.CharField(
        max_length=200,
        blank=True,
        help_text="module:function of a custom tool; empty for a built-in tool of this name.",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Enforced on every save, not only in forms: the description limit is the contract.
        if len(self.description) > MAX_DESCRIPTION:
            raise ValueError(f"A tool description has at most {MAX_DESCRIPTION} characters.")
        super().save(*args, **kwargs)

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        errors = {}
        if len(self.description) > MAX_DESCRIPTION:
            errors["description"] = (
                f"At most {MAX_DESCRIPTION} characters ({len(self.description)} given): the "
                "model reads every description on every turn."
            )
        if not isinstance(self.input_schema, dict) or self.input_schema.get("type") != "object":
            errors["input_schema"] = 'The input schema must be a JSON schema of "type": "object".'
        if errors:
            raise ValidationError(errors)


class McpServer(models.Model):
    """A whitelisted MCP server (SPEC T12): how to start it and what it may touch."""

    name = models.SlugField(max_length=63, unique=True)
    command = models.CharField(max_length=500, help_text="The program that starts the server.")
    args = models.JSONField(default=list, blank=True, help_text="Its arguments, a JSON list.")
    permission_level = models.CharField(
        max_length=2, choices=[(lv, lv) for lv in LEVELS], default="L2"
    )
    allowed_paths = models.JSONField(
        default=list, blank=True, help_text='Globs a path argument must match, e.g. ["notes/**"].'
    )
    forbidden_paths = models.JSONField(
        default=list, blank=True, help_text="Globs no path argument may match."
    )
    allowed_tools = models.JSONField(
        default=list, blank=True, help_text="The server's tools that may be called."
    )
    rate_limit_per_minute = models.PositiveIntegerField(default=0, help_text="0: no limit.")
    window_days = models.JSONField(
        default=list, blank=True, help_text="Change window days, 0 = Monday; empty: every day."
    )
    window_start = models.TimeField(null=True, blank=True, help_text="UTC.")
    window_end = models.TimeField(null=True, blank=True, help_text="UTC.")
    timeout_sec = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(600)]
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        errors = {}
        for field in ("args", "allowed_paths", "forbidden_paths", "allowed_tools"):
            value = getattr(self, field)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                errors[field] = "Give a JSON list of strings."
        for field in ("allowed_paths", "forbidden_paths"):
            if isinstance(getattr(self, field), list) and any(
                str(v).startswith("/") or ".." in str(v).split("/") for v in getattr(self, field)
            ):
                errors[field] = "Globs are relative to the workspace, without '..'."
        if not isinstance(self.window_days, list) or not all(
            isinstance(d, int) and 0 <= d <= 6 for d in self.window_days
        ):
            errors["window_days"] = "Give a JSON list of days, 0 (Monday) to 6 (Sunday)."
        if (self.window_start is None) != (self.window_end is None):
            errors["window_end"] = "Give both the start and the end of the window, or neither."
        if errors:
            raise ValidationError(errors)

    def as_config(self) -> Any:
        from .core.mcp_checks import McpServerConfig

        return McpServerConfig(
            name=self.name,
            enabled=self.enabled,
            allowed_tools=frozenset(self.allowed_tools),
            allowed_paths=tuple(self.allowed_paths),
            forbidden_paths=tuple(self.forbidden_paths),
            rate_limit_per_minute=self.rate_limit_per_minute,
            window_days=frozenset(self.window_days),
            window_start=self.window_start,
            window_end=self.window_end,
        )


class HookBinding(models.Model):
    """A shipped hook handler bound to a phase (SPEC C7), for one agent or for all of them.
    Bindings of a phase run in ``order``; a failing handler halts the chain unless
    ``fail_open``. Settings are checked against the handler's schema, and by building it."""

    phase = models.CharField(max_length=32, choices=[(p, p) for p in PHASES])
    handler = models.CharField(max_length=63, choices=[(n, n) for n in HANDLERS])
    settings = models.JSONField(
        default=dict, blank=True, help_text="The handler's settings, a JSON object."
    )
    order = models.PositiveIntegerField(
        default=10, help_text="Bindings of a phase run in this order, lowest first."
    )
    enabled = models.BooleanField(default=True)
    fail_open = models.BooleanField(
        default=False,
        help_text="If the handler crashes or overruns, skip it and go on. Off: the chain "
        "halts (and, before a tool, the tool call).",
    )
    time_limit_seconds = models.FloatField(
        default=2.0,
        validators=[
            MinValueValidator(0.1, "At least 0.1 seconds."),
            MaxValueValidator(30, "At most 30 seconds: every tool call waits for its hooks."),
        ],
    )
    agent = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="hook_bindings",
        help_text="Empty: every agent.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["phase", "order", "id"]

    def __str__(self) -> str:
        scope = self.agent.slug if self.agent_id else "all agents"
        return f"{self.phase} #{self.order}: {self.handler} ({scope})"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if self.handler not in HANDLERS:
            return  # the choices already say so
        errors = {}
        if self.phase in PHASES:
            try:
                phase_check(self.handler, self.phase)
            except HookSettingsError as error:
                errors["phase"] = str(error)
        try:
            handler_build(self.handler, self.settings)
        except HookSettingsError as error:
            errors["settings"] = f"{self.handler} settings: {error}"
        if errors:
            raise ValidationError(errors)
