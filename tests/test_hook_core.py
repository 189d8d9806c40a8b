"""The hook runner and the shipped handlers (SPEC C7), as pure functions: order, halts,
fail-closed and fail-open, time limits, redaction, change freezes, and a webhook posted to a
real local HTTP server. The chain's rules are tested twice: as the loop runs them, each
handler in a worker thread under its real time limit, and with a scripted ``call`` that
answers finished, crashed or overran with no thread and no waiting."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.core.hook_handlers import HANDLERS, phase_check
from policies.core.hook_runner import (
    Binding,
    Crashed,
    Finished,
    HooksCompleted,
    HooksHalted,
    Overran,
    hooks_run_chain,
)
from policies.core.hook_webhook import WebhookError
from policies.core.hooks import Halt, HookSettingsError, Replace
from policies.hook_handlers import handler_build
from policies.hook_threads import call_in_thread

ANTHROPIC_KEY = "sk-ant-api03-" + "Ab1_" * 20 + "xyzAA"


def bind(name, handler, *, phase="pre_tool_use", limit=1.0, fail_open=False):
    return Binding(name=name, phase=phase, handler=handler, time_limit=limit, fail_open=fail_open)


def recorder(calls, name, result=None):
    def handler(event):
        calls.append((name, dict(event)))
        return result

    return handler


def run_threaded(bindings, *, phase, event):
    """The chain as the loop runs it: each handler in a worker thread under its time limit."""
    return hooks_run_chain(bindings, phase=phase, event=event, call=call_in_thread)


# --- the runner ---------------------------------------------------------------------------


def test_bindings_run_in_the_order_given_and_only_for_their_phase():
    calls: list = []
    bindings = [
        bind("first", recorder(calls, "first")),
        bind("elsewhere", recorder(calls, "elsewhere"), phase="session_end"),
        bind("second", recorder(calls, "second")),
    ]
    outcome = run_threaded(bindings, phase="pre_tool_use", event={"tool": "readSource"})
    assert isinstance(outcome, HooksCompleted)
    assert [name for name, _ in calls] == ["first", "second"]
    assert outcome.ran == ("first", "second") and outcome.skipped == ()
    assert calls[0][1] == {"tool": "readSource", "phase": "pre_tool_use"}


def test_a_halt_stops_the_chain_and_names_the_handler():
    calls: list = []
    bindings = [
        bind("first", recorder(calls, "first")),
        bind("guard", recorder(calls, "guard", Halt("deleting is not allowed")), fail_open=True),
        bind("last", recorder(calls, "last")),
    ]
    outcome = run_threaded(bindings, phase="pre_tool_use", event={})
    assert isinstance(outcome, HooksHalted)
    assert (outcome.handler, outcome.reason) == ("guard", "deleting is not allowed")
    assert [name for name, _ in calls] == ["first", "guard"]
    assert outcome.ran == ("first",)


def test_a_replace_changes_the_event_for_later_handlers_and_the_caller():
    calls: list = []
    bindings = [
        bind("shorten", lambda e: Replace({"output": e["output"][:3]}, details={"cut": 1})),
        bind("watch", recorder(calls, "watch")),
    ]
    outcome = run_threaded(bindings, phase="pre_tool_use", event={"output": "abcdef"})
    assert calls[0][1]["output"] == "abc"
    assert outcome.event["output"] == "abc"
    assert outcome.reports[0].verdict == "replaced" and outcome.reports[0].details == {"cut": 1}


def test_a_crash_fails_closed_and_says_what_crashed():
    calls: list = []

    def broken(event):
        return {}["x"]

    bindings = [bind("secret-redaction", broken), bind("after", recorder(calls, "after"))]
    outcome = run_threaded(bindings, phase="pre_tool_use", event={})
    assert isinstance(outcome, HooksHalted)
    assert outcome.reason == "secret-redaction crashed: KeyError 'x'"
    assert outcome.handler == "secret-redaction" and calls == []


def test_a_crash_with_fail_open_is_skipped_and_reported():
    calls: list = []
    bindings = [
        bind("flaky", lambda e: 1 / 0, fail_open=True),
        bind("after", recorder(calls, "after")),
    ]
    outcome = run_threaded(bindings, phase="pre_tool_use", event={})
    assert isinstance(outcome, HooksCompleted)
    assert outcome.ran == ("after",)
    (skipped,) = outcome.skipped
    assert skipped.handler == "flaky" and skipped.verdict == "crashed"
    assert skipped.reason == "flaky crashed: ZeroDivisionError division by zero"


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Holds a slow handler until the test ends, so no thread outlives it by much."""
    released = threading.Event()
    yield released
    released.set()


def test_an_overrun_fails_closed(gate):
    calls: list = []
    bindings = [
        bind("webhook-notifier", lambda e: gate.wait(5), limit=0.05),
        bind("after", recorder(calls, "after")),
    ]
    outcome = run_threaded(bindings, phase="pre_tool_use", event={})
    assert isinstance(outcome, HooksHalted)
    assert outcome.reason == "webhook-notifier overran its 0.05 s limit"
    assert outcome.reports[0].verdict == "overran" and calls == []


def test_an_overrun_with_fail_open_goes_on_without_its_late_changes(gate):
    def slow(event):
        gate.wait(5)
        return Replace({"output": "late"})

    bindings = [bind("slow", slow, phase="post_tool_use", limit=0.05, fail_open=True)]
    outcome = run_threaded(bindings, phase="post_tool_use", event={"output": "on time"})
    assert isinstance(outcome, HooksCompleted)
    assert outcome.event["output"] == "on time" and outcome.skipped[0].verdict == "overran"


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ("yes", "it returned 'yes', not None, Halt or Replace"),
        (Replace({"phase": "session_end"}), "it tried to change the phase"),
    ],
)
def test_a_bad_return_value_is_a_crash(result, message):
    outcome = run_threaded([bind("odd", lambda e: result)], phase="pre_tool_use", event={})
    assert isinstance(outcome, HooksHalted) and outcome.reason == f"odd crashed: {message}"


def test_handlers_cannot_change_the_event_they_are_given():
    outcome = run_threaded(
        [bind("meddler", lambda e: e.update(tool="rm"))], phase="pre_tool_use", event={}
    )
    assert isinstance(outcome, HooksHalted) and "AttributeError" in outcome.reason


def test_bad_bindings_and_phases_are_refused():
    with pytest.raises(ValueError, match="Unknown hook phase"):
        bind("x", lambda e: None, phase="before_everything")
    with pytest.raises(TypeError, match="must be callable"):
        bind("x", "not callable")
    with pytest.raises(ValueError, match="time limit above 0"):
        bind("x", lambda e: None, limit=0)
    with pytest.raises(ValueError, match="Unknown hook phase"):
        run_threaded([], phase="whenever", event={})


def test_the_threaded_call_answers_finished_crashed_or_overran(gate):
    def leave(event):
        raise SystemExit(3)

    assert call_in_thread(lambda e: Halt(e["why"]), {"why": "no"}, 1.0) == Finished(Halt("no"))
    crashed = call_in_thread(lambda e: 1 / 0, {}, 1.0)
    assert isinstance(crashed, Crashed) and isinstance(crashed.error, ZeroDivisionError)
    exited = call_in_thread(leave, {}, 1.0)  # even SystemExit is reported, never raised
    assert isinstance(exited, Crashed) and isinstance(exited.error, SystemExit)
    assert call_in_thread(lambda e: gate.wait(5), {}, 0.05) == Overran()


# --- the chain, with a scripted call: no threads, no waiting ---------------------------------


class Script:
    """A fake ``call``: a handler in ``answers`` gets that answer without running; any other
    runs here, in the test's own thread. ``asked`` records each call as (handler, event,
    time limit), in order."""

    def __init__(self, answers=None):
        self.answers = answers or {}
        self.asked: list = []

    def __call__(self, handler, event, time_limit):
        self.asked.append((handler, event, time_limit))
        if handler in self.answers:
            return self.answers[handler]
        return Finished(handler(event))

    def handlers(self):
        return [handler for handler, _, _ in self.asked]


def noop(event):
    return None


def later(event):
    return None


def test_the_chain_asks_for_each_binding_in_order_with_its_limit_and_a_read_only_event():
    script = Script()
    bindings = [
        bind("first", noop, limit=0.5),
        bind("elsewhere", noop, phase="session_end"),
        bind("second", later, limit=3),
    ]
    outcome = hooks_run_chain(bindings, phase="pre_tool_use", event={"tool": "x"}, call=script)
    assert isinstance(outcome, HooksCompleted) and outcome.ran == ("first", "second")
    assert [(h, limit) for h, _, limit in script.asked] == [(noop, 0.5), (later, 3)]
    event = script.asked[0][1]
    assert isinstance(event, Mapping) and dict(event) == {"tool": "x", "phase": "pre_tool_use"}
    with pytest.raises(TypeError):
        event["tool"] = "rm"  # type: ignore[index]


def test_an_overrun_fails_closed_and_the_chain_asks_no_further():
    script = Script({noop: Overran()})
    bindings = [bind("webhook-notifier", noop, limit=2), bind("after", later)]
    outcome = hooks_run_chain(bindings, phase="pre_tool_use", event={}, call=script)
    assert isinstance(outcome, HooksHalted) and outcome.handler == "webhook-notifier"
    assert outcome.reason == "webhook-notifier overran its 2 s limit"
    assert outcome.reports[0].verdict == "overran" and not outcome.reports[0].skipped
    assert script.handlers() == [noop]


def test_an_overrun_with_fail_open_is_skipped_and_the_event_is_left_as_it_was():
    script = Script({noop: Overran()})
    bindings = [
        bind("slow", noop, phase="post_tool_use", limit=0.25, fail_open=True),
        bind("after", later, phase="post_tool_use"),
    ]
    event = {"output": "on time"}
    outcome = hooks_run_chain(bindings, phase="post_tool_use", event=event, call=script)
    assert isinstance(outcome, HooksCompleted) and outcome.ran == ("after",)
    (skipped,) = outcome.skipped
    assert (skipped.handler, skipped.verdict) == ("slow", "overran")
    assert skipped.reason == "slow overran its 0.25 s limit"
    assert outcome.event["output"] == "on time" and script.handlers() == [noop, later]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (KeyError("x"), "guard crashed: KeyError 'x'"),
        (RuntimeError(), "guard crashed: RuntimeError"),
        (
            WebhookError("could not reach https://h: refused"),
            "guard crashed: WebhookError could not reach https://h: refused",
        ),
    ],
)
def test_a_crash_fails_closed_and_names_the_error(error, reason):
    script = Script({noop: Crashed(error)})
    bindings = [bind("guard", noop), bind("after", later)]
    outcome = hooks_run_chain(bindings, phase="pre_tool_use", event={}, call=script)
    assert isinstance(outcome, HooksHalted) and outcome.reason == reason
    assert outcome.reports[0].verdict == "crashed" and script.handlers() == [noop]


def test_a_scripted_crash_with_fail_open_is_skipped_and_reported():
    script = Script({noop: Crashed(ZeroDivisionError("division by zero"))})
    bindings = [bind("flaky", noop, fail_open=True), bind("after", later)]
    outcome = hooks_run_chain(bindings, phase="pre_tool_use", event={}, call=script)
    assert isinstance(outcome, HooksCompleted) and outcome.ran == ("after",)
    (skipped,) = outcome.skipped
    assert skipped.reason == "flaky crashed: ZeroDivisionError division by zero"


def test_a_halt_stops_the_chain_whatever_fail_open_says():
    script = Script({noop: Finished(Halt("deleting is not allowed"))})
    bindings = [bind("guard", noop, fail_open=True), bind("after", later)]
    outcome = hooks_run_chain(bindings, phase="pre_tool_use", event={}, call=script)
    assert isinstance(outcome, HooksHalted)
    assert (outcome.handler, outcome.reason) == ("guard", "deleting is not allowed")
    assert outcome.reports[0].verdict == "halted" and not outcome.reports[0].skipped
    assert script.handlers() == [noop]


def test_a_replace_reaches_later_handlers_and_the_caller_and_keeps_its_details():
    script = Script({noop: Finished(Replace({"output": "abc"}, details={"cut": 3}))})
    bindings = [bind(name, h, phase="post_tool_use") for name, h in (("cut", noop), ("w", later))]
    event = {"output": "abcdef", "tool": "readSource"}
    outcome = hooks_run_chain(bindings, phase="post_tool_use", event=event, call=script)
    assert script.asked[1][1]["output"] == "abc"
    assert dict(outcome.event) == {"output": "abc", "tool": "readSource", "phase": "post_tool_use"}
    assert outcome.reports[0].verdict == "replaced" and outcome.reports[0].details == {"cut": 3}
    assert event["output"] == "abcdef"  # the caller's event is left alone


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ("yes", "it returned 'yes', not None, Halt or Replace"),
        (Replace({"phase": "session_end", "output": "x"}), "it tried to change the phase"),
    ],
)
def test_a_bad_result_is_a_crash_whose_changes_are_dropped(result, message):
    script = Script({noop: Finished(result)})
    bindings = [bind("odd", noop, fail_open=True)]
    event = {"output": "kept"}
    outcome = hooks_run_chain(bindings, phase="pre_tool_use", event=event, call=script)
    assert isinstance(outcome, HooksCompleted)
    assert outcome.skipped[0].reason == f"odd crashed: {message}"
    assert dict(outcome.event) == {"output": "kept", "phase": "pre_tool_use"}


def test_a_call_that_answers_something_else_is_a_bug_not_a_verdict():
    with pytest.raises(TypeError, match="not Finished, Crashed or Overran"):
        hooks_run_chain([bind("x", noop)], phase="pre_tool_use", event={}, call=lambda *a: True)


ANSWERS = {
    "went_on": Finished(None),
    "replaced": Finished(Replace({"n": 1})),
    "halted": Finished(Halt("stop")),
    "crashed": Crashed(ValueError("bad")),
    "overran": Overran(),
}


@given(st.lists(st.tuples(st.sampled_from(sorted(ANSWERS)), st.booleans()), max_size=8))
def test_the_chain_stops_at_the_first_halt_or_closed_failure_and_reports_every_call(steps):
    handlers = [lambda e: None for _ in steps]
    script = Script({h: ANSWERS[kind] for h, (kind, _) in zip(handlers, steps, strict=True)})
    bindings = [
        bind(f"h{i}", h, fail_open=open_)
        for i, (h, (_, open_)) in enumerate(zip(handlers, steps, strict=True))
    ]
    outcome = hooks_run_chain(bindings, phase="pre_tool_use", event={}, call=script)
    stops = [
        i
        for i, (kind, open_) in enumerate(steps)
        if kind == "halted" or (kind in ("crashed", "overran") and not open_)
    ]
    asked = stops[0] + 1 if stops else len(steps)
    assert isinstance(outcome, HooksHalted) == bool(stops)
    assert script.handlers() == handlers[:asked]
    assert [r.verdict for r in outcome.reports] == [kind for kind, _ in steps[:asked]]
    assert [r.handler for r in outcome.skipped] == [
        f"h{i}"
        for i, (kind, open_) in enumerate(steps[:asked])
        if open_ and kind in ("crashed", "overran")
    ]


# --- the registry ---------------------------------------------------------------------------


def test_every_shipped_handler_builds_from_its_example_and_names_its_phases():
    assert {"secret-redaction", "change-freeze", "webhook-notifier"} <= set(HANDLERS)
    for name, spec in HANDLERS.items():
        assert callable(handler_build(name, spec.example))
        assert spec.phases and spec.description
    with pytest.raises(HookSettingsError, match="post_tool_use only, not at pre_tool_use"):
        phase_check("secret-redaction", "pre_tool_use")
    with pytest.raises(HookSettingsError, match="No hook handler named 'nope'"):
        handler_build("nope", {})


# --- secret-redaction -----------------------------------------------------------------------


def redact(output, settings=None):
    handler = handler_build("secret-redaction", settings or {})
    return handler({"phase": "post_tool_use", "output": output})


def test_redaction_removes_a_planted_anthropic_key_from_nested_output_and_counts_it():
    output = {
        "ok": True,
        "summary": "read config",
        "lines": ["first", {"env": f"ANTHROPIC_API_KEY={ANTHROPIC_KEY}", "n": 3}],
    }
    result = redact(output)
    assert isinstance(result, Replace)
    assert ANTHROPIC_KEY not in json.dumps(result.changes)
    assert result.changes["output"]["lines"][1] == {
        "env": "ANTHROPIC_API_KEY=[REDACTED:anthropic_key]",
        "n": 3,
    }
    assert result.details == {"redacted": 1, "kinds": {"anthropic_key": 1}}
    assert output["lines"][1]["env"].endswith(ANTHROPIC_KEY)  # the input is left alone


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("key AKIAIOSFODNN7EXAMPLE here", "aws_access_key"),
        ("ghp_" + "a1B2" * 9, "github_token"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_token"),
        ("xoxb-1234567890-abcdefghij", "slack_token"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "private_key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNz (cut off)", "private_key"),
    ],
)
def test_redaction_knows_common_secret_shapes(text, kind):
    result = redact(text)
    assert f"[REDACTED:{kind}]" in result.changes["output"]
    assert result.details["kinds"] == {kind: 1}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('password = "hunter2"', 'password = "[REDACTED:assignment]"'),
        ("DB_PASSWORD=s3cret!", "DB_PASSWORD=[REDACTED:assignment]"),
        ("GET /x?token=abcdef&page=2", "GET /x?token=[REDACTED:assignment]&page=2"),
        ("  api_key: abc123  # prod", "  api_key: [REDACTED:assignment]  # prod"),
        ('{"client_secret": "zzz"}', '{"client_secret": "[REDACTED:assignment]"}'),
    ],
)
def test_redaction_keeps_the_name_of_an_assignment_and_drops_its_value(text, expected):
    assert redact(text).changes["output"] == expected


def test_redaction_redacts_values_under_secret_keys_and_leaves_ordinary_text():
    result = redact({"password": "hunter2", "max_tokens": 5, "tokens": "many"})
    assert result.changes["output"] == {
        "password": "[REDACTED:assignment]",
        "max_tokens": 5,
        "tokens": "many",
    }
    assert redact("token = get_token()\nprint('hello')") is None


def test_redaction_applies_custom_patterns():
    settings = {"patterns": [r"EMP-\d{6}", {"kind": "ticket", "pattern": r"SEC-\d+"}]}
    result = redact(["EMP-123456 filed SEC-42"], settings)
    assert result.changes["output"] == ["[REDACTED:custom] filed [REDACTED:ticket]"]
    assert result.details == {"redacted": 2, "kinds": {"custom": 1, "ticket": 1}}


def test_redaction_can_cover_other_event_fields():
    handler = handler_build("secret-redaction", {"fields": ["output", "error"]})
    result = handler({"output": "fine", "error": f"bad key {ANTHROPIC_KEY}"})
    assert result.changes == {"error": "bad key [REDACTED:anthropic_key]"}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"patterns": ["foo("]}, r"patterns\[0\]: 'foo\(' is not a valid regular expression"),
        ({"patterns": ["ok", "a*"]}, r"patterns\[1\]: 'a\*' matches the empty text"),
        ({"patterns": [3]}, r"patterns\[0\]: give a regular expression"),
        ({"patern": ["x"]}, r"Unknown setting \('patern' was unexpected\)"),
        ({"fields": []}, r"fields: \[\] should be non-empty"),
        ([], r"settings: \[\] is not of type 'object'"),
    ],
)
def test_bad_redaction_settings_are_refused_clearly(settings, message):
    with pytest.raises(HookSettingsError, match=message):
        handler_build("secret-redaction", settings)


@given(
    before=st.text(max_size=60),
    after=st.text(max_size=60),
    nested=st.booleans(),
)
def test_a_planted_key_never_survives_and_redacting_twice_changes_nothing(before, after, nested):
    text = f"{before} {ANTHROPIC_KEY} {after}"
    output = {"a": [text]} if nested else text
    first = redact(output)
    assert ANTHROPIC_KEY not in json.dumps(first.changes["output"])
    assert redact(first.changes["output"]) is None


# --- change-freeze ---------------------------------------------------------------------------

CHRISTMAS = {
    "windows": [{"name": "Christmas", "start": "2025-12-24T00:00", "end": "2025-12-27T00:00"}],
    "timezone": "Europe/Paris",
    "reason": "Release freeze",
}
PARIS = ZoneInfo("Europe/Paris")


def freeze(settings, *, now, tool="commitDraft", side_effect="filesystem_write"):
    handler = handler_build("change-freeze", settings)
    return handler({"now": now, "tool": tool, "side_effect": side_effect})


def test_a_freeze_halts_a_write_tool_inside_the_window_and_names_it():
    result = freeze(CHRISTMAS, now=datetime(2025, 12, 25, 9, tzinfo=PARIS))
    assert isinstance(result, Halt)
    assert result.reason.startswith("Change freeze (Christmas): Release freeze.")
    assert "commitDraft is a write tool (filesystem_write)" in result.reason


def test_a_freeze_lets_writes_through_outside_the_window():
    assert freeze(CHRISTMAS, now=datetime(2025, 12, 27, 0, 0, tzinfo=PARIS)) is None
    # 23:30 UTC on the 23rd is already the 24th in Paris.
    assert isinstance(freeze(CHRISTMAS, now=datetime(2025, 12, 23, 23, 30, tzinfo=UTC)), Halt)
    assert freeze(CHRISTMAS, now=datetime(2025, 12, 23, 22, 59, tzinfo=UTC)) is None


def test_a_freeze_never_stops_read_only_tools():
    now = datetime(2025, 12, 25, 9, tzinfo=PARIS)
    assert freeze(CHRISTMAS, now=now, tool="readSource", side_effect="none") is None


def test_a_freeze_can_name_the_tools_it_stops():
    settings = {**CHRISTMAS, "tools": ["commitDraft", "mcp:*"]}
    now = datetime(2025, 12, 25, 9, tzinfo=PARIS)
    assert isinstance(freeze(settings, now=now), Halt)
    assert isinstance(
        freeze(settings, now=now, tool="mcp:deploy", side_effect="external_api"), Halt
    )
    assert freeze(settings, now=now, tool="createDraft") is None


def test_a_weekly_freeze_runs_past_midnight():
    settings = {"weekdays": ["fri"], "from": "18:00", "until": "08:00", "timezone": "Europe/Paris"}
    friday_evening = datetime(2025, 12, 5, 19, tzinfo=PARIS)
    saturday_morning = friday_evening + timedelta(hours=12)
    halt = freeze(settings, now=friday_evening)
    assert isinstance(halt, Halt) and "Fri 18:00–08:00 Europe/Paris" in halt.reason
    assert isinstance(freeze(settings, now=saturday_morning), Halt)
    assert freeze(settings, now=saturday_morning + timedelta(hours=1)) is None
    assert freeze(settings, now=friday_evening - timedelta(hours=2)) is None


def test_a_weekday_freeze_without_hours_covers_the_whole_day():
    settings = {"weekdays": ["sat", "sun"]}
    assert isinstance(freeze(settings, now=datetime(2025, 12, 7, 23, 59, tzinfo=UTC)), Halt)
    assert freeze(settings, now=datetime(2025, 12, 8, 0, 0, tzinfo=UTC)) is None


def test_a_freeze_without_an_aware_now_fails_closed():
    binding = Binding("change-freeze", "pre_tool_use", handler_build("change-freeze", CHRISTMAS))
    event = {"now": datetime(2025, 12, 25, 9), "tool": "commitDraft"}
    outcome = run_threaded([binding], phase="pre_tool_use", event=event)
    assert isinstance(outcome, HooksHalted)
    assert "crashed: ValueError the event has no timezone-aware 'now'" in outcome.reason


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "Give the freeze some time"),
        ({"weekdays": ["sat"], "timezone": "Mars/Base"}, "timezone: 'Mars/Base' is not a time"),
        ({"windows": [{"start": "soon", "end": "2025-01-01"}]}, r"windows\[0\].start: 'soon'"),
        (
            {"windows": [{"start": "2025-01-02", "end": "2025-01-01"}]},
            r"windows\[0\]: the end must come after the start",
        ),
        ({"from": "18:00"}, "give both times"),
        ({"from": "25:00", "until": "01:00"}, "from: '25:00' is not a time of day"),
        ({"from": "08:00", "until": "08:00"}, "the same time"),
        ({"weekdays": []}, "name at least one day"),
        ({"weekdays": ["saturday"]}, r"weekdays\[0\]: 'saturday' is not one of"),
    ],
)
def test_bad_freeze_settings_are_refused_clearly(settings, message):
    with pytest.raises(HookSettingsError, match=message):
        handler_build("change-freeze", settings)


# --- webhook-notifier -----------------------------------------------------------------------


class Receiver(BaseHTTPRequestHandler):
    received: list  # set per server

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.server.received.append(  # type: ignore[attr-defined]
            (self.path, dict(self.headers), json.loads(self.rfile.read(length)))
        )
        status = {"/fail": 500, "/moved": 302}.get(self.path, 204)
        self.send_response(status)
        if status == 302:
            self.send_header("Location", "/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def url(server, path="/hook"):
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_the_webhook_posts_a_short_summary_without_the_output(receiver):
    handler = handler_build(
        "webhook-notifier", {"url": url(receiver), "headers": {"X-Token": "t0ken"}}
    )
    event = {
        "phase": "post_tool_use",
        "run_id": 42,
        "agent": "docs-fixer",
        "tool": "readSource",
        "decision": "allow",
        "status": f"ok, key {ANTHROPIC_KEY}",
        "output": "the whole file",
        "now": datetime(2025, 12, 1, 9, tzinfo=UTC),
    }
    assert handler(event) is None
    ((path, headers, body),) = receiver.received
    assert path == "/hook" and headers["X-Token"] == "t0ken"
    assert headers["Content-Type"] == "application/json"
    assert body == {
        "phase": "post_tool_use",
        "run_id": 42,
        "agent": "docs-fixer",
        "tool": "readSource",
        "decision": "allow",
        "status": "ok, key [REDACTED:anthropic_key]",
        "at": "2025-12-01T09:00:00+00:00",
    }


@pytest.mark.parametrize(
    ("path", "message"), [("/fail", "answered HTTP 500"), ("/moved", "answered HTTP 302")]
)
def test_a_webhook_answer_other_than_2xx_raises(receiver, path, message):
    handler = handler_build("webhook-notifier", {"url": url(receiver, path)})
    with pytest.raises(WebhookError, match=message) as raised:
        handler({"phase": "session_end"})
    assert path not in str(raised.value)  # the path of a webhook URL is often its secret
    assert len(receiver.received) == 1


def test_an_unreachable_webhook_raises_and_fail_open_decides():
    with ThreadingHTTPServer(("127.0.0.1", 0), Receiver) as closed:
        port = closed.server_address[1]
    handler = handler_build("webhook-notifier", {"url": f"http://127.0.0.1:{port}/", "timeout": 1})
    for fail_open, kind in ((False, HooksHalted), (True, HooksCompleted)):
        binding = Binding("webhook-notifier", "session_start", handler, 3, fail_open)
        outcome = run_threaded([binding], phase="session_start", event={"run_id": 1})
        assert isinstance(outcome, kind)
        assert "crashed: WebhookError could not reach http://127.0.0.1" in outcome.reports[0].reason


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"url": "file:///etc/passwd"}, "only http:// and https:// addresses are allowed"),
        ({"url": "ftp://example.com/x"}, "only http:// and https://"),
        ({"url": "http:///nohost"}, "the address has no host"),
        ({"url": "https://example.com", "timeout": 20}, "timeout: 20 is greater than the max"),
        ({"url": "https://example.com", "timeout": 0}, "timeout: 0 is less than or equal"),
        ({"url": "https://example.com", "headers": {"X": 1}}, r"headers.X: 1 is not of type"),
        ({}, "settings: 'url' is a required property"),
    ],
)
def test_bad_webhook_settings_are_refused_clearly(settings, message):
    with pytest.raises(HookSettingsError, match=message):
        handler_build("webhook-notifier", settings)
