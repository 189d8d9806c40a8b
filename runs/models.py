"""The run domain: where an agent works, who it is, and the append-only record of what it did."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from .core import status as run_status

SLUG_VALIDATOR = RegexValidator(
    r"^[a-z0-9][a-z0-9-]{0,62}$",
    "Use 1–63 lowercase letters, digits and hyphens, starting with a letter or digit.",
)


class Workspace(models.Model):
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
    allow_unsandboxed_shell = models.BooleanField(
        default=False,
        help_text="Let the shell tool run without bubblewrap where bubblewrap is missing. "
        "Dangerous: the command then sees the whole machine.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
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


class Agent(models.Model):
    """An agent: who it is (identity text), which model it uses and how long it may loop."""

    slug = models.CharField(max_length=63, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(max_length=200)
    identity = models.TextField(help_text="Who the agent is; the first layer of every prompt.")
    model = models.CharField(max_length=100, default="claude-sonnet-4-5")
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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if not self.identity.strip():
            raise ValidationError({"identity": "An agent needs an identity."})


class Run(models.Model):
    """One request handed to an agent, from creation to its final state (SPEC R6, R7)."""

    Status = models.TextChoices("Status", [(s, s.replace("_", " ")) for s in run_status.STATUSES])

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="runs")
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="runs")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs"
    )
    request = models.TextField()
    status = models.CharField(max_length=32, choices=Status, default=run_status.CREATED)
    failure_reason = models.TextField(blank=True)
    # The last event sequence number handed out; incremented under the row lock, so events
    # of one run are numbered 1, 2, 3... in commit order whichever process appends them.
    event_seq = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"])]
        permissions = [
            ("decide_approval", "Can decide approval requests of runs"),
            ("view_dashboards", "Can open the operations and retrospective dashboards"),
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug} run {self.id}"

    @property
    def is_terminal(self) -> bool:
        return self.status in run_status.TERMINAL or self.status == run_status.COMPLETED


class Step(models.Model):
    """One stage of a run's fixed flow (SPEC R4, R7); later issues fill in its artifacts."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="steps")
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=64)
    status = models.CharField(max_length=32, default="running")
    input = models.JSONField(default=dict, blank=True)
    output = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="step_unique_index_per_run")
        ]

    def __str__(self) -> str:
        return f"step {self.index} {self.name}"


class AppendOnlyError(Exception):
    """Raised when code tries to change or remove a recorded run event."""


class RunEventQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnlyError("Run events are append-only; they cannot be updated.")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("Run events are append-only; they cannot be deleted.")


class RunEvent(models.Model):
    """One thing that happened in a run, numbered per run from 1, never changed afterwards.

    The live pages and the replay after a reconnect both read this table: it is the source
    of truth, and the channel layer only carries news of new rows.
    """

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=64)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = RunEventQuerySet.as_manager()

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="run_event_unique_seq"),
            models.CheckConstraint(condition=models.Q(seq__gte=1), name="run_event_seq_from_1"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.seq} {self.type}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError("Run events are append-only; they cannot be updated.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("Run events are append-only; they cannot be deleted.")


class ToolCall(models.Model):
    """One tool call, decided and (when allowed) run; every check is kept (SPEC P6, O4)."""

    STATUSES = [
        ("refused", "refused"),  # the policy did not allow it, or the input was bad
        ("ok", "ok"),
        ("error", "error"),
        ("timeout", "timed out"),
    ]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.PROTECT, related_name="tool_calls"
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="tool_calls")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    tool = models.CharField(max_length=120)
    arguments = models.JSONField(default=dict)
    path = models.CharField(max_length=1024, blank=True)
    decision = models.CharField(max_length=16)
    human_only = models.BooleanField(default=False)
    rule = models.CharField(max_length=63, blank=True)
    reason = models.TextField(blank=True)
    policy_name = models.CharField(max_length=63, blank=True)
    policy_version = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=STATUSES)
    output = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["tool", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.tool} {self.status} ({self.decision})"


class Artifact(models.Model):
    """The full output of a tool call whose result was truncated for the model (SPEC T7)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tool_call = models.ForeignKey(ToolCall, on_delete=models.CASCADE, related_name="artifacts")
    kind = models.CharField(max_length=32, default="full_output")
    content = models.TextField()
    size = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"artifact {self.id} ({self.size} bytes)"


class WriteRecord(models.Model):
    """A write's before and after bytes, its diff and how to undo it (SPEC R8)."""

    tool_call = models.ForeignKey(ToolCall, on_delete=models.PROTECT, related_name="writes")
    order = models.PositiveSmallIntegerField(default=0)
    path = models.CharField(max_length=1024)
    before = models.BinaryField(null=True, blank=True)  # None: the file did not exist
    after = models.BinaryField(null=True, blank=True)  # None: the write removed it
    diff = models.TextField(blank=True)
    rollback = models.JSONField(default=dict)
    rolled_back_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tool_call", "order"]

    def __str__(self) -> str:
        return f"write {self.path}"


class SessionGrant(models.Model):
    """An approver's "remember for this run" (SPEC P4): the same tool on paths matching the
    pattern is allowed without asking again, until the run ends or someone revokes it."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="grants")
    tool = models.CharField(max_length=120)
    path = models.CharField(max_length=500, blank=True)
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["run", "created_at"]

    def __str__(self) -> str:
        return f"{self.tool} on {self.path or '*'}"


class DocIndexEntry(models.Model):
    """One document of a workspace in the search index behind searchDocs (SPEC T3).

    The full-text index itself is SQLite FTS5 (table ``runs_doc_fts``) or a PostgreSQL GIN
    index over a weighted tsvector, created by the migration for the database in use.
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="docs")
    path = models.CharField(max_length=1024)
    title = models.CharField(max_length=300, blank=True)
    content = models.TextField()
    mtime_ns = models.BigIntegerField()
    size = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "path"], name="doc_unique_path")
        ]

    def __str__(self) -> str:
        return self.path
