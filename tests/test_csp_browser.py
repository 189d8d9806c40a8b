"""The Content-Security-Policy in a real Chromium on the live stack (issue 16, section 4):
the main pages raise no CSP violation — neither a ``securitypolicyviolation`` event nor a
"Refused to ..." console message — while they still work: a live run page follows new
events over its WebSocket, the dashboards draw their plotly charts, the admin's prompt
preview draws its chart, the API docs render."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from runs.events import run_event_append
from runs.models import Run
from runs.observability.synthetic import synthetic_runs_generate
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.helpers import FIX, login
from tests.stack import off_loop

pytestmark = [EVERYWHERE, pytest.mark.browser]

WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__csp.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${where}`);
});
"""


def watch_violations(page: Page) -> list[str]:
    """Every CSP violation of the page from now on: the DOM event (collected in the page)
    and the console's "Refused to ..." lines."""
    refused: list[str] = []
    page.add_init_script(WATCH)
    page.on(
        "console",
        lambda m: (
            refused.append(m.text)
            if "Content Security Policy" in m.text or "Refused to" in m.text
            else None
        ),
    )
    page.on("pageerror", lambda error: refused.append(f"page error: {error}"))
    return refused


def violations(page: Page, refused: list[str]) -> list[str]:
    return [*refused, *page.evaluate("window.__csp || []")]


def open_page(page: Page, url: str) -> None:
    """Open ``url`` and check it came with the policy: no violation means nothing without
    one."""
    response = page.goto(url)
    assert response is not None
    policy = response.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy and "script-src-attr 'none'" in policy, (url, policy)


def held_run(personas, agent, workspace) -> Run:
    created = run_create(
        agent=agent, workspace=workspace, requester=personas.operator, request=FIX, dispatch=False
    )
    # Nobody's worker takes it: the sweeper leaves a run whose lease is held for a day.
    Run.objects.filter(pk=created.pk).update(
        lease_owner="tests: not for a worker", lease_expires_at=timezone.now() + timedelta(days=1)
    )
    return created


def test_a_live_run_page_updates_with_no_violation(
    live_stack, page, client, personas, agent, workspace
):
    run = off_loop(held_run, personas=personas, agent=agent, workspace=workspace)
    refused = watch_violations(page)
    login(page, live_stack, client, personas.operator)
    open_page(page, f"{live_stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-live-status")).to_have_text("live", timeout=15_000)
    off_loop(run_event_append, run_id=run.pk, type="note", payload={"text": "over the socket"})
    expect(page.locator("#run-event-2")).to_be_visible(timeout=15_000)
    assert violations(page, refused) == []


def test_the_dashboards_draw_their_charts_with_no_violation(
    live_stack, page, client, personas, agent, workspace
):
    off_loop(
        synthetic_runs_generate,
        runs=60,
        days=7,
        seed=5,
        requester=personas.operator,
        approvers=[personas.approver],
    )
    refused = watch_violations(page)
    login(page, live_stack, client, personas.ops)
    for path in ("/dashboards/retro/?days=7", "/dashboards/ops/", "/evals/"):
        open_page(page, f"{live_stack.url}{path}")
        page.wait_for_load_state("networkidle")
        if path.startswith("/dashboards/retro/"):
            plots = page.locator(".js-plotly-plot")
            expect(plots.first.locator("svg.main-svg").first).to_be_visible(timeout=20_000)
            assert plots.count() > 3
        assert violations(page, refused) == [], path


def test_the_console_admin_and_api_docs_raise_no_violation(
    live_stack, page, client, personas, agent, workspace
):
    off_loop(held_run, personas=personas, agent=agent, workspace=workspace)
    refused = watch_violations(page)
    login(page, live_stack, client, personas.admin)
    for path in (
        "/",
        "/runs/",
        "/runs/new/",
        "/approvals/",
        "/approvals/history/",
        "/admin/",
        "/admin/auth/user/",
        f"/admin/auth/user/{personas.operator.pk}/change/",
        "/admin/policies/agent/",
        f"/admin/policies/agent/{agent.pk}/change/",
    ):
        open_page(page, f"{live_stack.url}{path}")
        page.wait_for_load_state("networkidle")
        assert violations(page, refused) == [], path
    open_page(page, f"{live_stack.url}/admin/policies/agent/{agent.pk}/preview/")
    expect(page.locator("#budget-plot svg.main-svg").first).to_be_visible(timeout=20_000)
    open_page(page, f"{live_stack.url}/api/docs/")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible(timeout=20_000)
    assert violations(page, refused) == []


def test_an_injected_inline_handler_or_script_is_blocked_and_seen(
    live_stack, page, client, personas
):
    """The watcher sees what the policy blocks: markup injected into a page (as a stored
    XSS would be) does not run."""
    refused = watch_violations(page)
    login(page, live_stack, client, personas.operator)
    open_page(page, f"{live_stack.url}/runs/")
    page.evaluate(
        """() => {
        document.body.insertAdjacentHTML("beforeend",
            '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" onload="window.__ran = 1">');
        const s = document.createElement("script");
        s.textContent = "window.__ran = 2";
        document.body.appendChild(s);
    }"""
    )
    page.wait_for_function("window.__csp.length >= 2")
    assert page.evaluate("window.__ran") is None
    assert any("script-src" in v for v in violations(page, refused))
