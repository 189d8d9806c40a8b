"""A real browser on a real daphne, events from a real Celery worker (SPEC L1)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from runs.events import run_event_append as _append
from runs.models import Run
from runs.services import run_create
from tests.conftest import EVERYWHERE, PASSWORD
from tests.helpers import FIX, login
from tests.stack import off_loop

pytestmark = [EVERYWHERE, pytest.mark.browser]


def run_event_append(**kwargs):
    return off_loop(_append, **kwargs)


def _held(run: Run) -> Run:
    """A lease nobody renews, for a day: the live stack's sweeper leaves this run alone, so
    the timeline tests below are the only ones writing its events."""
    Run.objects.filter(pk=run.pk).update(
        lease_owner="tests: not for a worker", lease_expires_at=timezone.now() + timedelta(days=1)
    )
    return run


@pytest.fixture
def run(personas, agent, workspace):
    created = off_loop(
        run_create,
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=FIX,
        dispatch=False,
    )
    return off_loop(_held, run=created)


def open_run_page(page: Page, stack, run: Run) -> None:
    page.goto(f"{stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-live-status")).to_have_text("live", timeout=15_000)


def timeline_seqs(page: Page) -> list[int]:
    return [
        int(s)
        for s in page.locator("#run-timeline li[data-seq]").evaluate_all(
            "items => items.map(li => li.dataset.seq)"
        )
    ]


@pytest.mark.usefixtures("seeded")
def test_an_approver_follows_a_run_live_and_approves_it_in_the_browser(
    live_stack, page, client, personas, agent, workspace, docs
):
    run = off_loop(
        run_create, agent=agent, workspace=workspace, requester=personas.operator, request=FIX
    )
    login(page, live_stack, client, personas.approver)
    open_run_page(page, live_stack, run)
    expect(page.locator("#run-status")).to_have_text("waiting_for_approval", timeout=30_000)
    expect(page.locator("#run-progress")).to_have_text("turn 3 of 50")
    expect(page.locator("#run-timeline")).to_contain_text("patchDraft")
    expect(page.locator("#run-model")).to_contain_text("offline replay")
    card = page.locator("#run-approvals")
    expect(card).to_contain_text("+See [the guide](getting-started.md).", timeout=15_000)
    card.get_by_role("button", name="Approve").click()
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    expect(page.locator("#run-rollback")).to_be_visible(timeout=15_000)
    assert "getting-started.md" in (docs / "configuration.md").read_text()
    seqs = timeline_seqs(page)
    assert seqs == list(range(1, len(seqs) + 1))


def test_reopening_the_page_shows_each_event_exactly_once(live_stack, page, client, personas, run):
    login(page, live_stack, client, personas.approver)
    open_run_page(page, live_stack, run)
    run_event_append(run_id=run.pk, type="note", payload={"text": "while open"})
    expect(page.locator("#run-event-2")).to_be_visible(timeout=15_000)
    page.close()

    for i in range(3):  # the page is closed: these reach it only through the replay
        run_event_append(run_id=run.pk, type="note", payload={"text": f"while closed {i}"})
    page = page.context.new_page()
    open_run_page(page, live_stack, run)
    run_event_append(run_id=run.pk, type="note", payload={"text": "after reopening"})
    expect(page.locator("#run-event-6")).to_be_visible(timeout=15_000)
    assert timeline_seqs(page) == [1, 2, 3, 4, 5, 6]

    # A socket that starts from an older cursor replays exactly the missing events, once.
    frames = page.evaluate(
        """([url]) => new Promise((resolve) => {
            const got = []; const ws = new WebSocket(url);
            ws.onmessage = (m) => got.push(m.data);
            setTimeout(() => { ws.close(); resolve(got); }, 1500);
        })""",
        [live_stack.url.replace("http", "ws") + f"/ws/runs/{run.pk}/?after=3"],
    )
    replayed = [int(s) for f in frames for s in re.findall(r'id="run-event-(\d+)"', f)]
    assert replayed == [4, 5, 6]


def test_the_page_reconnects_after_the_socket_drops_without_duplicates(
    live_stack, page, client, personas, run
):
    login(page, live_stack, client, personas.ops)
    open_run_page(page, live_stack, run)
    run_event_append(run_id=run.pk, type="note", payload={"text": "before the drop"})
    expect(page.locator("#run-event-2")).to_be_visible(timeout=15_000)
    # Drop the socket the way a restarting server does (1012: service restart); the page
    # was rendered with after=1, so a naive reconnect would replay event 2 a second time.
    page.evaluate("""() => {
        const ws = document.getElementById('run-live')['htmx-internal-data'].webSocket.socket;
        const onclose = ws.onclose; ws.onclose = null; ws.close(); onclose({code: 1012});
    }""")
    run_event_append(run_id=run.pk, type="note", payload={"text": "during the drop"})
    expect(page.locator("#run-event-3")).to_be_visible(timeout=15_000)
    expect(page.locator("#run-live-status")).to_have_text("live", timeout=15_000)
    run_event_append(run_id=run.pk, type="note", payload={"text": "after"})
    expect(page.locator("#run-event-4")).to_be_visible(timeout=15_000)
    assert timeline_seqs(page) == [1, 2, 3, 4]


def test_a_person_logs_in_through_the_form_and_sees_their_pages(live_stack, page, personas):
    page.goto(f"{live_stack.url}/runs/")
    page.get_by_label("Username").fill("olga-ops")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link")).to_have_text(["Runs", "Dashboards", "Evals"])
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()


def test_an_outsider_cannot_follow_a_run_in_the_browser(live_stack, page, client, personas, run):
    login(page, live_stack, client, personas.outsider)
    response = page.goto(f"{live_stack.url}/runs/{run.pk}/")
    assert response.status == 403
    code = page.evaluate(
        """([url]) => new Promise((resolve) => {
            const ws = new WebSocket(url); ws.onclose = (e) => resolve(e.code);
        })""",
        [live_stack.url.replace("http", "ws") + f"/ws/runs/{run.pk}/"],
    )
    assert code != 1000  # refused at the handshake: the browser sees an abnormal close
    assert run.request not in page.content()


@pytest.mark.parametrize(
    ("path", "marker"),
    [
        ("/static/django_htmx/htmx-2.min.js", b"htmx"),
        ("/static/django_htmx/ext/hx-ws-2.min.js", b"ws-connect"),
        ("/static/vendor/plotly-basic.min.js", b"plotly.js (basic - minified) v"),
    ],
)
def test_daphne_serves_htmx_from_its_package_and_the_vendored_plotly(
    live_stack, page, path, marker
):
    response = page.request.get(live_stack.url + path)
    assert response.status == 200
    assert marker in response.body()[:2000] or marker in response.body()
