"""A policy rule's change window and rate limit (B6), for every tool: the window in a named
time zone with dates left out, the rate per run, agent or workspace in a sliding minute,
what each turns a decision into, and where an admin and an operator see it: the explainer,
the edit simulator, a refused or asked call's reason on the run page."""

from __future__ import annotations

import multiprocessing
import re
import sys
import threading
import uuid
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from policies.core.permissions import (
    LimitContext,
    Policy,
    PolicyError,
    Rule,
    RuleLimits,
    decide_paths,
)
from policies.core.windows import Weekly, WindowError, dates_of, days_of, days_text, weekly
from policies.mcp_servers import mcp_discover
from policies.models import McpServer, PolicyRule
from policies.models import Policy as PolicyRow
from policies.permissions import policy_from_row
from policies.rate_limits import rate_exceeded
from runs.models import ToolCall
from runs.services import run_create
from runs.tools.call import tool_call_run
from tests.conftest import EVERYWHERE
from tests.fake_anthropic import message
from tests.helpers import drive
from tests.test_policies_console import rule_form

PARIS = "Europe/Paris"
# 2026-12-04 is a Friday; Paris is UTC+1 in December.
FRIDAY_NOON_PARIS = datetime(2026, 12, 4, 11, 0, tzinfo=UTC)
OFFICE = weekly(days_of("mon-fri"), time(9), time(17), PARIS)


# --- the window ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("", set(range(7))),
        ("mon-fri", {0, 1, 2, 3, 4}),
        ("sat, sun", {5, 6}),
        ("Fri-Mon", {4, 5, 6, 0}),  # a range may wrap the week
        ("monday wednesday", {0, 2}),
        ("tue,thu-fri", {1, 3, 4}),
    ],
)
def test_days_are_read_as_people_write_them(text, days):
    assert days_of(text) == frozenset(days)


@pytest.mark.parametrize("text", ["mo", "funday", "mon-", "-fri", "mon--fri", "1-5", "mon-xyz"])
def test_days_that_are_not_days_are_refused_with_an_example(text):
    with pytest.raises(WindowError, match="mon-fri"):
        days_of(text)


def test_excluded_dates_take_lists_and_ranges_and_refuse_the_rest():
    assert dates_of("2026-12-25, 2027-01-01\n2026-12-30..2026-12-31") == {
        date(2026, 12, 25),
        date(2027, 1, 1),
        date(2026, 12, 30),
        date(2026, 12, 31),
    }
    for bad in ("25/12/2026", "2026-12-31..2026-12-01", "2026-01-01..2028-01-01"):
        with pytest.raises(WindowError, match="excluded dates"):
            dates_of(bad)


def test_a_window_is_read_in_its_time_zone_and_says_so():
    assert OFFICE.holds(FRIDAY_NOON_PARIS)
    # 16:30 UTC is 17:30 in Paris: after hours there, though inside 09-17 in UTC.
    assert not OFFICE.holds(datetime(2026, 12, 4, 16, 30, tzinfo=UTC))
    assert not OFFICE.holds(datetime(2026, 12, 5, 11, 0, tzinfo=UTC))  # Saturday
    assert OFFICE.name == "Mon–Fri 09:00–17:00 Europe/Paris"


def test_a_window_past_midnight_belongs_to_the_day_it_starts():
    night = weekly(days_of("fri"), time(22), time(2), "UTC")
    assert night.holds(datetime(2026, 12, 4, 23, 0, tzinfo=UTC))  # Friday night
    assert night.holds(datetime(2026, 12, 5, 1, 0, tzinfo=UTC))  # Saturday, early
    assert not night.holds(datetime(2026, 12, 4, 1, 0, tzinfo=UTC))  # Friday, early


def test_an_excluded_date_holds_nothing_of_the_window_and_is_named():
    holiday = weekly(days_of("mon-fri"), time(9), time(17), PARIS, {date(2026, 12, 4)})
    assert not holiday.holds(FRIDAY_NOON_PARIS)
    assert holiday.holds(FRIDAY_NOON_PARIS - timedelta(days=1))
    assert holiday.name.endswith(", not 2026-12-04")


def test_a_window_across_a_change_of_clocks_keeps_local_hours():
    # Paris moves from UTC+2 to UTC+1 on 2026-10-25: 09:00 local is 07:00 UTC, then 08:00.
    assert OFFICE.holds(datetime(2026, 10, 23, 7, 0, tzinfo=UTC))  # Fri 09:00 CEST
    assert not OFFICE.holds(datetime(2026, 10, 26, 7, 30, tzinfo=UTC))  # Mon 08:30 CET
    assert OFFICE.holds(datetime(2026, 10, 26, 8, 0, tzinfo=UTC))  # Mon 09:00 CET


@given(
    st.datetimes(
        min_value=datetime(2020, 1, 1),
        max_value=datetime(2030, 1, 1),
        timezones=st.just(UTC),
    ),
    st.frozensets(st.integers(0, 6), min_size=1),
    st.times(),
    st.times(),
)
def test_a_window_holds_exactly_when_a_plain_reading_says(now, days, start, until):
    if start == until:
        return
    window = Weekly(days, start.replace(tzinfo=None), until.replace(tzinfo=None), UTC)
    at = now.time()
    if start < until:
        expected = now.weekday() in days and start <= at < until
    else:
        started = now if at >= start else now - timedelta(days=1)
        expected = started.weekday() in days and (at >= start or at < until)
    assert window.holds(now) == expected


@pytest.mark.parametrize(
    ("parts", "problem"),
    [
        ({"start": time(9)}, "both the start and the end"),
        ({"start": time(9), "until": time(9)}, "same time"),
        ({"zone": "Mars/Olympus"}, "not a time zone"),
        ({"days": [7]}, "0 (Monday) to 6"),
    ],
)
def test_a_window_that_cannot_be_read_says_why(parts, problem):
    with pytest.raises(WindowError, match=re.escape(problem)):
        weekly(**parts)


def test_days_are_written_as_ranges():
    assert days_text(range(7)) == "every day"
    assert days_text([0, 1, 2, 3, 4]) == "Mon–Fri"
    assert days_text([5, 6]) == "Sat, Sun"
    assert days_text([0, 2, 3, 4]) == "Mon, Wed–Fri"


# --- what the limits turn a decision into ---------------------------------------------------
def policy_of(decision="allow", **limits) -> Policy:
    rule = Rule("writes", "createDraft", decision, limits=RuleLimits(**limits))
    return Policy("p", "L3", (rule, Rule("reads", "readSource", "allow")))


def decided(policy, at=FRIDAY_NOON_PARIS, counter=None, scope=None, tool="createDraft"):
    context = LimitContext(at, scope or {"run": "r1"}, counter)
    return decide_paths(policy, tool, "L2", "filesystem_write", ["a.md"], (), context)


class Counter:
    """Every question the rule's rate asks, and a fixed answer."""

    def __init__(self, over: bool = False) -> None:
        self.over, self.asked = over, []

    def __call__(self, key: str, limit: int) -> bool:
        self.asked.append((key, limit))
        return self.over


@pytest.mark.parametrize(
    ("decision", "outside", "after"),
    [
        ("allow", "deny", "deny"),
        ("allow", "ask", "ask"),
        ("ask", "deny", "deny"),
        ("ask_strong", "ask", "ask_strong"),  # never into anything less strict
    ],
)
def test_outside_the_window_the_decision_turns_as_the_rule_says(decision, outside, after):
    policy = policy_of(decision, window=OFFICE, outside=outside)
    saturday = FRIDAY_NOON_PARIS + timedelta(days=1)
    verdict = decided(policy, saturday)
    assert verdict.decision == after and verdict.rule == "writes"
    assert verdict.reason.startswith(
        "outside the change window of rule writes (Mon–Fri 09:00–17:00 Europe/Paris)"
    )
    assert f"the rule alone: {decision}" in verdict.reason
    assert [(x.check, x.held, x.turned) for x in verdict.limits] == [
        ("change_window", False, after)
    ]
    inside = decided(policy)
    assert inside.decision == decision and [x.held for x in inside.limits] == [True]


def test_over_the_rate_the_decision_turns_and_the_count_is_per_scope():
    policy = policy_of("allow", per_minute=3, scope="agent", over="ask")
    within, over = Counter(False), Counter(True)
    assert decided(policy, counter=within, scope={"run": "r1", "agent": "a7"}).decision == "allow"
    assert within.asked == [("rule:p:writes:agent:a7", 3)]
    verdict = decided(policy, counter=over, scope={"run": "r1", "agent": "a7"})
    assert verdict.decision == "ask"
    assert verdict.reason.startswith(
        "over the rate limit of rule writes (3 calls a minute per agent)"
    )
    # A call outside any run is counted under "none" of its scope, never under another's id.
    outside_runs = Counter()
    decided(policy, counter=outside_runs, scope={})
    assert outside_runs.asked == [("rule:p:writes:agent:none", 3)]


def test_a_denied_call_is_never_counted():
    counter = Counter()
    closed = policy_of("allow", window=OFFICE, outside="deny", per_minute=1)
    assert decided(closed, FRIDAY_NOON_PARIS + timedelta(days=1), counter).decision == "deny"
    denying = Policy(
        "p", "L3", (Rule("no", "createDraft", "deny", limits=RuleLimits(per_minute=1)),)
    )
    assert decided(denying, counter=counter).decision == "deny"
    assert counter.asked == []


def test_only_the_deciding_rule_s_limits_apply():
    counter = Counter(True)
    policy = policy_of("allow", per_minute=1)
    verdict = decided(policy, counter=counter, tool="readSource")  # decided by "reads"
    assert verdict.decision == "allow" and counter.asked == [] and verdict.limits == ()


def test_a_call_a_person_approved_is_not_counted_again_but_the_window_still_holds():
    policy = policy_of("ask", window=OFFICE, outside="deny", per_minute=1)
    verdict = decided(policy, counter=None)  # no counter: an approved call
    assert verdict.decision == "ask"
    assert [(x.check, x.held) for x in verdict.limits] == [
        ("change_window", True),
        ("rate_limit", True),
    ]
    assert "not counted" in verdict.limits[1].detail
    assert decided(policy, FRIDAY_NOON_PARIS + timedelta(days=1)).decision == "deny"


def test_limits_that_make_no_sense_are_refused():
    for bad in (
        {"outside": "allow"},
        {"over": "ask_strong"},
        {"scope": "user"},
        {"per_minute": -1},
    ):
        with pytest.raises(PolicyError):
            RuleLimits(**bad)


# --- the limiter the processes share -------------------------------------------------------
def _reserve_many(key: str, limit: int, count: int, results, now: datetime) -> None:
    results.extend(not rate_exceeded(key, limit, now) for _ in range(count))


def _reserve_in_a_process(key: str, limit: int, count: int, queue, now: datetime) -> None:
    import django
    from django.db import connections

    django.setup()
    connections.close_all()
    found: list[bool] = []
    _reserve_many(key, limit, count, found, now)
    queue.put(sum(found))


def test_the_limit_lets_exactly_its_number_through_across_threads_and_processes():
    """Six threads and two processes (forked, as a prefork pool and the threads of a
    worker are), 20 calls each against a limit of 50: exactly 50 go through. Without the
    lock, the file cache's read-then-write lets more through. One instant for every call: on
    a loaded machine the calls may straddle a minute's turn, where the sliding estimate
    rightly lets a few more through (sliding_count), which is not what this test is about."""
    key, limit, now = f"test:{uuid.uuid4().hex}", 50, datetime.now(UTC)
    results: list[bool] = []
    threads = [
        threading.Thread(target=_reserve_many, args=(key, limit, 20, results, now))
        for _ in range(6)
    ]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    processes = [
        context.Process(target=_reserve_in_a_process, args=(key, limit, 20, queue, now))
        for _ in range(2)
    ]
    for worker in [*processes, *threads]:  # forked before this process has threads
        worker.start()
    for worker in [*threads, *processes]:
        worker.join(timeout=120)
    through = sum(results) + sum(queue.get(timeout=10) for _ in processes)
    assert through == limit


def test_a_call_over_the_limit_does_not_use_it_up():
    key, now = f"test:{uuid.uuid4().hex}", datetime(2026, 12, 4, 12, 0, 10, tzinfo=UTC)
    assert [rate_exceeded(key, 2, now) for _ in range(5)] == [False, False, True, True, True]
    # 100 s later the two counted calls have mostly slid out (the previous minute's count
    # weighs by what the last sixty seconds still cover); the refused three never counted.
    later = now + timedelta(seconds=100)
    assert not rate_exceeded(key, 2, later) and rate_exceeded(key, 2, later)


# --- through the one door: built-in and MCP tools ------------------------------------------


def stored_policy(name, decision="allow", **limits) -> Policy:
    row = PolicyRow.objects.create(name=f"{name}-{uuid.uuid4().hex[:6]}", ceiling="L3")
    PolicyRule.objects.create(
        policy=row, order=10, key="drafts", tool="createDraft", decision=decision, **limits
    )
    PolicyRule.objects.create(policy=row, order=20, key="reads", tool="*", decision="allow")
    return policy_from_row(row)


def around_today() -> str:
    today = timezone.now().date()
    return ", ".join(str(today + timedelta(days=n)) for n in (-1, 0, 1))


def draft(workspace, policy, run=None, **extra):
    return tool_call_run(
        workspace=workspace,
        tool="createDraft",
        arguments={"path": "docs/a.md", "content": "x"},
        policy=policy,
        run=run,
        **extra,
    )


@pytest.mark.django_db
def test_a_built_in_tool_outside_its_rule_s_window_is_refused_and_says_why(workspace):
    policy = stored_policy("closed", window_excluded=around_today())
    record = draft(workspace, policy)
    assert record.status == "refused" and record.decision == "deny" and record.rule == "drafts"
    assert record.error.startswith("deny: outside the change window of rule drafts (every day UTC")
    open_policy = stored_policy("open", window_days="mon-sun")
    assert draft(workspace, open_policy).status == "ok"


@pytest.mark.django_db
def test_an_ask_outside_the_window_goes_to_a_person_whose_yes_lets_it_run(workspace, personas):
    policy = stored_policy("asks", window_excluded=around_today(), outside_window="ask")
    asked = draft(workspace, policy, hold_asks=True)
    assert asked.status == "ask" and asked.reason.startswith("outside the change window")
    approved = draft(workspace, policy, approved_by=personas.approver)
    assert approved.status == "ok" and approved.approved_by == personas.approver


@pytest.mark.django_db
@pytest.mark.usefixtures("api_key")  # a second run is created: a key makes it answerable
def test_the_rate_counts_per_run_and_per_workspace_as_the_rule_says(workspace, run, personas):
    per_run = stored_policy("per-run", rate_limit=2)
    assert [draft(workspace, per_run, run).status for _ in range(3)] == ["ok", "ok", "refused"]
    refused = ToolCall.objects.filter(run=run, status="refused").get()
    assert refused.error.startswith(
        "deny: over the rate limit of rule drafts (2 calls a minute per run)"
    )
    other = run_create(
        agent=run.agent,
        workspace=workspace,
        requester=personas.operator,
        request="Another run",
        dispatch=False,
    )
    assert draft(workspace, per_run, other).status == "ok"  # its own count
    shared = stored_policy("per-workspace", rate_limit=1, rate_scope="workspace")
    assert draft(workspace, shared, run).status == "ok"
    assert draft(workspace, shared, other).status == "refused"


@pytest.fixture
def notes(workspace):
    (workspace.root_path / "notes").mkdir()
    (workspace.root_path / "notes" / "a.md").write_text("remember the milk")
    server = McpServer.objects.create(
        name=f"n{uuid.uuid4().hex[:6]}",
        command=sys.executable,
        args=[str(Path(__file__).parent / "mcp_server.py")],
        allowed_tools=["read_note"],
        allowed_paths=["notes/**"],
    )
    mcp_discover(server)
    return server


def read_note(workspace, notes, policy):
    return tool_call_run(
        workspace=workspace,
        tool=f"mcp:{notes.name}:read_note",
        arguments={"path": "notes/a.md"},
        policy=policy,
    )


@pytest.mark.django_db
def test_an_mcp_tool_has_the_same_window_and_rate_as_a_built_in_one(workspace, notes):
    row = PolicyRow.objects.create(name=f"mcp-{uuid.uuid4().hex[:6]}", ceiling="L3")
    PolicyRule.objects.create(
        policy=row, order=10, key="notes", tool="mcp:*", decision="allow", rate_limit=1
    )
    policy = policy_from_row(row)

    assert read_note(workspace, notes, policy).status == "ok"
    second = read_note(workspace, notes, policy)
    assert second.status == "refused"
    assert "over the rate limit of rule notes (1 call a minute per run)" in second.error
    PolicyRule.objects.filter(policy=row).update(rate_limit=0, window_excluded=around_today())
    closed = policy_from_row(row)
    record = read_note(workspace, notes, closed)
    assert record.status == "refused" and "outside the change window of rule notes" in record.error


# --- where people see it --------------------------------------------------------------------
@pytest.mark.django_db
def test_the_admin_saves_a_window_and_refuses_one_it_cannot_read(admin_client):
    policy = PolicyRow.objects.create(name=f"w-{uuid.uuid4().hex[:6]}", ceiling="L3")
    url = reverse("admin:policies_policy_change", args=[policy.pk])
    form = admin_client.get(url).content.decode()
    assert "Change window and rate limit" in form and 'name="rules-__prefix__-window_days"' in form
    limits = {
        "window_days": "mon-fri",
        "window_start": "09:00",
        "window_end": "17:00",
        "window_timezone": PARIS,
        "window_excluded": "2026-12-24..2026-12-26",
        "outside_window": "ask",
        "rate_limit": 5,
        "rate_scope": "agent",
    }
    response = admin_client.post(
        url, rule_form(policy, [(10, "drafts", "createDraft", "", "allow", limits)])
    )
    assert response.status_code == 302
    rule = policy.rules.get().as_rule()
    assert rule.limits is not None and rule.limits.window is not None
    assert rule.limits.window.name == (
        "Mon–Fri 09:00–17:00 Europe/Paris, not 2026-12-24, 2026-12-25, 2026-12-26"
    )
    assert (rule.limits.outside, rule.limits.per_minute, rule.limits.scope) == ("ask", 5, "agent")
    for field, value, problem in [
        ("window_timezone", "Paris", "not a time zone"),
        ("window_days", "weekdays", "not a day"),
        ("window_excluded", "Christmas", "not a date"),
    ]:
        bad = {**limits, field: value}
        page = admin_client.post(
            url, rule_form(policy, [(10, "drafts", "createDraft", "", "allow", bad)])
        )
        assert page.status_code == 200 and problem in page.content.decode()


@pytest.mark.django_db
def test_test_this_policy_shows_the_window_and_the_rate(admin_client):
    policy = PolicyRow.objects.create(name=f"t-{uuid.uuid4().hex[:6]}", ceiling="L3")
    PolicyRule.objects.create(
        policy=policy,
        order=10,
        key="drafts",
        tool="createDraft",
        decision="allow",
        window_days="mon-fri",
        window_start=time(9),
        window_end=time(17),
        window_timezone=PARIS,
        rate_limit=3,
    )
    url = reverse("admin:policies_policy_test", args=[policy.pk])
    query = {"tool": "createDraft", "path": "docs/a.md"}
    saturday = admin_client.get(url, {**query, "at": "2026-12-05 11:00"}).content.decode()
    assert 'id="decision">deny' in saturday
    assert "outside the window" in saturday and "Mon–Fri 09:00–17:00 Europe/Paris" in saturday
    busy = admin_client.get(
        url, {**query, "at": "2026-12-04 11:00", "calls_in_last_minute": "3"}
    ).content.decode()
    assert 'id="decision">deny' in busy and "over the rate" in busy
    assert "3 calls a minute per run" in busy and "inside the window" in busy
    quiet = admin_client.get(
        url, {**query, "at": "2026-12-04 11:00", "calls_in_last_minute": "2"}
    ).content.decode()
    assert 'id="decision">allow' in quiet and "within the rate" in quiet
    unasked = admin_client.get(url, {**query, "at": "2026-12-04 11:00"}).content.decode()
    assert 'id="decision">allow' in unasked and "not counted for this call" in unasked


@pytest.mark.django_db
def test_the_simulator_replays_recent_calls_against_an_edited_window_and_rate(
    admin_client, workspace, run
):
    policy = PolicyRow.objects.create(name=f"s-{uuid.uuid4().hex[:6]}", ceiling="L3")
    PolicyRule.objects.create(
        policy=policy, order=10, key="drafts", tool="createDraft", decision="allow"
    )
    saved = policy_from_row(policy)
    for _ in range(3):
        assert draft(workspace, saved, run).status == "ok"
    rule = policy.rules.get()
    url = reverse("admin:policies_policy_change", args=[policy.pk])

    def simulate(limits):
        data = rule_form(policy, [(10, "drafts", "createDraft", "", "allow", limits)])
        data |= {"rules-INITIAL_FORMS": 1, "rules-0-id": rule.pk, "rules-0-policy": policy.pk}
        data["_simulate"] = "1"
        return admin_client.post(url, data).content.decode()

    rated = simulate({"rate_limit": 2})
    assert "changes the decision of <strong>1</strong>" in rated  # the third, within a minute
    assert "over the rate limit of rule drafts" in rated
    closed = simulate({"window_excluded": around_today()})
    assert "changes the decision of <strong>3</strong>" in closed
    assert "outside the change window of rule drafts" in closed


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_run_shows_outside_the_change_window_as_the_reason(
    personas, agent, workspace, api, client
):
    row = PolicyRow.objects.create(name=f"r-{uuid.uuid4().hex[:6]}", ceiling="L3")
    PolicyRule.objects.create(
        policy=row,
        order=10,
        key="office-hours",
        tool="readSource",
        decision="allow",
        window_excluded=around_today(),
    )
    agent.policy = row
    agent.save()
    (workspace.root_path / "docs").mkdir(exist_ok=True)
    (workspace.root_path / "docs" / "notes.md").write_text("# Notes\n")
    api.answers += [
        message(
            [
                {
                    "type": "tool_use",
                    "id": "toolu_window",
                    "name": "readSource",
                    "input": {"path": "docs/notes.md"},
                }
            ],
            stop_reason="tool_use",
        ),
        message([{"type": "text", "text": "I could not read it today."}]),
    ]
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="What does docs/notes.md say?",
        dispatch=False,
    )
    run = drive(run)
    call = run.tool_calls.get()
    assert call.status == "refused" and call.rule == "office-hours"
    assert call.error.startswith("deny: outside the change window of rule office-hours")
    told = api.requests[1]["body"]["messages"][-1]["content"][0]
    assert "outside the change window" in str(told["content"])
    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "outside the change window of rule office-hours" in page


@pytest.mark.django_db
def test_a_stored_window_the_admin_never_saw_fails_the_policy_closed_naming_the_rule():
    row = PolicyRow.objects.create(name=f"bad-{uuid.uuid4().hex[:6]}", ceiling="L3")
    PolicyRule.objects.create(policy=row, order=10, key="drafts", tool="*", decision="allow")
    PolicyRule.objects.filter(policy=row).update(window_timezone="Nowhere/Zone", window_days="x")
    with pytest.raises(PolicyError, match="Rule drafts: days: 'x' is not a day"):
        policy_from_row(row)


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_run_under_a_broken_stored_rule_fails_and_says_which(personas, agent, workspace, api):
    row = PolicyRow.objects.create(name=f"bad-{uuid.uuid4().hex[:6]}", ceiling="L3")
    PolicyRule.objects.create(policy=row, order=10, key="reads", tool="*", decision="allow")
    PolicyRule.objects.filter(policy=row).update(window_timezone="Nowhere/Zone", window_days="mon")
    agent.policy = row
    agent.save()
    api.answers.append(message([{"type": "text", "text": "Never asked."}]))
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="What does docs/notes.md say?",
        dispatch=False,
    )
    run = drive(run)
    assert run.status == "failed"
    assert "Rule reads: timezone: 'Nowhere/Zone' is not a time zone" in run.failure_reason
    assert api.requests == []  # the model was never asked: nothing ran under it


# --- what a hostile reading found ----------------------------------------------------------
def test_a_call_on_two_paths_meets_the_limits_of_both_rules_whatever_their_order():
    closed = weekly(days_of("mon-fri"), None, None, "UTC")
    policy = Policy(
        "p",
        "L3",
        (
            Rule("docs", "renameFile", "allow", "docs/**"),
            Rule("deploy", "renameFile", "allow", "deploy/**", limits=RuleLimits(closed)),
        ),
    )
    saturday = LimitContext(datetime(2026, 12, 5, 12, tzinfo=UTC), {"run": "r"}, Counter())
    for paths in (["docs/a.md", "deploy/evil.md"], ["deploy/evil.md", "docs/a.md"]):
        verdict = decide_paths(policy, "renameFile", "L2", "filesystem_write", paths, (), saturday)
        assert verdict.decision == "deny", paths
        assert "outside the change window of rule deploy" in verdict.reason


def test_a_second_rule_over_its_rate_gives_back_what_the_first_counted():
    policy = Policy(
        "p",
        "L3",
        (
            Rule("a", "renameFile", "allow", "a/**", limits=RuleLimits(per_minute=5)),
            Rule("b", "renameFile", "allow", "b/**", limits=RuleLimits(per_minute=1)),
        ),
    )
    given_back: list[str] = []
    context = LimitContext(
        FRIDAY_NOON_PARIS,
        {"run": "r"},
        lambda key, limit: key.endswith(":b:run:r"),  # b is full, a is not
        given_back.append,
    )
    verdict = decide_paths(policy, "renameFile", "L2", "none", ["a/x", "b/y"], (), context)
    assert verdict.decision == "deny" and given_back == ["rule:p:a:run:r"]


def test_an_excluded_date_closes_the_night_window_that_starts_on_it():
    night = weekly(days_of("thu"), time(22), time(2), PARIS, dates_of("2026-12-24"))
    paris = ZoneInfo(PARIS)
    assert not night.holds(datetime(2026, 12, 24, 23, tzinfo=paris))
    assert not night.holds(datetime(2026, 12, 25, 1, tzinfo=paris))  # the same night
    assert night.holds(datetime(2026, 12, 31, 23, tzinfo=paris))  # the next Thursday
    friday_off = weekly(days_of("thu"), time(22), time(2), PARIS, dates_of("2026-12-25"))
    assert friday_off.holds(datetime(2026, 12, 25, 1, tzinfo=paris))  # started on Thursday


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posixrules", "Mars/Olympus", ""])
def test_a_zone_that_depends_on_the_host_or_does_not_exist_is_refused(zone):
    with pytest.raises(WindowError, match="not a time zone"):
        weekly(zone=zone or " ")


def test_the_preview_counts_a_rate_as_the_live_limiter_does():
    from policies.simulation import Replayed

    replay, key = Replayed(), f"test:{uuid.uuid4().hex}"
    start = datetime(2026, 12, 4, 12, 0, 50, tzinfo=UTC)
    moments = [start + timedelta(seconds=s) for s in (0, 3, 6, 9, 15, 40, 45, 70, 95, 130)]
    live, replayed = [], []
    for moment in moments:
        replay.now = moment
        live.append(rate_exceeded(key, 3, moment))
        replayed.append(replay.exceeded("k", 3))
    assert live == replayed and any(live) and not all(live)


@pytest.mark.django_db
def test_a_call_a_hook_refuses_gives_its_rate_back(workspace):
    policy = stored_policy("hooked", rate_limit=1, rate_scope="workspace")

    def halting(tool, arguments):
        return ("freeze", "Change freeze: no writes today.")

    for _ in range(3):
        assert draft(workspace, policy, before_run=halting).status == "refused"
    assert draft(workspace, policy).status == "ok"  # the three refused used none of it


@pytest.mark.django_db
def test_an_ask_nobody_is_there_to_answer_gives_its_rate_back(workspace):
    policy = stored_policy("asked", "ask", rate_limit=1, rate_scope="workspace")
    for _ in range(2):
        refused = draft(workspace, policy)  # no person to ask: refused
        assert refused.status == "refused" and refused.decision == "ask"
    held = draft(workspace, policy, hold_asks=True)
    assert held.status == "ask", held.reason  # not over the rate: the refusals gave it back


@pytest.mark.django_db
def test_mcp_calls_refused_by_the_server_s_window_use_no_rate(workspace, notes):
    row = PolicyRow.objects.create(name=f"mcpw-{uuid.uuid4().hex[:6]}", ceiling="L3")
    PolicyRule.objects.create(
        policy=row, order=10, key="notes", tool="mcp:*", decision="allow", rate_limit=1
    )
    policy = policy_from_row(row)
    notes.rate_limit_per_minute = 1
    notes.window_days = [(timezone.now().weekday() + 3) % 7]
    notes.save()

    for _ in range(3):
        assert read_note(workspace, notes, policy).error.startswith(
            "change_window: outside the change window"
        )
    notes.window_days = []
    notes.save()
    assert (
        read_note(workspace, notes, policy).status == "ok"
    )  # neither the rule's rate nor the server's was used up


@pytest.mark.django_db
def test_an_mcp_server_saved_with_a_window_of_no_time_refuses_instead_of_crashing(notes):
    McpServer.objects.filter(pk=notes.pk).update(window_start=time(9), window_end=time(9))
    notes.refresh_from_db()
    window = notes.as_config().window
    assert window is not None and not window.holds(FRIDAY_NOON_PARIS)


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_commit_asked_about_counts_against_its_rule_s_rate(personas, agent, workspace, docs):
    from tests.helpers import driven

    PolicyRule.objects.filter(policy__name="default", key="modify").update(
        rate_limit=1, rate_scope="workspace", over_rate="deny"
    )
    first = driven(personas, agent, workspace)
    assert first.status == "waiting_for_approval", first.failure_reason
    second = driven(personas, agent, workspace)
    assert second.status == "failed"
    assert "over the rate limit of rule modify (1 call a minute per workspace)" in (
        second.failure_reason
    )
