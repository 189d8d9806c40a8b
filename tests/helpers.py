"""Plain helpers the test modules share: the texts of the broken-link task, a run driven in
this process, a browser logged in and its console errors. Fixtures live in conftest.py; these
are the constants a test compares against and the functions it calls, so that every module
drives a run and logs a person in the same way and a change to either is made once."""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from django.conf import settings
from django.db import connection

from runs import flow
from runs.models import Run
from runs.services import run_create

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.test import Client
    from playwright.sync_api import Page

    from policies.models import Agent, Workspace

    from .conftest import Personas
    from .stack import LiveStack

# docs/configuration.md before and after the fix-link replay (tests/replays/fix-link.json).
BROKEN = "# Configuration\n\nSee [the guide](getting-startd.md).\n"
FIXED = "# Configuration\n\nSee [the guide](getting-started.md).\n"
# The request the fix-link replay answers.
FIX = "Fix the broken link in docs/configuration.md"
# In-process drives claim the run's lease under this name; no test reads it back.
WORKER = "test-worker"


def drive(run: Run | UUID | str) -> Run:
    """Run the flow in this process, as a worker would, until the run waits for a person or
    ends; then the run as the database has it now.

    A ``Run`` is refreshed in place (callers that ignore the result still see its new
    status); an id, as the API returns it, is loaded afresh.
    """
    if isinstance(run, Run):
        flow.run_drive(run_id=run.pk, worker=WORKER)
        run.refresh_from_db()
        return run
    flow.run_drive(run_id=run, worker=WORKER)
    return Run.objects.get(pk=run)


def driven(
    personas: Personas,
    agent: Agent,
    workspace: Workspace,
    request: str = FIX,
    user: User | None = None,
) -> Run:
    """A run submitted by ``user`` (the operator unless told) and handed to no worker, then
    driven in this process until it waits for a person or ends."""
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=user or personas.operator,
        request=request,
        dispatch=False,
    )
    return drive(run)


def session_cookie_for(client: Client, user: User) -> dict[str, str]:
    """The session cookie of ``user``, logged in through the test client rather than the
    login form: a browser or a plain HTTP request to the live stack starts as that person."""
    client.force_login(user)
    return {
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
    }


def login(page: Page, stack: LiveStack, client: Client, user: User) -> None:
    """The browser's next request to the live stack arrives as ``user``."""
    page.context.add_cookies([{**session_cookie_for(client, user), "url": stack.url}])


def console_errors(page: Page) -> list[str]:
    """Every console error and uncaught exception of the page, from now on: a page that
    looks right can still have a script that broke."""
    errors: list[str] = []
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def eval_history(suites: int, days: int = 30) -> None:
    """``suites`` finished runs of the eval set over the last ``days`` days, each with
    judged cases in three categories: what the evals page's pass-rate chart draws."""
    from datetime import timedelta

    from django.utils import timezone

    from evals.models import EvalResult, EvalSuiteRun

    now = timezone.now()
    for n in range(suites):
        row = EvalSuiteRun.objects.create(model="replay", status="finished")
        started = now - timedelta(days=days) * (suites - n) / suites
        EvalSuiteRun.objects.filter(pk=row.pk).update(started_at=started, finished_at=started)
        for category in ("simple", "boundary", "malicious"):
            for case in range(4):
                EvalResult.objects.create(
                    suite=row,
                    case=f"{category}-{case}",
                    category=category,
                    passed=(n + case) % 5 != 0,
                )


def direct_connection_params() -> dict[str, object]:
    """The test database's parameters for a plain psycopg connection of its own, outside
    Django and its pool (a fault's, or an observer's)."""
    params = connection.get_connection_params()
    for django_only in ("cursor_factory", "context", "pool"):
        params.pop(django_only, None)
    return params
