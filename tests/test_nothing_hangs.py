"""Nothing hangs (SPEC T6, issue 16 §2): every tool reads regular files only and never a
huge one whole, every tool call ends at its deadline with every process it started, and a
cancel stops a running tool at once. Real files (FIFOs, devices, sockets, sparse files),
real processes; bounds are generous and never asserted as figures."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from policies.core.permissions import Policy, Rule
from policies.models import ToolDefinition, Workspace
from runs.tools.call import tool_call_run
from runs.tools.isolation import run_isolated, tool_processes_stop, tool_scope
from tests.conftest import EVERYWHERE

OPEN = Policy("open", "L3", (Rule("all", "*", "allow"),))
BOUND = 60.0  # far above any deadline here: past it, the call hung
HUGE = 6 * 1024**3  # a sparse file of several GB: never read whole


def call(workspace: Workspace, tool: str, **arguments: Any):
    return tool_call_run(workspace=workspace, tool=tool, arguments=arguments, policy=OPEN)


def bounded(function: Callable[[], Any], seconds: float = BOUND) -> Any:
    """``function()`` in a thread; the test fails (instead of hanging) if it does not end.
    Inside a test's transaction another thread cannot write: there the call runs in the
    test's thread, and only what runs in a tool child (under its own deadline) may."""
    if connection.in_atomic_block:
        return function()
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = function()
        except BaseException as error:  # re-raised in the test's thread
            result["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds:g} s: it hung"
    if "error" in result:
        raise result["error"]
    return result["value"]


def alive(marker: str) -> list[int]:
    """Live processes whose command line names ``sleep <marker>`` (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline[:2] == [b"sleep", marker.encode()] or cmdline[-2:-1] == [marker.encode()]:
                found.append(int(entry))
    return found


def gone(marker: str) -> bool:
    """Every ``sleep <marker>`` ended (allowing the kernel a moment to deliver SIGKILL)."""
    deadline = time.monotonic() + 5
    while alive(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(marker)


def a_marker() -> str:
    return str(100_000 + uuid.uuid4().int % 800_000)


def hostile(root: Path, name: str) -> Path:
    """Put one hostile thing at ``root/name``: a FIFO, a device, a socket, a huge file, or
    a link inside the workspace to one."""
    kind, _, suffix = name.partition(".")
    path = root / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero's numbers
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(path))
    elif kind == "huge":
        with open(path, "wb") as handle:
            handle.truncate(HUGE)
    elif kind == "linked":
        os.mkfifo(root / f"fifo-behind-link.{suffix}")
        os.symlink(f"fifo-behind-link.{suffix}", path)
    elif kind in ("zero", "urandom"):
        os.symlink(f"/dev/{kind}", path)
    return path


HOSTILE = ["fifo.md", "device.md", "socket.md", "huge.md", "linked.md", "zero.md", "urandom.md"]
READERS = {
    "readSource": lambda path: {"path": path},
    "runValidation": lambda path: {"path": path},
    "createDraft": lambda path: {"path": path, "content": "# new\n"},
    "patchDraft": lambda path: {"path": path, "search": "a", "replace": "b"},
    "commitDraft": lambda path: {"path": path},
    "deleteFile": lambda path: {"path": path},
    "renameFile": lambda path: {"source": path, "target": "renamed.md"},
}
CLEAR = (
    "not a regular file",
    "too large",
    "leads outside the workspace",
    "not a file in the workspace",
    "no draft",
    "neither a draft nor a file",
)


@pytest.fixture
def short_deadlines(db: None) -> None:
    """A hung read shows as a timeout within seconds, not the tools' 30 s."""
    ToolDefinition.objects.update(timeout_sec=10)


@pytest.mark.django_db
@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("tool", sorted(READERS))
def test_every_reading_tool_refuses_what_is_not_a_regular_file(
    workspace, short_deadlines, tool, name
):
    hostile(workspace.root_path, name)
    record = bounded(lambda: call(workspace, tool, **READERS[tool](name)))
    assert record.status in ("error", "refused"), (record.status, record.error)
    assert any(words in record.error for words in CLEAR), record.error
    target = workspace.root_path / name
    assert os.path.lexists(target)  # refused, not deleted or renamed
    assert not (workspace.drafts_path / "adhoc" / name).exists()  # no draft of it either


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["fifo", "device", "socket", "huge"])
def test_what_is_not_a_regular_file_says_what_it_is(workspace, short_deadlines, kind):
    hostile(workspace.root_path, f"{kind}.md")
    record = bounded(lambda: call(workspace, "readSource", path=f"{kind}.md"))
    words = {"fifo": "FIFO", "device": "character device", "socket": "socket", "huge": "large"}
    assert words[kind] in record.error


@pytest.mark.usefixtures("seeded")
@EVERYWHERE
@pytest.mark.parametrize("tool", ["grep", "glob", "searchDocs"])
def test_the_listing_tools_pass_over_every_hostile_file(workspace, short_deadlines, tool):
    for name in HOSTILE:
        hostile(workspace.root_path, name)
    (workspace.root_path / "plain.md").write_text("# Plain\n\nx marks the spot\n")
    arguments = {"grep": {"pattern": "x"}, "glob": {"pattern": "**"}, "searchDocs": {"query": "x"}}
    record = bounded(lambda: call(workspace, tool, **arguments[tool]))
    assert record.status == "ok", record.error
    if tool == "grep":
        assert {hit["path"] for hit in record.output["matches"]} == {"plain.md"}
        assert any("fifo.md" in warning for warning in record.output["warnings"])
    if tool == "searchDocs":
        assert [r["path"] for r in record.output["results"]] == ["plain.md"]


@pytest.mark.usefixtures("seeded")
@EVERYWHERE
def test_a_huge_document_is_never_indexed(workspace, short_deadlines):
    hostile(workspace.root_path, "huge.md")
    record = bounded(lambda: call(workspace, "searchDocs", query="anything"))
    assert record.status == "ok" and record.output["results"] == []


def test_an_agents_file_that_is_a_fifo_does_not_hang_the_assembly(tmp_path):
    from policies.instruction_files import read_instruction_files

    os.mkfifo(tmp_path / "AGENTS.md")
    (tmp_path / "sub").mkdir()
    os.mknod(tmp_path / "sub" / "AGENTS.md", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    try:
        found = bounded(lambda: read_instruction_files(tmp_path))
    finally:
        _release(tmp_path / "AGENTS.md")
    problems = {f.relative_path: f.problem for f in found}
    assert problems == {
        "AGENTS.md": "a FIFO (named pipe), not a regular file",
        "sub/AGENTS.md": "a character device, not a regular file",
    }


def _release(fifo: Path) -> None:
    """Let a reader blocked on ``fifo`` go (before the fix, one hung there)."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@EVERYWHERE
def test_search_docs_over_a_fifo_ends_and_never_holds_the_database(seeded, workspace):
    """Found: searchDocs over a FIFO named ``*.md`` hung the worker past its timeout while
    holding SQLite's write lock, so every other write failed after 20 s."""
    from runs.models import DocIndexEntry

    ToolDefinition.objects.filter(name="searchDocs").update(timeout_sec=5)
    os.mkfifo(workspace.root_path / "x.md")
    (workspace.root_path / "y.md").write_text("# Y\n\nthe pipe is here\n")
    done = threading.Event()
    found: dict[str, Any] = {}

    def search() -> None:
        try:
            found["record"] = call(workspace, "searchDocs", query="pipe")
        finally:
            done.set()
            connection.close()

    threading.Thread(target=search, daemon=True).start()
    try:
        time.sleep(0.5)  # the search is scanning (before the fix: blocked on the FIFO)
        workspace.name = "renamed while searching"
        bounded(lambda: workspace.save(update_fields=["name"]))  # another writer gets in
        assert done.wait(BOUND), "searchDocs hung"
    finally:
        _release(workspace.root_path / "x.md")
    record = found["record"]
    assert record.status == "ok", record.error
    assert [r["path"] for r in record.output["results"]] == ["y.md"]
    assert not DocIndexEntry.objects.filter(path="x.md").exists()


# --- descendants (every one gone when the call returns or times out) ---------------------


@pytest.fixture
def custom_tool(db: None) -> Callable[..., ToolDefinition]:
    def make(name: str, implementation: str, **fields: Any) -> ToolDefinition:
        return ToolDefinition.objects.create(
            name=name,
            description=f"Test tool {name}.",
            implementation=implementation,
            input_schema={"type": "object"},
            permission_level="L1",
            side_effect="none",
            **fields,
        )

    return make


@pytest.mark.django_db
@pytest.mark.parametrize("leaver", ["leave_setsid", "double_fork", "leave_child"])
def test_a_custom_tool_that_returns_leaves_no_descendant(workspace, custom_tool, leaver):
    custom_tool("leaver", f"tests.runaway_tools:{leaver}")
    marker = a_marker()
    record = bounded(lambda: call(workspace, "leaver", marker=marker))
    assert record.status == "ok", record.error
    assert gone(marker)


@pytest.mark.django_db
@pytest.mark.parametrize("timeout", [1])
def test_a_custom_tool_stopped_at_its_deadline_leaves_no_descendant(
    workspace, custom_tool, timeout
):
    custom_tool("linger", "tests.runaway_tools:linger", timeout_sec=timeout)
    marker = a_marker()
    record = bounded(lambda: call(workspace, "linger", marker=marker))
    assert record.status == "timeout"
    assert gone(marker)


def test_the_journal_and_recovery_never_block_on_what_is_not_a_regular_file(tmp_path):
    """The pre-images a write's journal keeps (and recovery compares) are read through the
    one reader: a FIFO or a device in a file's place is no file, a huge one is too large."""
    from runs.tools.journal import image

    os.mkfifo(tmp_path / "pipe.md")
    os.symlink("/dev/zero", tmp_path / "zero.md")
    with open(tmp_path / "huge.md", "wb") as handle:
        handle.truncate(6 * 1024**3)
    assert bounded(lambda: image(tmp_path / "pipe.md")) is None
    assert bounded(lambda: image(tmp_path / "zero.md")) is None
    assert bounded(lambda: image(tmp_path / "huge.md")) == "too-large"
    assert image(tmp_path / "missing.md") is None


@pytest.mark.django_db
def test_an_mcp_server_leaves_no_descendant_when_its_call_returns(workspace):
    """A server's tool leaves a ``setsid`` daemon: the server runs under a supervisor that
    collects everything it started once it ends (before: the daemon outlived the call)."""
    import sys

    from policies.mcp_servers import mcp_discover
    from policies.models import McpServer

    server = McpServer.objects.create(
        name="lingering",
        command=sys.executable,
        args=[str(Path(__file__).parent / "mcp_server.py"), "linger"],
        allowed_tools=["leave_daemon"],
        allowed_paths=["**"],
        forbidden_paths=[],
        rate_limit_per_minute=0,
    )
    mcp_discover(server)
    marker = a_marker()
    record = bounded(
        lambda: tool_call_run(
            workspace=workspace,
            tool="mcp:lingering:leave_daemon",
            arguments={"seconds": int(marker)},
            policy=OPEN,
        )
    )
    assert record.status == "ok", record.error
    assert gone(marker)


SHELL_LEAVERS = {
    "setsid": "setsid sleep {m} > /dev/null 2>&1 &",
    "setsid keeping the output": "setsid sleep {m} &",
    "double fork": "( (sleep {m} &) & ) ;",
    "ignores SIGTERM": "sh -c \"trap '' TERM; exec sleep {m}\" &",
}


@pytest.fixture(params=["sandboxed", "unsandboxed"])
def shell_workspace(request, workspace, monkeypatch) -> Workspace:
    if request.param == "unsandboxed":
        monkeypatch.setenv("PATH", "/nonexistent")  # the child finds no bubblewrap
        workspace.allow_unsandboxed_shell = True
        workspace.save(update_fields=["allow_unsandboxed_shell"])
    return workspace


@pytest.mark.django_db
@pytest.mark.parametrize("command", sorted(SHELL_LEAVERS))
def test_the_shell_leaves_no_descendant_when_the_command_returns(shell_workspace, command):
    marker = a_marker()
    record = bounded(
        lambda: call(shell_workspace, "dangerous", command=SHELL_LEAVERS[command].format(m=marker))
    )
    assert record.status == "ok", record.error
    assert gone(marker)


@pytest.mark.django_db
@pytest.mark.parametrize("command", sorted(SHELL_LEAVERS))
def test_the_shell_leaves_no_descendant_when_it_times_out(shell_workspace, command):
    ToolDefinition.objects.filter(name="dangerous").update(timeout_sec=1)
    marker = a_marker()
    leave = SHELL_LEAVERS[command].format(m=marker)
    record = bounded(lambda: call(shell_workspace, "dangerous", command=f"{leave} sleep 600"))
    assert record.status == "timeout"
    assert gone(marker)


@pytest.mark.django_db
def test_the_shell_reading_a_fifo_is_stopped_at_its_deadline(workspace):
    ToolDefinition.objects.filter(name="dangerous").update(timeout_sec=1)
    os.mkfifo(workspace.root_path / "fifo.md")
    record = bounded(lambda: call(workspace, "dangerous", command="cat fifo.md"))
    assert record.status == "timeout"


# --- stopping a run's tools (the one mechanism a cancel and a lost lease use) ------------


def test_stopping_a_runs_tools_stops_them_at_once_and_only_that_runs(workspace, tmp_path):
    marker, other = a_marker(), a_marker()
    replies: dict[str, Any] = {}

    def run_tool(run_id: str, mark: str) -> None:
        with tool_scope(run_id):
            replies[run_id] = run_isolated(
                impl="tests.runaway_tools:linger",
                root=str(workspace.root),
                drafts=str(tmp_path / run_id),
                args={"marker": mark},
                timeout=600,
            )

    threads = [
        threading.Thread(target=run_tool, args=("run-a", marker), daemon=True),
        threading.Thread(target=run_tool, args=("run-b", other), daemon=True),
    ]
    for thread in threads:
        thread.start()
    wait = time.monotonic() + BOUND
    while not (alive(marker) and alive(other)) and time.monotonic() < wait:
        time.sleep(0.05)
    assert tool_processes_stop(scope="run-a", reason="the run was cancelled") == 1
    threads[0].join(BOUND)
    assert not threads[0].is_alive(), "the stopped tool still runs"
    assert replies["run-a"] == {
        "ok": False,
        "error": "Stopped: the run was cancelled.",
        "retryable": False,
        "stopped": True,
    }
    assert gone(marker)
    assert alive(other) and threads[1].is_alive()  # another run's tool goes on
    assert tool_processes_stop(scope="run-b", reason="test over") == 1
    threads[1].join(BOUND)
    assert gone(other)


# --- a cancel during a long tool, in a real worker ---------------------------------------


@pytest.mark.usefixtures("seeded")
@EVERYWHERE
def test_a_cancel_stops_a_running_tool_and_the_run_ends_cancelled(
    live_stack, personas, agent, workspace, docs
):
    """Found: a cancel left the run ``running`` until its tool would have finished. Now the
    worker's heartbeat sees the cancel, the tool and everything it started are stopped, and
    the run ends as a cancellation; other submits work meanwhile."""
    from policies.models import Policy, PolicyRule
    from runs.models import Run, ToolCall
    from runs.services import run_create
    from tests.helpers import FIX
    from tests.stack import wait_until
    from tests.test_runs_live import api, wait_for

    ToolDefinition.objects.create(
        name="linger",
        description="Lingers until stopped (tests).",
        input_schema={"type": "object", "properties": {"marker": {"type": "string"}}},
        permission_level="L1",
        side_effect="none",
        implementation="tests.runaway_tools:linger",
        timeout_sec=600,
    )
    policy = Policy.objects.get(name="default")
    PolicyRule.objects.create(policy=policy, order=1, key="linger", tool="linger", decision="allow")
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="Linger until cancelled",
    )
    pid_file = workspace.drafts_path / f"linger-{run.pk}.pids"
    try:
        wait_until(
            lambda: pid_file.exists() and len(pid_file.read_text().split()) == 2,
            timeout=60,
            what="the tool to start",
        )
        status, other = api(
            live_stack,
            personas.operator,
            "POST",
            "/api/runs/",
            {"agent": "tester", "workspace": "test", "request": FIX},
        )
        assert status == 201, other
        status, body = api(live_stack, personas.operator, "POST", f"/api/runs/{run.pk}/cancel/")
        assert status == 200, body
        run = wait_for(run.pk, "failed", timeout=BOUND / 2)  # the tool would run 600 s
    finally:
        _kill_listed(pid_file)  # before the fix: let the worker go
    assert run.failure_kind == "cancelled", run.failure_reason
    (record,) = ToolCall.objects.filter(run=run, tool="linger")
    assert record.status == "error" and record.error == "Stopped: the run was cancelled."
    assert gone("7413")  # the daemon it left and the child that ignores SIGTERM
    api(live_stack, personas.operator, "POST", f"/api/runs/{other['id']}/cancel/")
    assert Run.objects.get(pk=other["id"]).status in (
        "failed",
        "created",
        "planning",
        "running",
        "waiting_for_approval",
        "verifying",  # tools are quick now: the other run may be this far, or done
        "completed",
    )


def _kill_listed(pid_file: Path) -> None:
    import signal

    if pid_file.exists():
        for pid in pid_file.read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)


# --- a frozen worker (SIGSTOP): the supervisor keeps the deadline itself ------------------

FROZEN_DRIVER = """
import json, sys
sys.path.insert(0, {project!r})
from runs.tools.isolation import run_isolated
reply = run_isolated(impl={impl!r}, root={root!r}, drafts={drafts!r}, args={args!r},
                     timeout=1, context={{"sandbox": {{"allow_unsandboxed": True}}}})
print(json.dumps(reply), flush=True)
"""

TICKING_SHELL = {
    "command": "setsid sleep {m} > /dev/null 2>&1 &"
    " while :; do echo t >> ticks.txt; sleep 0.1; done"
}
FROZEN_TOOLS = {  # impl, arguments, the worker's PATH (none: the child finds no bubblewrap)
    "custom": ("tests.runaway_tools:tick", {}, os.environ["PATH"]),
    "shell, sandboxed": ("dangerous", TICKING_SHELL, os.environ["PATH"]),
    "shell, unsandboxed": ("dangerous", TICKING_SHELL, "/nonexistent"),
}


def _quiet(path: Path, marker: str) -> bool:
    """Nothing writes ``path`` any more and no ``sleep <marker>`` is left, within BOUND."""
    deadline = time.monotonic() + BOUND / 3
    while time.monotonic() < deadline:
        before = path.read_bytes()
        time.sleep(1.0)  # ten ticks' time
        if path.read_bytes() == before and not alive(marker):
            return True
    return False


@pytest.mark.parametrize("tool", sorted(FROZEN_TOOLS))
def test_a_tool_stops_at_its_deadline_while_its_worker_is_frozen(tmp_path, tool):
    """Found: with the worker frozen (SIGSTOP) it could neither signal its tool's supervisor
    nor close its stdin, so the tool went on writing into the workspace past its deadline
    (and past the lease). The supervisor keeps the deadline itself now."""
    import signal
    import subprocess

    from runs.tools.isolation import ROOT

    root, drafts, marker = tmp_path / "root", tmp_path / "drafts", a_marker()
    root.mkdir(), drafts.mkdir()
    impl, args, path = FROZEN_TOOLS[tool]
    args = {key: value.format(m=marker) for key, value in args.items()} | {"marker": marker}
    driver = tmp_path / "driver.py"
    driver.write_text(
        FROZEN_DRIVER.format(
            project=str(ROOT), impl=impl, root=str(root), drafts=str(drafts), args=args
        )
    )
    worker = subprocess.Popen(
        [sys.executable, str(driver)],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"PATH": path},
    )
    ticks = root / "ticks.txt"
    try:
        started = time.monotonic()
        while not ticks.exists() and time.monotonic() < started + BOUND:
            time.sleep(0.02)
        assert ticks.exists(), "the tool never started"
        os.kill(worker.pid, signal.SIGSTOP)  # before its deadline: it cannot stop the tool
        assert _quiet(ticks, marker), "the tool ran on past its deadline"
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        out, _ = worker.communicate(timeout=BOUND)
        for pid in alive(marker):
            os.kill(pid, signal.SIGKILL)
    reply = json.loads(out)
    assert reply["timed_out"] is True
    assert reply["error"] == "Timed out after 1 s; the tool was stopped."


def test_the_supervisor_and_the_worker_agree_on_the_timed_out_exit():
    from runs.tools import child, isolation

    assert child.TIMED_OUT_EXIT == isolation.TIMED_OUT_EXIT
    assert child.TIMED_OUT_EXIT not in (0, 1, child.STOPPED_EXIT)


def test_an_mcp_server_stops_at_its_supervisors_deadline_while_its_worker_holds_on(tmp_path):
    """A frozen worker keeps the server's stdin open and its thread alive: a supervisor
    given ``--deadline`` stops the server and everything it started there, by itself. (The
    console passes it where it builds the server's command, ``policies/mcp_servers.py``.)"""
    import subprocess

    from harness_console import mcp_supervisor

    marker, ticks = a_marker(), tmp_path / "ticks.txt"
    command = TICKING_SHELL["command"].format(m=marker)
    server = subprocess.Popen(
        [sys.executable, mcp_supervisor.__file__, "--deadline", "1", "sh", "-c", command],
        cwd=tmp_path,
        stdin=subprocess.PIPE,  # held open, as a frozen worker holds it
    )
    try:
        assert server.wait(timeout=BOUND) == mcp_supervisor.TIMED_OUT_EXIT
        assert _quiet(ticks, marker), "the server ran on past its deadline"
    finally:
        server.kill()
        server.stdin.close()  # type: ignore[union-attr]
        server.wait()
        for pid in alive(marker):
            os.kill(pid, 9)
