"""The tool registry and the whitelisted MCP servers (SPEC T1, T2, T12)."""

from __future__ import annotations

from typing import Any

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from ..core.mcp_checks import McpServerConfig
from ..core.permissions import LEVELS, SIDE_EFFECTS
from ..core.tool_specs import MAX_DESCRIPTION
from .eval_traffic import EvalAware


class ToolDefinition(EvalAware):
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
    for_evals = models.BooleanField(
        default=False, editable=False, help_text="A tool of one of the eval set's MCP servers."
    )

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


class McpServer(EvalAware):
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
    for_evals = models.BooleanField(
        default=False,
        editable=False,
        help_text="One of the eval set's own servers (evals/servers/), off between suites.",
    )

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

    def as_config(self) -> McpServerConfig:
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
