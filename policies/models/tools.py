"""The tool registry and the whitelisted MCP servers (SPEC T1, T2, T12)."""

from __future__ import annotations

from datetime import time
from typing import Any
from zoneinfo import ZoneInfo

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from ..core.mcp_checks import WHOLE_ROOT_POLICIES, McpServerConfig
from ..core.mcp_reach import ARGUMENT_KINDS, ToolReach
from ..core.permissions import LEVELS, SIDE_EFFECTS
from ..core.tool_specs import MAX_DESCRIPTION
from ..core.windows import Weekly, WindowError, weekly
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
    argument_kinds = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            'An MCP tool\'s reach: each argument\'s kind, "path", "tree" (its output covers '
            'all under it), "revision" (HEAD:.env names a path) or "text". An argument not '
            "named here is refused. Prefilled at discovery from the input schema."
        ),
    )
    whole_root = models.BooleanField(
        default=False,
        help_text=(
            "An MCP tool whose output can hold any file under its server's root (a diff, a "
            "show, a log with patches): refused or asked on a server with forbidden paths."
        ),
    )
    annotations = models.JSONField(
        default=dict,
        blank=True,
        help_text="The server's own hints (readOnlyHint, destructiveHint), as discovered.",
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
        kinds = self.argument_kinds
        if not isinstance(kinds, dict) or not all(
            isinstance(k, str) and v in ARGUMENT_KINDS for k, v in kinds.items()
        ):
            errors["argument_kinds"] = (
                f"Give a JSON object from argument names to one of {', '.join(ARGUMENT_KINDS)}."
            )
        if errors:
            raise ValidationError(errors)

    def reach(self) -> ToolReach:
        kinds = self.argument_kinds if isinstance(self.argument_kinds, dict) else {}
        return ToolReach(
            {k: v for k, v in kinds.items() if v in ARGUMENT_KINDS},
            self.whole_root,
        )


class McpServer(EvalAware):
    """A whitelisted MCP server (SPEC T12): how to start it and what it may touch."""

    name = models.SlugField(max_length=63, unique=True)
    command = models.CharField(max_length=500, help_text="The program that starts the server.")
    args = models.JSONField(default=list, blank=True, help_text="Its arguments, a JSON list.")
    root = models.CharField(
        max_length=1000,
        blank=True,
        help_text=(
            "The folder the server serves, an absolute path: its paths are resolved and its "
            "allowed and forbidden globs matched against it. Empty: read from the arguments "
            "(--repository, or the first absolute folder), else the folder it is started in."
        ),
    )
    whole_root_tools = models.CharField(
        max_length=8,
        choices=[(p, p) for p in WHOLE_ROOT_POLICIES],
        default="refuse",
        help_text="Tools whose output can hold any file of the root, where paths are forbidden.",
    )
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
                errors[field] = "Globs are relative to the server's root, without '..'."
        if self.root and not str(self.root).startswith("/"):
            errors["root"] = "Give the folder as an absolute path, or leave it empty."
        if not isinstance(self.window_days, list) or not all(
            isinstance(d, int) and 0 <= d <= 6 for d in self.window_days
        ):
            errors["window_days"] = "Give a JSON list of days, 0 (Monday) to 6 (Sunday)."
        else:
            try:
                self.change_window(strict=True)
            except WindowError as error:
                errors["window_end"] = str(error)
        if errors:
            raise ValidationError(errors)

    def change_window(self, *, strict: bool = False) -> Weekly | None:
        """The server's change window (UTC), or None when it sets none. A stored window the
        form would refuse (from equal to until, saved before the form checked it) is one
        that never holds: its calls are refused, as they always were, never let through."""
        if not self.window_days and self.window_start is None and self.window_end is None:
            return None
        try:
            return weekly(self.window_days, self.window_start, self.window_end, "UTC")
        except WindowError:
            if strict:
                raise
            return Weekly(frozenset(), time(0), time(0), ZoneInfo("UTC"))

    def as_config(self) -> McpServerConfig:
        return McpServerConfig(
            name=self.name,
            enabled=self.enabled,
            allowed_tools=frozenset(self.allowed_tools),
            allowed_paths=tuple(self.allowed_paths),
            forbidden_paths=tuple(self.forbidden_paths),
            rate_limit_per_minute=self.rate_limit_per_minute,
            window=self.change_window(),
            whole_root_tools="ask" if self.whole_root_tools == "ask" else "refuse",
        )
