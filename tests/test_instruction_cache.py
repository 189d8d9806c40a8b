"""The instruction cache across processes (SPEC C6): an edit through the console is seen by
the very next assembly anywhere; without an edit nothing is read again."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.urls import reverse

from policies.instruction_cache import instructions_load
from policies.models import InstructionVersion
from policies.services import instruction_update
from tests.conftest import EVERYWHERE
from tests.stack import ROOT

pytestmark = EVERYWHERE


class OtherProcess:
    """tests/assembler_process.py: one process, kept for the module, that assembles on
    request as ``manage.py assemble_prompt`` does."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "assembler_process.py")],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def prompt(self, agent, workspace) -> str:
        assert self.process.stdin and self.process.stdout
        args = ["--agent", agent.slug, "--workspace", workspace.slug, "--json"]
        self.process.stdin.write(json.dumps(args) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the other process ended ({self.process.wait(timeout=10)})"
        reply = json.loads(line)
        assert reply["ok"], reply["error"]
        return json.loads(reply["out"])["prompt"]

    def close(self) -> None:
        assert self.process.stdin
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def other_process(django_db_setup, django_db_blocker) -> Iterator[OtherProcess]:
    other = OtherProcess()
    yield other
    other.close()


@pytest.fixture
def prompt_in_another_process(other_process: OtherProcess):
    return other_process.prompt


@pytest.fixture
def setup(personas, agent, workspace):
    (workspace.root_path / "AGENTS.md").write_text("root file v1")
    instruction_update(agent=agent, text="console text v1", author=personas.admin)
    return personas, agent, workspace


def test_an_admin_edit_is_in_the_very_next_assembly_of_another_process(
    setup, prompt_in_another_process, client
):
    personas, agent, workspace = setup
    assert "console text v1" in prompt_in_another_process(agent, workspace)
    client.force_login(personas.admin)
    response = client.post(
        reverse("admin:policies_instructionversion_add"),
        {"agent": agent.pk, "text": "console text v2", "note": "tighter"},
    )
    assert response.status_code == 302
    prompt = prompt_in_another_process(agent, workspace)
    assert "console text v2" in prompt and "console text v1" not in prompt
    latest = InstructionVersion.objects.get(agent=agent, version=2)
    assert (latest.author, latest.note) == (personas.admin, "tighter")


def test_a_restore_is_in_the_very_next_assembly_too(setup, prompt_in_another_process, client):
    personas, agent, workspace = setup
    instruction_update(agent=agent, text="console text v2", author=personas.admin)
    assert "console text v2" in prompt_in_another_process(agent, workspace)
    client.force_login(personas.admin)
    first = InstructionVersion.objects.get(agent=agent, version=1)
    client.post(reverse("admin:policies_instructionversion_restore", args=[first.pk]))
    assert "console text v1" in prompt_in_another_process(agent, workspace)


def test_without_an_edit_nothing_is_read_again_until_reload_from_disk(
    setup, prompt_in_another_process, client
):
    personas, agent, workspace = setup
    assert "root file v1" in prompt_in_another_process(agent, workspace)
    (workspace.root_path / "AGENTS.md").write_text("root file v2, edited outside")
    assert "root file v1" in prompt_in_another_process(agent, workspace)  # cached: not re-read
    first = instructions_load(agent=agent, root=workspace.root)
    assert instructions_load(agent=agent, root=workspace.root) is first
    client.force_login(personas.admin)
    response = client.post(
        reverse("admin:policies_agent_reload", args=[agent.pk]), {"workspace": workspace.pk}
    )
    assert response.status_code == 302
    assert "root file v2, edited outside" in prompt_in_another_process(agent, workspace)


def test_the_invalidate_command_drops_an_agent_or_everything(setup, prompt_in_another_process):
    _personas, agent, workspace = setup
    assert "root file v1" in prompt_in_another_process(agent, workspace)
    (workspace.root_path / "AGENTS.md").write_text("root file v3")
    call_command("invalidate_instructions", "--agent", agent.slug)
    assert "root file v3" in prompt_in_another_process(agent, workspace)
    (workspace.root_path / "AGENTS.md").write_text("root file v4")
    call_command("invalidate_instructions")
    assert "root file v4" in prompt_in_another_process(agent, workspace)


def test_moving_a_workspace_folder_in_the_admin_drops_its_cache(
    setup, prompt_in_another_process, tmp_path
):
    _personas, agent, workspace = setup
    assert "root file v1" in prompt_in_another_process(agent, workspace)
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "AGENTS.md").write_text("moved root")
    workspace.root = str(moved)
    workspace.save()
    assert "moved root" in prompt_in_another_process(agent, workspace)


def test_an_evicted_generation_never_revives_an_older_entry(setup):
    from django.core.cache import cache

    from policies.instruction_cache import _gen_agent

    personas, agent, workspace = setup
    assert "console text v1" in instructions_load(agent=agent, root=workspace.root).units[-1].text
    instruction_update(agent=agent, text="console text v2", author=personas.admin)
    assert "console text v2" in instructions_load(agent=agent, root=workspace.root).units[-1].text
    cache.delete(_gen_agent(agent.pk))  # the cache evicted the agent's generation
    assert "console text v2" in instructions_load(agent=agent, root=workspace.root).units[-1].text
