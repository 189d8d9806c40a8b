"""The eval set's records (SPEC E1): the console's own cases, each suite run and each case's
verdict in it. They were the runs app's; their tables keep their names (runs_evalcase,
runs_evalsuiterun, runs_evalresult), moved without copying a row."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from policies.models import SLUG_VALIDATOR

from .core.cases import CATEGORIES


class EvalCase(models.Model):
    """A case of the eval set kept in the console (SPEC E1): the historical failures an
    operator adds from a failed run's page. Shipped cases are JSON files (``evals/``); both
    are parsed by ``evals.core.parsing.case_parse``, so a case here is exactly a file's object."""

    name = models.CharField(max_length=48, unique=True, validators=[SLUG_VALIDATOR])
    category = models.CharField(max_length=16, default="historical")
    title = models.CharField(max_length=300)
    data = models.JSONField()
    source_run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="eval_cases"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    active = models.BooleanField(default=True, help_text="Inactive cases are not run.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "runs_evalcase"
        ordering = ["name"]
        verbose_name = "eval case"

    def __str__(self) -> str:
        return self.name


class EvalSuiteRun(models.Model):
    """One run of the eval set (``manage.py run_evals``, or started from the evals page and
    run by a worker): what was run, against which model, how far it has got and how many
    cases passed per category.

    While it runs, ``passed``, ``failed`` and ``skipped`` count the cases judged so far out
    of ``total`` (0 until the cases are laid out), and ``heartbeat_at`` is its runner's
    last sign of life: one silent for longer than ``HARNESS_EVAL_LEASE_SECONDS`` is marked
    abandoned (``evals.progress.suites_abandoned_mark``)."""

    class Status(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        ERROR = "error"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    model = models.CharField(max_length=16)  # replay | anthropic
    category = models.CharField(max_length=16, blank=True)  # "": every category
    status = models.CharField(max_length=16, choices=Status, default=Status.RUNNING)
    started_by = models.CharField(max_length=150, blank=True)
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)  # category -> {passed, failed}
    total = models.PositiveIntegerField(default=0)  # cases to judge, broken ones included
    error = models.TextField(blank=True)
    worker = models.CharField(max_length=200, blank=True)  # who runs it: "" until claimed
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "runs_evalsuiterun"
        ordering = ["-started_at"]
        verbose_name = "eval suite run"
        constraints = [  # one suite at a time: the per-case workspaces are shared
            models.UniqueConstraint(
                fields=["status"], condition=models.Q(status="running"), name="one_running_suite"
            )
        ]

    def __str__(self) -> str:
        return f"eval suite {self.started_at:%Y-%m-%d %H:%M} ({self.model})"

    @property
    def done(self) -> int:
        """Cases judged so far (skipped ones included)."""
        return self.passed + self.failed + self.skipped

    @property
    def summary_ordered(self) -> list[tuple[str, dict[str, int]]]:
        """The per-category counts in the categories' order (PostgreSQL's jsonb keeps no
        key order), broken case files last."""
        rank = {name: i for i, name in enumerate(CATEGORIES)}
        return sorted(self.summary.items(), key=lambda item: (rank.get(item[0], 99), item[0]))


class EvalResult(models.Model):
    """One case's verdict in one suite run, with every reason it failed and its run."""

    suite = models.ForeignKey(EvalSuiteRun, on_delete=models.CASCADE, related_name="results")
    case = models.CharField(max_length=48)
    category = models.CharField(max_length=16)
    title = models.CharField(max_length=300, blank=True)
    source = models.CharField(max_length=300, blank=True)  # a file, or "console"
    passed = models.BooleanField()
    skipped = models.BooleanField(default=False)
    failures = models.JSONField(default=list, blank=True)
    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="eval_results"
    )
    seconds = models.FloatField(default=0)

    class Meta:
        db_table = "runs_evalresult"
        ordering = ["suite", "category", "case"]
        constraints = [
            models.UniqueConstraint(fields=["suite", "case"], name="eval_result_once_per_case")
        ]

    def __str__(self) -> str:
        return f"{self.case}: {'passed' if self.passed else 'failed'}"
