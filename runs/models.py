"""The run domain: where an agent works, who it is, and the append-only record of what it did."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from policies.models import Agent, EvalAware, EvalTraffic, Workspace

from .core import status as run_status

WAITING_FOR = {run_status.WAITING_FOR_ANSWER: "answer", run_status.WAITING_FOR_APPROVAL: "approval"}


class Run(EvalAware):
    """One request handed to an agent, from creation to its final state (SPEC R6, R7)."""

    EVAL_FLAG = "agent__for_evals"

    # One list of statuses (runs.core.status): the choices are made from it, so the two
    # cannot drift apart; the stubs know only the class form of TextChoices.
    Status = models.TextChoices(  # type: ignore[call-overload]
        "Status", [(s.upper(), (s, s.replace("_", " "))) for s in run_status.STATUSES]
    )

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
    # The structured task of the intake (SPEC R1): intent, risk, parameters, boundaries.
    task = models.JSONField(default=dict, blank=True)
    risk = models.CharField(max_length=16, blank=True)
    # Which model answers: "anthropic", or "offline replay" with the script it plays.
    model_label = models.CharField(max_length=32, blank=True)
    model_name = models.CharField(max_length=100, blank=True)
    replay_script = models.CharField(max_length=500, blank=True)
    # Where the fixed flow is (SPEC R4) and the loop's checkpointed state (R5, R9).
    stage = models.CharField(max_length=32, blank=True, default="intake")
    loop = models.JSONField(default=dict, blank=True)
    verification = models.JSONField(default=dict, blank=True)
    compaction = models.JSONField(default=dict, blank=True)
    # What the run used, recorded with its first prompt (policies.effective_config).
    effective_config = models.JSONField(default=dict, blank=True)
    # The lease (R9): a worker owns the run while lease_expires_at is in the future; every
    # claim increments the fencing token, so a worker that lost its lease cannot write.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_token = models.PositiveBigIntegerField(default=0)
    # Claims that took the run from a worker that stopped holding it (its lease expired):
    # lost workers, not resumes after a person's decision, which claim a released lease.
    lease_takeovers = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The worker (Celery node) that took the run's last dispatch off the queue, cleared at
    # each dispatch: the sweeper sends a run again only when that worker is gone, or when
    # nobody took it and its message cannot still be waiting in the queue.
    received_by = models.CharField(max_length=200, blank=True)
    received_at = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)  # its last message sent
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # Token use summed over the run's model calls (each call's own row has the detail).
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_creation_input_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_input_tokens = models.PositiveBigIntegerField(default=0)
    # The sum of its model calls' costs (SPEC O4); "estimated" when any call's tokens were
    # counted here or had no price, "reported" when every call was priced from the
    # provider's own usage report.
    cost_usd = models.DecimalField(max_digits=20, decimal_places=9, default=0)
    cost_basis = models.CharField(max_length=16, blank=True)
    failure_kind = models.CharField(max_length=32, blank=True)  # runs.core.failures
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "-created_at"]),
            models.Index(fields=["status", "lease_expires_at"], name="run_sweep_idx"),
            # The dashboards' recent windows (throughput, recent failures, reconciliation).
            models.Index(fields=["finished_at"], name="run_finished_idx"),
            models.Index(fields=["created_at"], name="run_created_idx"),  # started last hour
            # The runs list's keyset order (runs.run_pages): newest first, the id breaking ties.
            models.Index(fields=["-created_at", "-id"], name="run_list_idx"),
        ]
        permissions = [
            ("view_dashboards", "Can open the operations and retrospective dashboards"),
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug} run {self.id}"

    @property
    def waiting_for(self) -> str:
        """Who the run waits for: "answer" (its requester), "approval" (an approver), or ""."""
        return WAITING_FOR.get(self.status, "")

    @property
    def is_terminal(self) -> bool:
        return self.status in run_status.TERMINAL or self.status == run_status.COMPLETED

    @property
    def shown_status(self) -> str:
        """``cancelled`` for a cancelled run (stored as failed, kind cancelled), else the
        status: what lists, counts and the run's page show."""
        return run_status.shown_status(self.status, self.failure_kind)

    @property
    def shown_status_label(self) -> str:
        return run_status.LABELS[self.shown_status]


class Step(EvalAware):
    """One stage of a run's fixed flow (SPEC R4, R7), with what went in and came out."""

    EVAL_FLAG = "run__agent__for_evals"

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="steps")
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=64)
    status = models.CharField(max_length=32, default="running")
    input = models.JSONField(default=dict, blank=True)
    output = models.JSONField(default=dict, blank=True)
    input_artifacts = models.JSONField(default=list, blank=True)
    output_artifacts = models.JSONField(default=list, blank=True)
    verification = models.CharField(max_length=16, blank=True)  # "", pass, fail, skipped
    error = models.TextField(blank=True)
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


class RunEventQuerySet(EvalTraffic):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnlyError("Run events are append-only; they cannot be updated.")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("Run events are append-only; they cannot be deleted.")


class RunEvent(models.Model):
    """One thing that happened in a run, numbered per run from 1, never changed afterwards.

    The live pages and the replay after a reconnect both read this table: it is the source
    of truth, and the channel layer only carries news of new rows.
    """

    EVAL_FLAG = "run__agent__for_evals"

    # Looked up by the unique (run, seq) index, which starts with the run: no index of its own.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events", db_index=False)
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


class Message(models.Model):
    """One message of a run's conversation, appended once and never changed (SPEC R9).

    Storage grows with the steps: a turn adds its assistant message and one row per tool
    result; consecutive tool results are joined into one user message when sent.
    """

    # The unique (run, index) index starts with the run: no index of its own.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="messages", db_index=False)
    index = models.PositiveIntegerField()
    role = models.CharField(max_length=16)  # user | assistant
    kind = models.CharField(max_length=16, default="text")  # task | text | assistant | tool_result
    turn = models.PositiveIntegerField(default=0)
    tool_use_id = models.CharField(max_length=120, blank=True)
    content = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="message_unique_index"),
            models.UniqueConstraint(
                fields=["run", "tool_use_id"],
                condition=~models.Q(tool_use_id=""),
                name="message_one_result_per_tool_use",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} message {self.index} ({self.role})"


class ModelCall(models.Model):
    """One model request of a run: its usage is recorded here exactly once (SPEC R11, O4)."""

    # The unique (run, turn) index starts with the run: no index of its own.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="model_calls", db_index=False
    )
    turn = models.PositiveIntegerField()
    label = models.CharField(max_length=32)  # "anthropic" or "offline replay"
    model = models.CharField(max_length=100)
    request_id = models.CharField(max_length=200, blank=True)
    stop_reason = models.CharField(max_length=32)
    text = models.TextField(blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_creation_input_tokens = models.PositiveIntegerField(default=0)
    cache_read_input_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(default=0)
    # What the prompt held, layer by layer, with the compaction in force (runs.core.
    # turn_figures): empty for turns recorded before it was kept.
    context = models.JSONField(default=dict, blank=True)
    # Priced when recorded, with the price version then in force (SPEC O4); null when the
    # price table has no price for the model.
    cost_usd = models.DecimalField(max_digits=20, decimal_places=9, null=True, blank=True)
    cost_basis = models.CharField(max_length=16, blank=True)  # runs.observability.core.cost
    price = models.ForeignKey(
        "ModelPrice", null=True, blank=True, on_delete=models.PROTECT, related_name="calls"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "turn"]
        constraints = [
            models.UniqueConstraint(fields=["run", "turn"], name="model_call_once_per_turn")
        ]

    def __str__(self) -> str:
        return f"{self.run_id} turn {self.turn}"


class ToolCall(EvalAware):
    """One tool call, decided and (when allowed) run; every check is kept (SPEC P6, O4)."""

    EVAL_FLAG = "run__agent__for_evals"

    STATUSES = [
        ("running", "running"),  # started; a worker that died here is reconciled on resume
        ("refused", "refused"),  # the policy did not allow it, or the input was bad
        ("ok", "ok"),
        ("error", "error"),
        ("timeout", "timed out"),
        # The policy asks a person: the record handed back to the loop, which asks one; it
        # is never stored with this status (the decision's record is, refused or run).
        ("ask", "asks a person"),
    ]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The (run, tool) index starts with the run: no index of its own.
    run = models.ForeignKey(
        Run,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="tool_calls",
        db_index=False,
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="tool_calls")
    # Set only when a caller of the tool door names the person asking (its ``user``);
    # a run's calls never do, nor does manage.py call_tool: indexed (below) only where set.
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, db_index=False
    )
    # The model's tool_use id (or the harness's own, such as commit:<path>): one call per id.
    tool_use_id = models.CharField(max_length=200, blank=True)
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
    # Before a write tool runs, the bytes of the files it may touch (base64; None: absent),
    # so a worker that died mid-call can tell on resume whether the write happened.
    pre_images = models.JSONField(default=dict, blank=True)
    # Not a column: the paths the call wrote, set when it is recorded (saves a query for its
    # event and its trace); None on a call read back from the database.
    written_paths: list[str] | None = None
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # indexed (below) only where set: a person approved the call
    )
    # When the call began: set as the record is made, before any check or effect (a call
    # that changes nothing is inserted only with its result)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["tool", "-started_at"]),
            # The runs list's "runs that called this tool" (the dashboards' tool links).
            models.Index(fields=["run", "tool"], name="tool_call_run_tool_idx"),
            # The operations dashboard's recent refusals (runs.refusals).
            models.Index(fields=["status", "-started_at"], name="tool_call_status_idx"),
            # The people's keys, for the SET NULL of a deleted user, only where there is
            # one: most calls are a run's own, asked by no one and approved by no one, and
            # an index they are not in costs their insert nothing (a step writes a page
            # less per index; bench/loop.py).
            models.Index(
                fields=["requested_by"],
                condition=models.Q(requested_by__isnull=False),
                name="tool_call_requested_by_idx",
            ),
            models.Index(
                fields=["approved_by"],
                condition=models.Q(approved_by__isnull=False),
                name="tool_call_approved_by_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "tool_use_id"],
                condition=~models.Q(tool_use_id=""),
                name="tool_call_once_per_tool_use",
            )
        ]

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


class ModelPrice(models.Model):
    """One version of a model's price (SPEC O4). A price is never rewritten: a change is a
    new version from a moment on, so every recorded cost keeps the price it was made with."""

    model = models.CharField(
        max_length=100,
        help_text="A model name, or its family prefix (claude-sonnet-4-6 also prices "
        "claude-sonnet-4-6-20260115); the longest match wins.",
    )
    version = models.PositiveIntegerField(editable=False)
    effective_from = models.DateTimeField(
        help_text="Calls from this moment on use this price (until a newer version)."
    )
    input_per_mtok = models.DecimalField(
        "input $/Mtok", max_digits=12, decimal_places=6, validators=[MinValueValidator(0)]
    )
    output_per_mtok = models.DecimalField(
        "output $/Mtok", max_digits=12, decimal_places=6, validators=[MinValueValidator(0)]
    )
    cache_write_per_mtok = models.DecimalField(
        "cache write $/Mtok", max_digits=12, decimal_places=6, validators=[MinValueValidator(0)]
    )
    cache_read_per_mtok = models.DecimalField(
        "cache read $/Mtok", max_digits=12, decimal_places=6, validators=[MinValueValidator(0)]
    )
    note = models.CharField(max_length=300, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["model", "version"], name="model_price_unique_version")
        ]

    def __str__(self) -> str:
        return f"{self.model} v{self.version}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("Prices are never rewritten; save a new version.")
        super().save(*args, **kwargs)


class DailyRollup(EvalAware):
    """One day's figures for one agent in one workspace (runs.observability.core.rollup):
    the dashboards and /metrics read these, a bounded number of rows whatever the history's
    size."""

    EVAL_FLAG = "agent__for_evals"

    day = models.DateField()
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    data = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["day", "agent", "workspace"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "agent", "workspace"], name="daily_rollup_one_cell"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.agent_id}/{self.workspace_id}"


class RollupDelta(models.Model):
    """What one run's end adds to its day's cell and total, until a fold moves it there
    (``runs.observability.rollups.rollups_fold``). A run that ends only inserts this row:
    every run of a day ends by changing the same two rows (its cell and the day's total),
    and with the runs of a busy machine ending together, each waited on the one before it
    for their locks. No index but the key: inserted once, read once in key order, deleted."""

    day = models.DateField()
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    data = models.JSONField()

    def __str__(self) -> str:
        return f"{self.day} {self.agent_id}/{self.workspace_id} (pending)"


class DailyTotal(models.Model):
    """One day's figures over every agent and workspace: the sum of that day's rollup
    cells, kept with them, so the unfiltered retrospective reads thirty rows, not thirty
    times agents times workspaces."""

    day = models.DateField(unique=True)
    data = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["day"]

    def __str__(self) -> str:
        return str(self.day)
