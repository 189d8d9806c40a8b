"""A suite started from the evals page (SPEC E1, issue 19 point 4), in-process: who may
start one (ops and admins; CSRF on), every bad input a clear 400 that starts nothing, a
second suite refused with a 409 at the one place that refuses it, the worker's task queued
only once the suite is committed, and on the default queue; the progress fragment, over
HTTP and over the WebSocket as a case is judged; and a suite whose runner died ended by
the sweeper, with the runs it left cancelled. The suite running for real in a worker,
watched from Chromium, is in test_eval_pages_browser."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from evals.fixtures import eval_user
from evals.models import EvalSuiteRun
from evals.progress import Progress, SuiteAbandoned, suites_abandoned_mark
from evals.starting import SUITE_EXECUTE, suite_run_claimed
from harness_console.celery import app
from policies.models import Agent, Workspace
from runs.models import Run
from tests.conftest import EVERYWHERE
from tests.test_run_websocket import _connect, _receive_all, cookie

START = "/evals/start/"
SOCKET = "/ws/evals/"


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, list]]:
    """Every task the console hands to the broker, instead of handing it over."""
    calls: list[tuple[str, list]] = []
    monkeypatch.setattr(app, "send_task", lambda name, args=(), **kw: calls.append((name, args)))
    return calls


@pytest.fixture
def no_key(monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def running(started_by: str = "ci", **fields) -> EvalSuiteRun:
    return EvalSuiteRun.objects.create(model="replay", started_by=started_by, **fields)


def silent_for(suite: EvalSuiteRun, seconds: float) -> None:
    EvalSuiteRun.objects.filter(pk=suite.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=seconds)
    )


# --- who may start one -----------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("who", ["approver", "operator", "outsider"])
def test_only_ops_and_admins_may_start_a_suite(client, personas, sent, who):
    client.force_login(getattr(personas, who))
    assert client.post(START, {"category": "simple", "model": "replay"}).status_code == 403
    assert not EvalSuiteRun.objects.exists() and sent == []


@pytest.mark.django_db
def test_an_anonymous_start_is_sent_to_log_in_and_starts_nothing(client, sent):
    response = client.post(START, {"model": "replay"})
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert not EvalSuiteRun.objects.exists() and sent == []


@pytest.mark.django_db
def test_starting_a_suite_needs_the_csrf_token_and_a_post(personas, sent):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(personas.ops)
    assert strict.post(START, {"model": "replay"}).status_code == 403
    assert strict.get(START).status_code == 405
    assert not EvalSuiteRun.objects.exists() and sent == []


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["ops", "admin"])
def test_the_start_form_is_offered_to_who_may_start_and_only_them(client, personas, no_key, who):
    client.force_login(getattr(personas, who))
    html = client.get(reverse("evals:index")).content.decode()
    assert 'id="eval-start-form"' in html and f'action="{START}"' in html
    assert re.search(r'<option value="malicious">malicious</option>', html)
    # No key: the live model is not offered (it could not run), and the page says why.
    assert 'value="anthropic"' not in html and 'id="eval-start-no-key"' in html
    client.force_login(personas.approver)
    html = client.get(reverse("evals:index")).content.decode()
    assert 'id="eval-start-form"' not in html and 'id="eval-progress"' in html


@pytest.mark.django_db
def test_with_a_key_the_live_model_is_offered(client, personas, api_key):
    client.force_login(personas.ops)
    html = client.get(reverse("evals:index")).content.decode()
    assert '<option value="anthropic">Anthropic API</option>' in html
    assert 'id="eval-start-no-key"' not in html


# --- bad input -------------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("posted", "said"),
    [
        ({"category": "easy", "model": "replay"}, "easy is not a category"),
        ({"category": "simple", "model": "anthropic"}, "needs ANTHROPIC_API_KEY"),
        ({"category": "simple", "model": "gpt-9"}, "gpt-9 is not a model"),
        ({"category": "simple"}, "Model: This field is required"),
        ({"category": "simple" * 50, "model": "replay"}, "is not a category"),
    ],
)
def test_each_bad_input_is_a_clear_400_that_starts_nothing(
    client, personas, sent, no_key, posted, said
):
    client.force_login(personas.ops)
    response = client.post(START, posted)
    html = response.content.decode()
    assert response.status_code == 400
    assert said in html and 'id="eval-start-errors"' in html
    assert not EvalSuiteRun.objects.exists() and sent == []


# --- a good start ----------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_suite_is_begun_and_its_task_queued_once_committed(
    client, personas, sent, django_capture_on_commit_callbacks
):
    client.force_login(personas.ops)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(START, {"category": "malicious", "model": "replay"})
        assert sent == []  # nothing is handed over before the suite is committed
    suite = EvalSuiteRun.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('evals:index')}#eval-run"
    assert (suite.status, suite.category, suite.model) == ("running", "malicious", "replay")
    assert (suite.started_by, suite.worker, suite.total) == ("olga-ops", "", 0)
    for callback in callbacks:
        callback()
    assert sent == [(SUITE_EXECUTE, [str(suite.pk)])]
    route = app.amqp.router.route({}, SUITE_EXECUTE)
    assert route["queue"].name == settings.CELERY_TASK_DEFAULT_QUEUE
    html = client.get(response["Location"]).content.decode()
    assert "Started a suite of malicious" in html
    assert re.search(r'id="eval-progress"[^>]*data-status="running"', html)
    assert "Waiting for a worker to take it" in html
    assert re.search(r'<button type="submit" disabled>Start the suite</button>', html)


@pytest.mark.django_db
def test_a_second_suite_is_refused_with_a_409_while_one_runs(client, personas, sent):
    first = running(started_by="ci")
    client.force_login(personas.admin)
    response = client.post(START, {"category": "", "model": "replay"})
    html = response.content.decode()
    assert response.status_code == 409
    assert "Another eval suite is running" in html and "by ci" in html
    assert list(EvalSuiteRun.objects.values_list("pk", flat=True)) == [first.pk] and sent == []


@EVERYWHERE
def test_a_suite_whose_runner_fell_silent_blocks_no_one(client, personas, sent):
    dead = running(started_by="ci", worker="w1@host:12")
    silent_for(dead, settings.HARNESS_EVAL_LEASE_SECONDS + 5)
    client.force_login(personas.ops)
    assert client.post(START, {"model": "replay"}).status_code == 302
    dead.refresh_from_db()
    assert dead.status == "error" and dead.finished_at is not None
    assert dead.error.startswith("abandoned: its runner (w1@host:12) showed no sign of life")
    assert EvalSuiteRun.objects.filter(status="running").count() == 1 and len(sent) == 1


@EVERYWHERE
def test_a_suite_the_broker_would_not_take_ends_at_once_and_says_so(client, personas, monkeypatch):
    def refuse(*args, **kwargs):
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(app, "send_task", refuse)
    client.force_login(personas.ops)
    assert client.post(START, {"model": "replay"}).status_code == 302
    suite = EvalSuiteRun.objects.get()
    assert suite.status == "error"
    assert suite.error == "it could not be handed to a worker: broker unreachable"


@pytest.mark.django_db
def test_a_worker_runs_only_a_suite_it_claims(personas):
    """A second delivery of the task, or one for a suite that ended, does nothing."""
    ended = running()
    EvalSuiteRun.objects.filter(pk=ended.pk).update(status="error")
    assert suite_run_claimed(suite_id=str(ended.pk), worker="w2@host:2") is None
    taken = running(worker="w1@host:1")
    assert suite_run_claimed(suite_id=str(taken.pk), worker="w2@host:2") is None
    assert EvalSuiteRun.objects.get(pk=taken.pk).worker == "w1@host:1"
    assert EvalSuiteRun.objects.get(pk=ended.pk).worker == ""


# --- progress --------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_progress_fragment_says_cases_done_passes_and_failures(client, personas):
    suite = running(started_by="olga-ops", category="simple", total=10, passed=6, failed=1)
    client.force_login(personas.approver)
    response = client.get(reverse("evals:index"), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert re.search(r'data-done="7" data-total="10">7 of 10</b> cases done', html)
    assert "6 passed" in html and "1 failed" in html and 'value="7"' in html
    assert reverse("evals:suite", kwargs={"suite_id": suite.pk}) in html
    assert "eval-start-action" not in html  # the button travels only over the socket
    EvalSuiteRun.objects.filter(pk=suite.pk).update(status="finished", passed=9)
    html = client.get(reverse("evals:index"), {"fragment": "1"}).content.decode()
    assert "Finished" in html and "10 of 10" in html and 'id="eval-progress-report"' in html
    assert reverse("evals:report", kwargs={"suite_id": suite.pk}) in html
    client.force_login(personas.operator)
    assert client.get(reverse("evals:index"), {"fragment": "1"}).status_code == 403


@EVERYWHERE
def test_each_judged_case_reaches_the_evals_socket_as_its_progress(client, personas):
    suite = running(started_by="olga-ops", category="simple")
    session = cookie(client, personas.ops)

    async def scenario():
        ws, connected, _ = await _connect(SOCKET, cookie=session)
        assert connected
        first = await ws.receive_from(timeout=10)  # what the page missed before it connected
        await database_sync_to_async(Progress(suite.pk).total)(3)
        await _receive_all(ws, timeout=1.0)
        await database_sync_to_async(Progress(suite.pk).recorded)("failed", "FAIL simple/x")
        frames = await _receive_all(ws, timeout=1.0)
        await ws.disconnect()
        return first, frames

    first, frames = async_to_sync(scenario)()
    assert 'id="eval-progress" class="eval-progress" hx-swap-oob="true"' in first
    assert "Laying out the cases" not in first and "Waiting for a worker" in first
    button = '<span id="eval-start-action" hx-swap-oob="true"><button type="submit" disabled>'
    assert button in first  # a suite runs: none can start
    assert frames and "1 of 3</b> cases done" in frames[-1] and "1 failed" in frames[-1]


@EVERYWHERE
def test_the_approver_hears_the_progress_without_the_start_button(client, personas):
    running(total=2, passed=1)
    session = cookie(client, personas.approver)

    async def scenario():
        ws, connected, _ = await _connect(SOCKET, cookie=session)
        frame = await ws.receive_from(timeout=10) if connected else ""
        await ws.disconnect()
        return connected, frame

    connected, frame = async_to_sync(scenario)()
    assert connected and "1 of 2</b> cases done" in frame and "eval-start-action" not in frame


@EVERYWHERE
@pytest.mark.parametrize("who,code", [("operator", 4403), ("outsider", 4403), (None, 4401)])
def test_the_evals_socket_refuses_who_may_not_see_the_evals(client, personas, who, code):
    session = cookie(client, getattr(personas, who)) if who else None

    async def scenario():
        ws, connected, closed = await _connect(SOCKET, cookie=session)
        await ws.disconnect()
        return connected, closed

    assert async_to_sync(scenario)() == (False, code)


# --- a runner that died ----------------------------------------------------------------------
@pytest.mark.django_db
def test_the_sweeper_ends_silent_suites_and_cancels_the_runs_they_left(personas, tmp_path):
    lease = settings.HARNESS_EVAL_LEASE_SECONDS
    claimed = running(worker="w1@host:1")
    silent_for(claimed, lease + 1)
    agent = Agent.objects.create(slug="eval-abc", name="Eval agent", identity="x", for_evals=True)
    space = Workspace.objects.create(
        slug="eval-case", name="Eval: a case", root=str(tmp_path), for_evals=True
    )
    left = Run.objects.create(
        agent=agent,
        workspace=space,
        requester=eval_user(),
        request="Delete docs/old.md",
        status="waiting_for_approval",
    )
    assert suites_abandoned_mark() == 1
    claimed.refresh_from_db()
    assert claimed.status == "error" and claimed.finished_at is not None
    assert claimed.error == (
        f"abandoned: its runner (w1@host:1) showed no sign of life for {lease:g} s"
    )
    left.refresh_from_db()
    assert (left.status, left.failure_kind) == ("failed", "cancelled")
    # One no worker ever took says so; one alive within its lease is left alone.
    unclaimed = running()
    silent_for(unclaimed, lease + 1)
    assert suites_abandoned_mark() == 1
    unclaimed.refresh_from_db()
    assert unclaimed.error == f"abandoned: no worker took it within {lease:g} s"
    alive = running(worker="w2@host:2")
    silent_for(alive, lease - 5)
    assert suites_abandoned_mark() == 0
    assert EvalSuiteRun.objects.get(pk=alive.pk).status == "running"


@pytest.mark.django_db
def test_a_runner_whose_suite_was_ended_stops_at_its_next_sign_of_life(personas, settings):
    settings.HARNESS_EVAL_LEASE_SECONDS = 0.06  # a beat is due every 10 ms
    suite = running(worker="w1@host:1")
    progress = Progress(suite.pk)
    progress.last_beat -= 1
    progress.beat()  # alive: renewed
    EvalSuiteRun.objects.filter(pk=suite.pk).update(status="error", error="abandoned: ...")
    progress.last_beat -= 1
    with pytest.raises(SuiteAbandoned, match="marked abandoned while it ran"):
        progress.beat()


def test_beat_sweeps_abandoned_suites_on_the_housekeeping_queue():
    entry = settings.CELERY_BEAT_SCHEDULE["sweep-abandoned-suites"]
    assert entry["task"] == "evals.tasks.suites_sweep"
    assert app.amqp.router.route({}, entry["task"])["queue"].name == settings.HOUSEKEEPING_QUEUE
