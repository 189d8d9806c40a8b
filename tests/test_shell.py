"""The sandboxed shell tool (SPEC T9): no network, nothing writable but the workspace,
no secrets, and no run without a sandbox unless an admin allowed it."""

from __future__ import annotations

import socket
import threading

import pytest
from django.conf import settings

from policies.core.default_policy import DEFAULT_POLICY
from policies.core.permissions import Policy, Rule
from runs.tools.builtin import shell
from runs.tools.call import tool_call_run

pytestmark = pytest.mark.django_db
OPEN = Policy("open", "L3", (Rule("all", "*", "allow"),))


def sh(workspace, command, policy=OPEN):
    return tool_call_run(
        workspace=workspace, tool="dangerous", arguments={"command": command}, policy=policy
    )


def test_the_shell_writes_in_the_workspace(workspace):
    record = sh(workspace, "echo made > made.txt && cat made.txt && pwd")
    assert record.status == "ok", record.error
    assert (workspace.root_path / "made.txt").read_text() == "made\n"
    assert record.output["content"].splitlines() == ["made", str(workspace.root_path.resolve())]


def test_the_shell_cannot_write_outside_the_workspace(workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    record = sh(workspace, f"echo escaped > {outside}/x.txt")
    assert record.status == "error"  # the host's /tmp is not even visible in the sandbox
    assert not (outside / "x.txt").exists()
    record = sh(workspace, "echo escaped > /usr/harness-escape.txt")
    assert record.status == "error" and "Read-only file system" in record.output["stderr"]


def test_the_shell_cannot_reach_a_port_on_this_machine(workspace):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[object] = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    record = sh(
        workspace,
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\"",
    )
    assert record.status == "error"
    assert (
        "Network is unreachable" in record.output["stderr"]
        or "refused" in (record.output["stderr"])
    )
    assert accepted == []
    server.close()


def test_the_shell_sees_no_secret_and_not_the_console_files(workspace, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    record = sh(workspace, f"env; ls {settings.VAR_DIR} | wc -l; ls {settings.BASE_DIR} | wc -l")
    lines = record.output["content"].splitlines()
    assert not any("sk-ant-secret" in line or "SECRET" in line for line in lines)
    assert lines[-2:] == ["0", "0"]  # the console's var/ and code are hidden


def test_a_runaway_command_is_stopped_at_the_timeout(workspace):
    from policies.models import ToolDefinition

    ToolDefinition.objects.filter(name="dangerous").update(timeout_sec=1)
    record = sh(workspace, "trap '' TERM; while :; do :; done")
    assert record.status == "timeout"


def test_without_bubblewrap_it_refuses_unless_an_admin_allowed_it(workspace, monkeypatch):
    monkeypatch.setattr(shell, "BWRAP", "bwrap-not-installed")
    # the child imports the module afresh: make the missing binary real for it too
    monkeypatch.setenv("PATH", "/nonexistent")
    record = sh(workspace, "echo hi")
    assert record.status == "error" and "bubblewrap is not installed" in record.error
    workspace.allow_unsandboxed_shell = True
    workspace.save(update_fields=["allow_unsandboxed_shell"])
    record = sh(workspace, "echo hi")
    assert record.status == "ok" and "ran without a sandbox" in record.output["warnings"][0]


def test_the_default_policy_never_runs_the_shell_without_a_strong_confirmation(workspace):
    record = sh(workspace, "echo hi", DEFAULT_POLICY)
    assert (record.status, record.decision) == ("refused", "ask_strong")


@pytest.mark.parametrize(
    "path", ["/var/run/postgresql", "/home", "/root", "/etc/hostname", "/etc/shadow", "/opt"]
)
def test_nothing_of_the_machine_is_visible_but_programs_and_the_workspace(workspace, path):
    record = sh(workspace, f"ls {path}")
    assert record.status == "error" and "No such file or directory" in record.output["stderr"]


def test_endless_output_is_capped_not_buffered(workspace):
    from policies.models import ToolDefinition

    ToolDefinition.objects.filter(name="dangerous").update(timeout_sec=5)
    record = sh(workspace, "head -c 30000000 /dev/zero | tr '\\\\0' x")
    assert record.status == "ok"
    assert any("bytes of output beyond" in w for w in record.output["warnings"])
