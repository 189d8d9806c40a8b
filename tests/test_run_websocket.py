"""The run WebSocket, through the real ASGI stack (origin check, session auth, consumer)
and the real channel layer of the configuration under test."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings

from harness_console.asgi import application
from runs.events import run_event_append
from tests.conftest import EVERYWHERE

pytestmark = EVERYWHERE
SEQ = re.compile(r'id="run-event-(\d+)"')


def cookie(client, user) -> bytes:
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()


def communicator(path: str, *, cookie: bytes | None = None, origin: bytes = b"http://localhost"):
    headers = [(b"origin", origin), (b"host", b"localhost")]
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, path, headers=headers)


async def _connect(path, **kwargs):
    ws = communicator(path, **kwargs)
    connected, code = await ws.connect(timeout=10)
    return ws, connected, code


def connect(path, **kwargs):
    return async_to_sync(_connect)(path, **kwargs)


async def _receive_all(ws, timeout=1.0) -> list[str]:
    """Every frame until none arrives for ``timeout`` s (a receive timeout would kill the app)."""
    frames = []
    while not await ws.receive_nothing(timeout=timeout):
        frames.append(await ws.receive_from())
    return frames


def seqs(frames: list[str]) -> list[int]:
    return [int(s) for frame in frames for s in SEQ.findall(frame)]


def test_an_unauthenticated_websocket_is_closed(run):
    _ws, connected, code = connect(f"/ws/runs/{run.pk}/")
    assert not connected
    assert code == 4401


def test_an_outsider_websocket_is_refused(client, run, personas):
    _ws, connected, code = connect(f"/ws/runs/{run.pk}/", cookie=cookie(client, personas.outsider))
    assert (connected, code) == (False, 4403)


@pytest.mark.parametrize("run_id", [lambda: uuid.uuid4(), lambda: "not-a-uuid"])
def test_an_unknown_run_websocket_is_closed_as_not_found(client, personas, run_id):
    session = cookie(client, personas.operator)
    _ws, connected, code = connect(f"/ws/runs/{run_id()}/", cookie=session)
    assert (connected, code) == (False, 4404)


def test_a_websocket_from_another_site_is_refused(client, run, personas):
    _ws, connected, _ = connect(
        f"/ws/runs/{run.pk}/",
        cookie=cookie(client, personas.operator),
        origin=b"https://evil.example",
    )
    assert not connected


@pytest.mark.parametrize("after", ["-1", "abc", "1.5", "99999999999", "%EF%BC%91"])
def test_a_malformed_after_gets_a_clear_error_then_a_close(client, run, personas, after):
    # Cookies are made here, not in the coroutine: its thread's queries would stay open.
    session = cookie(client, personas.operator)

    async def scenario():
        ws, connected, _ = await _connect(f"/ws/runs/{run.pk}/?after={after}", cookie=session)
        assert connected
        message = await ws.receive_from(timeout=5)
        closed = await ws.receive_output(timeout=5)
        return message, closed

    message, closed = async_to_sync(scenario)()
    assert "after must be a whole number" in message
    assert closed == {"type": "websocket.close", "code": 4400}


@pytest.mark.parametrize("who", ["admin", "approver", "operator", "ops"])
def test_every_role_that_sees_runs_may_follow_one(client, run, personas, who):
    session = cookie(client, getattr(personas, who))

    async def scenario():
        ws, connected, _ = await _connect(f"/ws/runs/{run.pk}/", cookie=session)
        frames = await _receive_all(ws, timeout=0.5) if connected else []
        await ws.disconnect()
        return connected, frames

    connected, frames = async_to_sync(scenario)()
    assert connected
    assert seqs(frames) == [1]


def test_it_replays_after_the_cursor_then_streams_each_event_once(client, run, personas):
    for i in range(4):
        run_event_append(run_id=run.pk, type="note", payload={"i": i})  # seq 2..5

    session = cookie(client, personas.operator)

    async def scenario():
        ws, connected, _ = await _connect(f"/ws/runs/{run.pk}/?after=2", cookie=session)
        assert connected
        replayed = await _receive_all(ws, timeout=1.0)
        from channels.db import database_sync_to_async

        for i in range(3):  # seq 6..8, appended and published by another "process"
            await database_sync_to_async(run_event_append)(
                run_id=run.pk, type="late", payload={"i": i}
            )
        streamed = await _receive_all(ws, timeout=2.0)
        await ws.disconnect()
        return replayed, streamed

    replayed, streamed = async_to_sync(scenario)()
    assert seqs(replayed) == [3, 4, 5]
    assert seqs(streamed) == [6, 7, 8]
    assert 'id="run-last-seq" hx-swap-oob="true" hidden data-seq="8"' in streamed[-1]


def test_a_status_change_updates_the_status_badge_live(client, run, personas):
    from runs.lifecycle import run_transition

    session = cookie(client, personas.operator)

    async def scenario():
        ws, _, _ = await _connect(f"/ws/runs/{run.pk}/?after=1", cookie=session)
        from channels.db import database_sync_to_async

        await database_sync_to_async(run_transition)(run_id=run.pk, to="planning")
        frames = await _receive_all(ws, timeout=2.0)
        await ws.disconnect()
        return frames

    frames = async_to_sync(scenario)()
    assert '<span id="run-status" class="status status-planning" hx-swap-oob="true">' in "".join(
        frames
    )


def test_the_ops_group_hears_the_events_that_move_the_dashboard_and_no_others(run):
    from channels.db import database_sync_to_async
    from channels.layers import get_channel_layer

    from harness_console.web.live import OPS_GROUP, PUBLISHER

    PUBLISHER.flush()  # the run's creation event is out before the group is joined

    async def scenario():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(OPS_GROUP, channel)
        await database_sync_to_async(run_event_append)(run_id=run.pk, type="note", payload={"x": 1})
        await database_sync_to_async(run_event_append)(
            run_id=run.pk, type="status.changed", payload={"to": "planning"}
        )
        message = await layer.receive(channel)
        await layer.group_discard(OPS_GROUP, channel)
        return message

    message = async_to_sync(scenario)()
    assert (message["run_id"], message["seq"], message["event_type"], message["payload"]) == (
        str(run.pk),
        3,
        "status.changed",
        {"to": "planning"},
    )


def test_events_committed_together_reach_the_page_in_one_message_in_order(client, run, personas):
    """A model turn and its tool call commit together: one message to the run's group, and
    the page renders both, in order."""
    from channels.layers import get_channel_layer

    from harness_console.web.live import PUBLISHER, run_group
    from runs.flow.checkpoints import checkpoint, defer_event
    from runs.flow.driver_state import Driver
    from runs.leases import lease_claim

    PUBLISHER.flush()
    session = cookie(client, personas.operator)

    def together() -> None:
        lease = lease_claim(run_id=run.pk, worker="test@host:1")
        driver = Driver(lease=lease, beat=None)  # type: ignore[arg-type]
        defer_event(driver, "note", {"n": "first"})
        defer_event(driver, "note", {"n": "second"})
        with checkpoint(driver):
            pass

    async def scenario():
        from channels.db import database_sync_to_async

        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(run_group(run.pk), channel)
        ws, connected, _ = await _connect(f"/ws/runs/{run.pk}/?after=1", cookie=session)
        assert connected
        await database_sync_to_async(together)()
        message = await layer.receive(channel)
        await layer.group_discard(run_group(run.pk), channel)
        frames = []
        while 'id="run-event-3"' not in "".join(frames):
            frames.append((await ws.receive_output(timeout=10))["text"])
        await ws.disconnect()
        return message, "".join(frames)

    message, html = async_to_sync(scenario)()
    assert message["type"] == "run.events"
    assert [e["seq"] for e in message["events"]] == [2, 3]
    assert html.index('id="run-event-2"') < html.index("first") < html.index("second")


def test_a_batch_goes_only_to_groups_someone_is_in(run, monkeypatch, settings):
    """On the embedded default's layer the publisher asks once which of a batch's groups
    have members and sends to those only; the member hears its run all the same."""
    import uuid

    from channels.layers import get_channel_layer

    from harness_console.web.live import PUBLISHER, run_group

    PUBLISHER.flush()  # the run's creation is out: what the spy sees is the batch's
    layer = get_channel_layer()
    sent: list[str] = []
    real = layer.group_send

    async def spy(group: str, message: dict) -> None:
        if message.get("seq") == 9:
            sent.append(group)
        await real(group, message)

    monkeypatch.setattr(layer, "group_send", spy)
    other = uuid.uuid4()
    batch = [
        {"type": "run.event", "run_id": str(run_id), "seq": 9, "event_type": "note"}
        for run_id in (run.pk, other)
    ]

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add(run_group(run.pk), channel)
        await PUBLISHER._send_batch(layer, batch)
        message = await layer.receive(channel)
        await layer.group_discard(run_group(run.pk), channel)
        return message

    message = async_to_sync(scenario)()
    assert message["run_id"] == str(run.pk)
    if settings.EMBEDDED:
        assert sent == [run_group(run.pk)]
    else:  # Redis: a group nobody is in costs one round trip; nothing is looked up first
        assert sorted(sent) == sorted([run_group(run.pk), run_group(other)])


def test_a_burst_of_commits_reaches_the_group_in_few_batches_in_order(run, monkeypatch):
    """A run's loop commits a step every few ms: the publisher sends what commits while it
    sends or waits (BATCH_INTERVAL) as one message, not one send per commit; nothing is
    lost or reordered."""
    from channels.layers import get_channel_layer

    from harness_console.web.live import PUBLISHER, run_group

    PUBLISHER.flush()
    layer = get_channel_layer()
    group, sends = run_group(run.pk), []
    real = layer.group_send

    async def spy(name: str, message: dict) -> None:
        if name == group:
            sends.append(message)
        await real(name, message)

    monkeypatch.setattr(layer, "group_send", spy)
    commits = [
        [{"type": "run.event", "run_id": str(run.pk), "seq": 100 + 2 * i + k} for k in (0, 1)]
        for i in range(40)
    ]

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        for commit in commits:  # a loop's pace: a step every few ms, from a writer's thread
            await sync_to_async(PUBLISHER.send)(commit)
            await asyncio.sleep(0.005)
        await sync_to_async(PUBLISHER.flush)(10)
        received = []
        while len(received) < 80:
            message = await layer.receive(channel)
            received += message["events"] if message["type"] == "run.events" else [message]
        await layer.group_discard(group, channel)
        return received

    received = async_to_sync(scenario)()
    assert [m["seq"] for m in received] == list(range(100, 180))
    assert 1 <= len(sends) <= 20, len(sends)  # 40 commits, in a few batches


def test_logging_out_closes_the_open_pages_of_that_user(client, run, personas):
    session = cookie(client, personas.operator)

    async def scenario():
        ws, connected, _ = await _connect(f"/ws/runs/{run.pk}/?after=1", cookie=session)
        assert connected
        from channels.db import database_sync_to_async

        await database_sync_to_async(client.logout)()
        closed = await ws.receive_output(timeout=5)
        return closed

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}


def test_a_user_who_lost_the_right_gets_no_more_events(client, run, personas, monkeypatch):
    from runs.consumers import RunEventsConsumer

    monkeypatch.setattr(RunEventsConsumer, "recheck_seconds", 0.0)
    session = cookie(client, personas.operator)

    async def scenario():
        from channels.db import database_sync_to_async

        ws, connected, _ = await _connect(f"/ws/runs/{run.pk}/?after=1", cookie=session)
        assert connected
        await database_sync_to_async(personas.operator.groups.clear)()
        await database_sync_to_async(run_event_append)(run_id=run.pk, type="note")
        frames = []
        while True:
            output = await ws.receive_output(timeout=5)
            if output["type"] == "websocket.close":
                return frames, output
            frames.append(output)

    frames, closed = async_to_sync(scenario)()
    assert frames == [] and closed["code"] == 4403
