"""Daily rollups and the retrospective's figures against the raw rows (SPEC O6).

The dashboard's figures must equal aggregates computed here, independently, from the runs,
model calls, tool calls and approvals of random generated histories; the rollups kept
current as runs finish must equal a rebuild from the raw rows; reconciliation repairs
cells that went wrong. Percentiles are nearest-rank over values rounded to two
significant figures (runs.observability.core.rollup), which commutes with taking the percentile."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, defaultdict
from datetime import UTC, timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.models import ApprovalRequest
from policies.models import Agent, Workspace
from runs.approval_outcomes import approval_decide
from runs.core.failures import KINDS, OTHER, failure_kind
from runs.lifecycle import run_transition
from runs.models import DailyRollup, DailyTotal, ModelCall, RollupDelta, Run, ToolCall
from runs.observability.core import rollup
from runs.observability.dashboards.figures import retro_figures, window
from runs.observability.rollups import (
    cells_from_raw,
    day_of,
    rollups_fold,
    rollups_reconcile,
)
from runs.observability.synthetic import FAILURES, synthetic_runs_generate
from runs.services import run_rollback
from tests.conftest import SEEDED, prices_seed
from tests.helpers import drive


# --- pure parts ----------------------------------------------------------------------------
@given(st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=200))
def test_a_percentile_of_the_histogram_is_the_rounded_raw_percentile(values):
    histogram: dict[str, int] = {}
    for value in values:
        key = str(rollup.sig2(value))
        histogram[key] = histogram.get(key, 0) + 1
    for p in (50, 95, 99, 100):
        raw = sorted(values)[max(1, math.ceil(p / 100 * len(values))) - 1]
        assert rollup.percentile(histogram, p) == rollup.sig2(raw)


@given(st.integers(min_value=0, max_value=10**12))
def test_rounding_keeps_two_significant_figures_within_five_percent(value):
    rounded = rollup.sig2(value)
    assert abs(rounded - value) <= max(0.5, value * 0.05)
    assert len(str(rounded).rstrip("0")) <= 2 or rounded < 100


def test_every_failure_the_flow_writes_has_a_kind():
    samples = {
        "cancelled by otto": "cancelled",
        "rejected by april-approver: Wrong link target": "rejected",
        "approval expired: nobody decided": "approval_expired",
        "model call failed: 529 overloaded": "model_error",
        "ANTHROPIC_API_KEY is not set; the offline replay model needs none.": "model_error",
        "max_turns (3) reached": "max_turns",
        "the model's answer was cut at max_tokens": "model_stopped",
        "the model stopped: refusal": "model_stopped",
        "tool call toolu_1 failed for good": "tool_failed",
        "verification failed: docs/a.md: broken link": "verification",
        "intake refused the request: no file": "intake",
        "halted by the secret-scan hook: key": "hook",
        "committing docs/a.md is refused by policy: no": "commit_refused",
        "committing docs/a.md failed: changed": "commit_failed",
        "abandoned after 5 claims: its workers keep stopping": "abandoned",
        "internal error in the harness: KeyError": "internal",
        "something new": OTHER,
    }
    assert {reason: failure_kind(reason) for reason in samples} == samples
    assert {kind for kind, _label, _pattern in KINDS} <= set(samples.values())
    assert OTHER not in {failure_kind(reason) for reason, _ in FAILURES}


def test_merging_a_contribution_and_taking_it_back_leaves_nothing():
    day = rollup.RunFacts("completed", "", *(_at(0), _at(90)), "pass")
    part = rollup.contribution(
        day,
        [rollup.CallFacts("m", 10, 2, 3, 4, Decimal("0.000123"), "reported", 900)],
        [rollup.ToolFacts("readSource", "allow", "ok"), rollup.ToolFacts("x", "deny", "refused")],
        [rollup.ApprovalFacts("approved", _at(10), _at(40))],
    )
    assert part["approvals"]["latency"] == {"30000": 1}
    assert rollup.merge(rollup.merge({}, part), part, -1) == {}
    assert rollup.same(rollup.merge(part, part), rollup.total([part, part]))


def _at(seconds: int):
    from datetime import datetime

    return datetime(2026, 11, 1, tzinfo=UTC) + timedelta(seconds=seconds)


# --- against the raw rows ------------------------------------------------------------------
def raw_figures(days: int, agent_id=None, workspace_id=None):
    """The retrospective's figures straight from the raw rows, without the rollups."""
    span = window(days)
    index = {day: n for n, day in enumerate(span)}
    runs = Run.objects.filter(status__in=("completed", "failed", "rolled_back"))
    if agent_id:
        runs = runs.filter(agent_id=agent_id)
    if workspace_id:
        runs = runs.filter(workspace_id=workspace_id)
    by_run = {}
    for run in runs.select_related("agent"):
        day = run.finished_at.astimezone(UTC).date()
        if day in index:
            by_run[run.pk] = (run, index[day])
    outcome = {o: [0] * days for o in ("completed", "failed", "cancelled", "rolled_back")}
    kinds: Counter[str] = Counter()
    durations = defaultdict(list)
    verified, escaped = [0] * days, [0] * days
    for run, i in by_run.values():
        cancelled = run.status == "failed" and run.failure_kind == "cancelled"
        outcome["cancelled" if cancelled else run.status][i] += 1  # a cancel is shown apart
        if run.status == "failed" and not cancelled:
            kinds[run.failure_kind] += 1
        millis = round((run.finished_at - run.created_at).total_seconds() * 1000)
        durations[i].append(millis)
        if (run.verification or {}).get("result") == "pass":
            verified[i] += 1
            escaped[i] += run.status == "rolled_back"
    cost = defaultdict(lambda: [Decimal(0)] * days)
    tokens = defaultdict(lambda: [0] * days)
    for call in ModelCall.objects.filter(run_id__in=by_run):
        run, i = by_run[call.run_id]
        cost[(run.agent.slug, call.model)][i] += call.cost_usd or 0
        tokens[(run.agent.slug, call.model)][i] += (
            call.input_tokens
            + call.output_tokens
            + call.cache_creation_input_tokens
            + call.cache_read_input_tokens
        )
    tools = defaultdict(Counter)
    for call in ToolCall.objects.filter(run_id__in=by_run):
        tools[call.tool]["calls"] += 1
        tools[call.tool]["errors"] += call.status in ("error", "timeout")
        tools[call.tool]["refused"] += call.status == "refused"
    waits = defaultdict(list)
    for approval in ApprovalRequest.objects.filter(
        run_id__in=by_run, status__in=("approved", "rejected")
    ):
        i = by_run[approval.run_id][1]
        waits[i].append(round((approval.decided_at - approval.requested_at).total_seconds() * 1000))

    def pct(values, p):
        return None if not values else rollup.sig2(rollup.nearest_rank(values, p))

    every_wait = [w for ws in waits.values() for w in ws]
    every_duration = [d for ds in durations.values() for d in ds]
    return {
        "runs": outcome,
        "failures": dict(kinds),
        "cost": {k: v for k, v in cost.items() if any(v)},
        "tokens": dict(tokens),
        "tools": {t: dict(c) for t, c in tools.items()},
        "approval_p50": [pct(waits[i], 50) for i in range(days)],
        "approval_p95": [pct(waits[i], 95) for i in range(days)],
        "duration_p50": [pct(durations[i], 50) for i in range(days)],
        "duration_p95": [pct(durations[i], 95) for i in range(days)],
        "overall": (pct(every_wait, 50), pct(every_wait, 95), pct(every_duration, 95)),
        "verified": verified,
        "escaped": escaped,
    }


def assert_figures_match(days: int, agent_id=None, workspace_id=None) -> None:
    got = retro_figures(days=days, agent_id=agent_id, workspace_id=workspace_id)
    want = raw_figures(days, agent_id, workspace_id)
    assert got.runs == want["runs"]
    assert {kind: n for kind, _label, n in got.failures} == want["failures"]
    assert [n for _k, _l, n in got.failures] == sorted(want["failures"].values(), reverse=True)
    assert {k: v for k, v in got.cost.items() if any(v)} == want["cost"]
    assert got.tokens == want["tokens"]
    assert {
        t["tool"]: {k: t[k] for k in ("calls", "errors", "refused") if t[k]} for t in got.tools
    } == {t: {k: n for k, n in c.items() if n} for t, c in want["tools"].items()}
    assert got.approval_p50 == want["approval_p50"]
    assert got.approval_p95 == want["approval_p95"]
    assert got.duration_p50 == want["duration_p50"]
    assert got.duration_p95 == want["duration_p95"]
    assert (
        got.totals["approval_p50"],
        got.totals["approval_p95"],
        got.totals["duration_p95"],
    ) == want["overall"]
    assert got.verified == want["verified"] and got.escaped == want["escaped"]
    let_finish = [
        sum(want["runs"][o][i] for o in want["runs"] if o != "cancelled") for i in range(days)
    ]
    assert got.success_rate == [
        want["runs"]["completed"][i] / n if n else None for i, n in enumerate(let_finish)
    ]


def _clear_history() -> None:
    ApprovalRequest.objects.all().delete()
    ToolCall.objects.all().delete()
    ModelCall.objects.all().delete()
    Run.objects.all().delete()
    DailyRollup.objects.all().delete()
    DailyTotal.objects.all().delete()


@pytest.fixture
def places(db, personas, tmp_path):
    prices_seed()
    agents = [
        Agent.objects.create(slug=f"agent-{n}", name=f"Agent {n}", identity="x", model=model)
        for n, model in enumerate(("claude-sonnet-4-6", "claude-haiku-4-5", "gpt-unpriced"))
    ]
    spaces = []
    for n in range(2):
        (tmp_path / f"w{n}").mkdir()
        spaces.append(
            Workspace.objects.create(slug=f"w-{n}", name=f"W {n}", root=tmp_path / f"w{n}")
        )
    return agents, spaces


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(min_value=0, max_value=10**6),
    # Enough runs per day that a wrong percentile or a day off shows.
    runs=st.integers(min_value=0, max_value=400),
    days=st.integers(min_value=1, max_value=12),
    view=st.sampled_from([7, 30]),
    narrow=st.tuples(st.integers(-1, 2), st.integers(-1, 1)),
)
def test_the_retrospective_equals_the_raw_rows_of_random_histories(
    places, personas, seed, runs, days, view, narrow
):
    _clear_history()
    agents, spaces = places
    if runs:
        synthetic_runs_generate(
            runs=runs,
            days=days,
            seed=seed,
            requester=personas.operator,
            approvers=[personas.approver],
        )
    agent_id = agents[narrow[0]].pk if narrow[0] >= 0 else None
    workspace_id = spaces[narrow[1]].pk if narrow[1] >= 0 else None
    assert_figures_match(view, agent_id, workspace_id)


def test_reconciliation_repairs_cells_that_went_wrong(places, personas):
    synthetic_runs_generate(runs=200, days=10, seed=7, requester=personas.operator)
    assert_figures_match(30)  # the past days' sums are cached from here on
    before = DailyRollup.objects.count()
    assert before > 0
    damaged = list(DailyRollup.objects.order_by("pk")[:3])
    damaged[0].delete()
    damaged[1].data = {}
    damaged[1].save()
    damaged[2].data = rollup.merge(damaged[2].data, {"runs": {"completed": 5}, "cost": "1.5"})
    damaged[2].save()
    total = DailyTotal.objects.order_by("day").last()
    total.data = rollup.merge(total.data, {"runs": {"failed": 2}})
    total.save()
    stray = DailyRollup.objects.create(
        day=window(1)[0] - timedelta(days=20),
        agent=places[0][0],
        workspace=places[1][0],
        data={"runs": {"failed": 1}},
    )
    days = sorted({d.day for d in damaged} | {stray.day, total.day})
    # Three cells and their days' totals, the stray cell (and its day's total), the total.
    assert rollups_reconcile(days) >= 5
    assert not DailyRollup.objects.filter(pk=stray.pk).exists()
    assert DailyRollup.objects.count() == before
    assert rollups_reconcile(days) == 0  # idempotent
    assert_figures_match(30)
    for agent in places[0]:
        assert_figures_match(30, agent_id=agent.pk)
    for total in DailyTotal.objects.all():  # each day's total is the sum of its cells
        cells = DailyRollup.objects.filter(day=total.day).values_list("data", flat=True)
        assert rollup.same(total.data, rollup.total(cells)), total.day


# --- as runs really finish -----------------------------------------------------------------
@pytest.mark.usefixtures(*SEEDED[1].args)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_runs_count_in_their_day_as_they_finish_and_a_rollback_is_an_escape(personas, run, docs):
    from runs.services import run_create

    other = run_create(
        agent=run.agent,
        workspace=run.workspace,
        requester=personas.operator,
        request=run.request,
        dispatch=False,
    )
    run, other = drive(run), drive(other)
    approval_decide(
        approval=ApprovalRequest.objects.get(run=other),
        user=personas.approver,
        decision="reject",
        comment="Not this link",
    )
    other.refresh_from_db()
    assert other.status == "failed" and other.failure_kind == "rejected"
    approval_decide(
        approval=ApprovalRequest.objects.get(run=run), user=personas.approver, decision="approve"
    )
    run = drive(run)
    assert run.status == "completed"

    # Each ended as a delta of its own; a fold moves both into their cell, once.
    assert RollupDelta.objects.count() == 2
    assert not DailyRollup.objects.exists()
    assert rollups_fold() == 2 and rollups_fold() == 0
    cell = DailyRollup.objects.get(day=day_of(run.finished_at))
    assert cell.data["runs"] == {"completed": 1, "failed": 1}
    assert cell.data["failures"] == {"rejected": 1}
    # Offline replays cost nothing: no amount is kept for them.
    assert Decimal(cell.data.get("cost", "0")) == run.cost_usd + other.cost_usd == 0
    assert cell.data["models"]["claude-sonnet-4-6"]["calls"] == 6
    assert cell.data["approvals"]["approved"] == cell.data["approvals"]["rejected"] == 1
    finished_at = run.finished_at

    run_rollback(run=run, user=personas.approver)
    run.refresh_from_db()
    assert run.status == "rolled_back" and run.finished_at == finished_at  # stays in its day
    assert rollups_fold() == 1
    cell.refresh_from_db()
    assert cell.data["runs"] == {"rolled_back": 1, "failed": 1}
    assert cell.data["verified"] == 2 and cell.data["escaped"] == 1  # both passed verification
    # What the runs added as they finished is what a rebuild from the raw rows gives.
    truth = cells_from_raw(
        cell.day,
        run_model=Run,
        call_model=ModelCall,
        tool_model=ToolCall,
        approval_model=ApprovalRequest,
    )
    assert rollup.same(truth[(cell.agent_id, cell.workspace_id)], cell.data)
    assert rollups_reconcile([cell.day]) == 0
    assert rollup.same(DailyTotal.objects.get(day=cell.day).data, cell.data)  # its only cell
    assert_figures_match(7)


# --- generate_history ----------------------------------------------------------------------
def test_generate_history_makes_the_same_history_for_the_same_seed(places, personas, capsys):
    call_command("generate_history", runs=120, days=14, seed=3)
    out = capsys.readouterr().out
    assert "Created 120 runs" in out and "rollups rebuilt" in out
    first = sorted(Run.objects.values_list("status", "failure_kind", "cost_usd"))
    assert Run.objects.count() == 120
    spread = {day_of(f) for f in Run.objects.values_list("finished_at", flat=True)}
    assert len(spread) > 5 and min(spread) >= window(15)[0]
    statuses = Counter(Run.objects.values_list("status", flat=True))
    assert set(statuses) == {"completed", "failed", "rolled_back"}
    assert ToolCall.objects.filter(status="error").exists()
    assert ApprovalRequest.objects.filter(status="approved").exists()
    assert ModelCall.objects.filter(cost_basis="unpriced").exists()  # the gpt-unpriced agent
    _clear_history()
    call_command("generate_history", runs=120, days=14, seed=3, verbosity=0)
    assert sorted(Run.objects.values_list("status", "failure_kind", "cost_usd")) == first
    assert_figures_match(30)


@pytest.mark.django_db
def test_generate_history_explains_what_it_needs(capsys):
    with pytest.raises(CommandError, match="seed_demo"):
        call_command("generate_history", runs=10, days=3)
    with pytest.raises(CommandError):
        call_command("generate_history", "--runs", "0", "--days", "3")
    with pytest.raises(CommandError):
        call_command("generate_history", "--runs", "ten")


def test_a_fold_moves_each_delta_once_and_leaves_the_eval_set_out_of_the_totals(places, personas):
    agents, spaces = places
    evals = Agent.objects.create(slug="evals", name="Evals", identity="x", for_evals=True)
    day = window(1)[0]
    parts = [
        (agents[0], {"runs": {"completed": 1}, "cost": "0.25"}),
        (agents[0], {"runs": {"failed": 1}, "failures": {"hook": 1}}),
        (agents[1], {"runs": {"completed": 1}, "duration": {"1200": 1}}),
        (evals, {"runs": {"failed": 1}}),
    ]
    for agent, data in parts:
        RollupDelta.objects.create(day=day, agent=agent, workspace=spaces[0], data=data)
    assert rollups_fold() == 4
    assert not RollupDelta.objects.exists() and rollups_fold() == 0
    cells = {c.agent_id: c.data for c in DailyRollup.objects.filter(day=day)}
    assert cells[agents[0].pk] == {
        "runs": {"completed": 1, "failed": 1},
        "cost": "0.25",
        "failures": {"hook": 1},
    }
    assert cells[evals.pk] == {"runs": {"failed": 1}}
    assert DailyTotal.objects.get(day=day).data == {
        "runs": {"completed": 2, "failed": 1},
        "cost": "0.25",
        "failures": {"hook": 1},
        "duration": {"1200": 1},
    }
    # A later delta adds to the cell it finds; a reader folds before it reads.
    RollupDelta.objects.create(
        day=day, agent=agents[1], workspace=spaces[0], data={"runs": {"completed": 1}}
    )
    assert retro_figures(days=1, agent_id=agents[1].pk).runs["completed"] == [2]
    assert not RollupDelta.objects.exists()


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_runs_ending_while_others_fold_and_reconcile_count_exactly_once(places, personas):
    """Runs end on three threads while a fourth folds and a fifth rebuilds the day from the
    raw rows, over and over: no run is lost or counted twice, and nothing deadlocks."""
    from django.db import connection

    agents, spaces = places
    runs = [
        Run.objects.create(
            agent=agents[n % 2],
            workspace=spaces[n % 2],
            requester=personas.operator,
            request="Fix the broken link in docs/a.md",
        )
        for n in range(30)
    ]
    errors: list[BaseException] = []
    ended = threading.Event()

    def guarded(work):
        def body():
            try:
                work()
            except BaseException as error:  # reported by the assert below
                errors.append(error)
            finally:
                connection.close()

        return threading.Thread(target=body)

    def end(chunk):
        for run in chunk:
            run_transition(run_id=run.pk, to="failed", failure_reason="stopped by hand")

    def again(work):
        while not ended.is_set():
            work()

    enders = [guarded(lambda chunk=runs[n::3]: end(chunk)) for n in range(3)]
    keepers = [
        guarded(lambda: again(rollups_fold)),
        guarded(lambda: again(lambda: rollups_reconcile([window(1)[0]]))),
    ]
    for thread in enders + keepers:
        thread.start()
    for thread in enders:
        thread.join(60)
    ended.set()
    for thread in keepers:
        thread.join(60)
    assert not errors, errors
    rollups_fold()
    day = window(1)[0]
    truth = cells_from_raw(
        day,
        run_model=Run,
        call_model=ModelCall,
        tool_model=ToolCall,
        approval_model=ApprovalRequest,
    )
    cells = {(c.agent_id, c.workspace_id): c.data for c in DailyRollup.objects.filter(day=day)}
    assert cells.keys() == truth.keys()
    assert sum(data["runs"]["failed"] for data in cells.values()) == 30
    assert all(rollup.same(cells[key], truth[key]) for key in truth)
    assert rollup.same(DailyTotal.objects.get(day=day).data, rollup.total(truth.values()))
    assert rollups_reconcile([day]) == 0


@pytest.mark.usefixtures(*SEEDED[1].args)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_rollback_while_the_day_is_reconciled_finishes_and_counts_once(
    personas, run, docs, monkeypatch
):
    """The rollback holds its run while it restores the files; the reconciliation that
    starts meanwhile (the delta table locked, a new cell for the run's workspace) must not
    wait on a row the rollback holds while the rollback waits on the table: on PostgreSQL
    one of them was cancelled as a deadlock, the files already restored."""
    from django.db import connection

    import runs.services

    run = drive(run)
    approval_decide(
        approval=ApprovalRequest.objects.get(run=run), user=personas.approver, decision="approve"
    )
    run = drive(run)
    assert run.status == "completed"
    day = day_of(run.finished_at)
    rollups_fold()
    DailyRollup.objects.all().delete()  # the reconciliation makes the cell again
    restoring, errors = threading.Event(), []
    restore = runs.services.writes_restore

    def slow_restore(**kwargs):
        restoring.set()
        time.sleep(0.5)  # the reconciliation starts now, the run's row held
        return restore(**kwargs)

    monkeypatch.setattr(runs.services, "writes_restore", slow_restore)

    def reconcile():
        restoring.wait(10)
        try:
            rollups_reconcile([day])
        except BaseException as error:  # reported by the assert below
            errors.append(error)
        finally:
            connection.close()

    reconciler = threading.Thread(target=reconcile)
    reconciler.start()
    run_rollback(run=run, user=personas.approver)
    reconciler.join(30)
    assert not errors, errors
    run.refresh_from_db()
    assert run.status == "rolled_back"
    rollups_fold()
    cell = DailyRollup.objects.get(day=day)
    assert cell.data["runs"] == {"rolled_back": 1}
    assert rollups_reconcile([day]) == 0


def test_the_admin_shows_the_rollups_with_the_runs_that_ended_since_the_last_fold(
    places, personas, client
):
    agents, spaces = places
    day = window(1)[0]
    RollupDelta.objects.create(
        day=day, agent=agents[0], workspace=spaces[0], data={"runs": {"completed": 1}}
    )
    client.force_login(personas.admin)
    listed = client.get("/admin/runs/dailyrollup/")
    assert listed.status_code == 200 and not RollupDelta.objects.exists()
    cell = DailyRollup.objects.get(day=day, agent=agents[0])
    assert cell.data == {"runs": {"completed": 1}}
    RollupDelta.objects.create(
        day=day, agent=agents[0], workspace=spaces[0], data={"runs": {"failed": 1}}
    )
    shown = client.get(f"/admin/runs/dailyrollup/{cell.pk}/change/")
    assert shown.status_code == 200 and "failed" in shown.content.decode()
    total = client.get("/admin/runs/dailytotal/")
    assert total.status_code == 200
    assert DailyTotal.objects.get(day=day).data["runs"] == {"completed": 1, "failed": 1}
