"""Periodic maintenance tasks."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from runs.tasks import live_layer_trim
from tests.conftest import EVERYWHERE


@EVERYWHERE
def test_the_embedded_channel_layer_is_trimmed_of_expired_messages():
    if not settings.EMBEDDED:  # Redis expires its keys itself: the task has nothing to do
        live_layer_trim()
        return
    from channels_lite.models import Event

    stale = Event.objects.create(
        channel_name="x", data=b"{}", expires_at=timezone.now() - timedelta(minutes=5)
    )
    fresh = Event.objects.create(
        channel_name="x", data=b"{}", expires_at=timezone.now() + timedelta(minutes=5)
    )
    live_layer_trim()
    assert list(Event.objects.values_list("pk", flat=True)) == [fresh.pk]
    assert not Event.objects.filter(pk=stale.pk).exists()


def test_runs_are_dispatched_by_the_names_their_tasks_have():
    """The run side dispatches by task name (the tasks module imports the flow, which moves
    runs through lifecycle): a typo would queue work nobody runs."""
    from runs import lifecycle, tasks

    assert tasks.run_execute.name == lifecycle.RUN_EXECUTE
    assert tasks.run_session_end.name == lifecycle.RUN_SESSION_END
