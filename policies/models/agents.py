"""Agents and the workspaces they work in: what admins configure about who works, and where.

They were the runs app's first models; their tables keep the names ``runs_agent`` and
``runs_workspace`` (moved without copying a row).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from .eval_traffic import EvalAware

SLUG_VALIDATOR = RegexValidator(
    r"^[a-z0-9][a-z0-9-]{0,62}$",
    "Use 1–63 lowercase letters, digits and hyphens, starting with a letter or digit.",
)


class Workspace(EvalAware):
    """A folder the agent works in; its drafts live apart so formal files stay untouched (T5)."""

    slug = models.CharField(max_length=63, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(max_length=200)
    root = models.CharField(
        max_length=1000, help_text="Absolute path of the folder the agent works in."
    )
    context_file = models.CharField(
        max_length=500,
        blank=True,
        default="README.md",
        help_text="The project context file, relative to the workspace; empty for none.",
    )
    drafts_root = models.CharField(
        max_length=1000,
        blank=True,
        help_text="Absolute path of the drafts area; empty means var/drafts/<slug>.",
    )
    publish_root = models.CharField(
        max_length=1000,
        blank=True,
        help_text="Absolute path publish copies the workspace to; empty: publishing is off.",
    )
    for_evals = models.BooleanField(
        default=False,
        editable=False,
        help_text="Made by the eval set for one case; never offered for tasks.",
    )
    allow_unsandboxed_shell = models.BooleanField(
        default=False,
        help_text="Let the shell tool run without bubblewrap where bubblewrap is missing. "
        "Dangerous: the command then sees the whole machine.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "runs_workspace"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def root_path(self) -> Path:
        return Path(self.root)

    @property
    def drafts_path(self) -> Path:
        if self.drafts_root:
            return Path(self.drafts_root)
        return Path(settings.VAR_DIR) / "drafts" / self.slug

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        errors = {}
        if not Path(self.root).is_absolute():
            errors["root"] = "Give an absolute path."
        elif not Path(self.root).is_dir():
            errors["root"] = f"{self.root} is not an existing folder."
        if self.context_file and (
            Path(self.context_file).is_absolute() or ".." in Path(self.context_file).parts
        ):
            errors["context_file"] = "Give a path inside the workspace, like README.md."
        if self.drafts_root and not Path(self.drafts_root).is_absolute():
            errors["drafts_root"] = "Give an absolute path, or leave empty."
        elif self.drafts_root and Path(self.drafts_root).resolve().is_relative_to(
            Path(self.root).resolve()
        ):
            errors["drafts_root"] = (
                "Keep drafts outside the workspace, so drafts never mix with formal files."
            )
        if errors:
            raise ValidationError(errors)


class Agent(EvalAware):
    """An agent: who it is (identity text), which model it uses and how long it may loop."""

    slug = models.CharField(max_length=63, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(max_length=200)
    identity = models.TextField(help_text="Who the agent is; the first layer of every prompt.")
    model = models.CharField(max_length=100, default="claude-sonnet-4-6")
    policy = models.ForeignKey(
        "policies.Policy",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="agents",
        help_text="Its permission policy; empty means the policy named default.",
    )
    max_turns = models.PositiveIntegerField(
        default=50, validators=[MinValueValidator(1), MaxValueValidator(1000)]
    )
    # Message compaction (SPEC R10): whole below the first, summarized above it, the oldest
    # summaries dropped above the second; the newest turns always stay whole.
    compaction_whole_tokens = models.PositiveIntegerField(
        default=24_000, validators=[MinValueValidator(1_000), MaxValueValidator(2_000_000)]
    )
    compaction_summary_tokens = models.PositiveIntegerField(
        default=48_000, validators=[MinValueValidator(2_000), MaxValueValidator(4_000_000)]
    )
    compaction_keep_turns = models.PositiveSmallIntegerField(
        default=4, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    for_evals = models.BooleanField(
        default=False,
        editable=False,
        help_text="Made by the eval set to run its cases; never offered for tasks.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "runs_agent"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if not self.identity.strip():
            raise ValidationError({"identity": "An agent needs an identity."})
        if self.compaction_summary_tokens <= self.compaction_whole_tokens:
            raise ValidationError(
                {
                    "compaction_summary_tokens": "Must be above the whole-messages threshold "
                    f"({self.compaction_whole_tokens})."
                }
            )
