"""``python manage.py generate_history --runs N --days D``: a synthetic history of runs."""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from harness_console.roles import APPROVER, OPERATOR
from runs.observability.synthetic import synthetic_runs_generate


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = (
        "Create N finished runs over the last D days (model calls, tool calls, approvals, "
        "costs, failures) with the existing agents and workspaces, then rebuild the rollups."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=_positive, required=True, help="How many runs.")
        parser.add_argument(
            "--days", type=_positive, default=30, help="Spread over the last D days (30)."
        )
        parser.add_argument("--seed", type=int, default=1, help="Same seed, same history.")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        requester = (
            User.objects.filter(groups__name=OPERATOR).order_by("pk").first()
            or User.objects.order_by("pk").first()
        )
        if requester is None:
            raise CommandError("No users yet: run `python manage.py seed_demo` first.")
        approvers = list(User.objects.filter(groups__name=APPROVER).order_by("pk"))
        started = time.monotonic()
        step = max(1, options["runs"] // 20)

        def progress(done: int) -> None:
            if done % step < 2000 or done == options["runs"]:
                self.stdout.write(f"  {done:,} runs written")

        try:
            summary = synthetic_runs_generate(
                runs=options["runs"],
                days=options["days"],
                seed=options["seed"],
                requester=requester,
                approvers=approvers,
                progress=progress if options["verbosity"] > 0 else None,
            )
        except ValueError as error:
            raise CommandError(f"{error} Run `python manage.py seed_demo` first.") from None
        self.stdout.write(
            self.style.SUCCESS(
                f"Created {summary.runs:,} runs, {summary.model_calls:,} model calls, "
                f"{summary.tool_calls:,} tool calls and {summary.approvals:,} approvals "
                f"from {summary.first_day} to {summary.last_day} "
                f"in {time.monotonic() - started:.1f} s; rollups rebuilt."
            )
        )
