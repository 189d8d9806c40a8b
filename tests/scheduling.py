"""How pytest-xdist shares the suite between its workers: the live stack on one of them, last.

Two kinds of test cannot share a worker in any order:
- a test that drives runs in-process must not follow the live stack on its worker: once up,
  the stack's sweeper dispatches any unclaimed run it finds in that worker's database;
- a browser test leaves Playwright's event loop in the worker's main thread, where Django's
  sync code paths refuse to run, so nothing but browser tests may follow it.

So every test of the live stack (and every browser test) is one group, ``live``, sent whole
to the first worker once the in-process tests left for the others weigh about as much as
the group; the in-process tests go to whichever worker asks, as xdist's ``load`` does. Only
one live stack is started in a session, as without xdist.

The weight is a rough figure (a live test takes about as long as ``LIVE_WEIGHT`` in-process
ones); it only moves the point where the first worker switches, never which test runs where
relative to the rules above.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScheduling

LIVE_GROUP = "live"
LIVE_WEIGHT = 15


def is_live(nodeid: str) -> bool:
    return nodeid.endswith(f"@{LIVE_GROUP}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the live group before xdist's worker names each test after its group."""
    for item in items:
        if item.get_closest_marker("browser") or "live_stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(LIVE_GROUP))


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log) -> LiveLastScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None
    return LiveLastScheduling(config, log)


class LiveLastScheduling(LoadScheduling):
    """``load`` for the in-process tests; the ``live`` group whole, last, on one node."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        self.live: list[int] = []
        self.live_node = None
        self.live_sent = False

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is None:
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = next(iter(self.node2collection.values()))
            live = [is_live(nodeid) for nodeid in self.collection]
            self.pending[:] = [i for i, flag in enumerate(live) if not flag]
            self.live = [i for i, flag in enumerate(live) if flag]
            if self.maxschedchunk is None:
                self.maxschedchunk = len(self.collection)
        for node in self.nodes:
            self.check_schedule(node)

    @property
    def tests_finished(self) -> bool:
        return not self.live and super().tests_finished

    @property
    def has_pending(self) -> bool:
        return bool(self.live) or super().has_pending

    def check_schedule(self, node, duration: float = 0) -> None:
        """1. The live node takes the group once its turn has come and at most one test of
        its own is left (a worker runs a test only once it knows the next one), then is
        told that nothing follows. 2. Otherwise any node takes in-process tests, a few at a
        time. 3. With none left, a node is done, but the live node waits for its turn."""
        if node.shutting_down or self.collection is None:
            return
        if self.live_node is None and not self.live_sent:
            self.live_node = node
        mine = self.node2pending[node]
        if node is self.live_node and self.live and len(mine) <= 1 and self._live_turn():
            self.node2pending[node].extend(self.live)
            node.send_runtest_some(self.live)
            self.live, self.live_sent = [], True
            node.shutdown()
            return
        if self.pending:
            if len(mine) < 2:
                chunk = len(self.pending) // len(self.node2pending) // 4
                self._send_tests(node, max(2, min(chunk, 20)))
            return
        if node is self.live_node and self.live:
            return
        node.shutdown()

    def _live_turn(self) -> bool:
        """When what is left of the in-process tests weighs about as much as the live group
        for each other node (with no other node: when nothing is left)."""
        others = len(self.node2pending) - 1
        if others <= 0:
            return not self.pending
        return len(self.pending) <= len(self.live) * LIVE_WEIGHT * others

    def remove_node(self, node) -> str | None:
        """A node that crashed: its tests go back where they came from, the live group's
        to the group (sent whole to the next live node), the rest to the in-process queue."""
        pending = self.node2pending.pop(node)
        if node is self.live_node:
            self.live_node = None
        if not pending:
            return None
        assert self.collection is not None
        crashitem = self.collection[pending.pop(0)]
        back_live = [i for i in pending if is_live(self.collection[i])]
        if back_live:
            self.live[:0] = back_live
            self.live_sent = False
        self.pending[:0] = [i for i in pending if not is_live(self.collection[i])]
        for other in self.node2pending:
            self.check_schedule(other)
        return crashitem
