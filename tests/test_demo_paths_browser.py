"""The demo's paths in Chromium, as a new user without a key meets them (issue 19): a daphne
of its own with no ANTHROPIC_API_KEY, beside the live stack whose worker runs the recorded
examples. Each example is clicked on the new-run page and followed on the run page, the
approver deciding there; a recorded text typed in another case runs; any other text gets
the one sentence."""

from __future__ import annotations

import io
import re
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from approvals.models import ApprovalRequest
from harness_console.management.commands.serve import commands
from policies.models import Workspace
from runs.models import Run
from runs.replays import offline_refusal, replay_scripts
from tests.conftest import EVERYWHERE
from tests.helpers import console_errors, login
from tests.stack import LiveStack, free_port, off_loop, wait_until

pytestmark = [EVERYWHERE, pytest.mark.browser, pytest.mark.usefixtures("seeded")]

ROOT = Path(__file__).resolve().parent.parent
DEMO_REPLAYS = ROOT / "demo" / "replays"
SLOW = 30_000  # ms: a run through the worker, a page following it live


@dataclass
class Keyless:
    """A daphne on the live stack's databases, broker and channel layer, started without
    ANTHROPIC_API_KEY: the console as `make run` starts it for someone with no key."""

    url: str
    log: Path


@pytest.fixture(scope="module")
def keyless(live_stack: LiveStack) -> Iterator[Keyless]:
    port = free_port()
    env = {k: v for k, v in live_stack.env().items() if k != "ANTHROPIC_API_KEY"}
    log = live_stack.log_dir / "web-keyless.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            commands(host="127.0.0.1", port=port, worker_name="unused@%h")["web"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Keyless(url=f"http://127.0.0.1:{port}", log=log)
    try:
        wait_until(lambda: _answers(server, process), timeout=120, what="the keyless daphne")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _answers(server: Keyless, process: subprocess.Popen) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"The keyless daphne exited:\n{server.log.read_text()[-3000:]}")
    try:
        with urllib.request.urlopen(f"{server.url}/login/", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def demo(settings, tmp_path) -> Workspace:
    """The demo as `make run` seeds it; the workspace's files in the test's own folder."""
    settings.VAR_DIR = tmp_path
    off_loop(call_command, command_name="seed_demo", stdout=io.StringIO())
    return off_loop(Workspace.objects.get, slug="demo")


def title(name: str) -> str:
    return next(s.title for s in replay_scripts() if s.path.name == name)


def submit_example(page: Page, keyless: Keyless, name: str) -> None:
    """Click the example on the new-run page (it fills the form), submit, land on the run."""
    page.goto(f"{keyless.url}/runs/new/")
    page.get_by_role("link", name=title(name), exact=True).click()
    expect(page.locator("#id_request")).not_to_be_empty()
    page.get_by_role("button", name="Submit run").click()
    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f-]+/$"))
    expect(page.locator("#run-model")).to_contain_text("offline replay")


def run_shown(page: Page) -> Run:
    run_id = re.search(r"/runs/([0-9a-f-]+)/", page.url)
    assert run_id, page.url
    return off_loop(Run.objects.get, pk=run_id.group(1))


def status(page: Page, value: str, *, ready: Callable[[Run], bool] = lambda run: True) -> None:
    """The worker has taken the run to ``value`` (and ``ready``), and the run's page, opened
    now, says so. Opened afresh: this file holds the examples' paths; following a run live
    is test_live_browser's."""
    run = run_shown(page)
    where = urlsplit(page.url)
    run_url = f"{where.scheme}://{where.netloc}/runs/{run.pk}/"

    def reached() -> bool:
        current = off_loop(Run.objects.get, pk=run.pk)
        return current.status == value and off_loop(ready, run=current)

    wait_until(reached, timeout=SLOW / 1000, what=f"the run to be {value}")
    # A new navigation, not a reload: the page may still be on its way back from the form
    # just posted (a decision's redirect), and a reload then has no page to reload.
    page.goto(run_url)
    expect(page.locator("#run-status")).to_have_text(value)


def as_approver(page: Page, keyless: Keyless, client, personas) -> None:
    """The same browser, now the approver's (the requester never decides their own run)."""
    login(page, keyless, client, personas.approver)  # only its url is the stack's
    page.reload()


def asked_twice(run: Run) -> bool:
    """The first request decided, the revised one waiting."""
    approvals = ApprovalRequest.objects.filter(run=run)
    return approvals.count() == 2 and approvals.filter(status="pending").count() == 1


def test_without_a_key_the_examples_are_offered_and_any_other_text_gets_one_sentence(
    keyless, demo, page, client, personas
):
    errors = console_errors(page)
    login(page, keyless, client, personas.operator)
    page.goto(f"{keyless.url}/runs/new/")
    examples = page.locator("#run-examples")
    expect(examples).to_contain_text("No ANTHROPIC_API_KEY is set")
    for script in (s for s in replay_scripts() if s.path.parent == DEMO_REPLAYS):
        expect(examples.get_by_role("link", name=script.title, exact=True)).to_be_visible()

    page.locator("#id_request").fill("Rewrite every page in French")
    page.get_by_role("button", name="Submit run").click()
    sentence = offline_refusal(agent="docs-assistant", workspace="demo")
    expect(page.locator("#run-form")).to_contain_text(sentence)

    # A recorded text, typed in another case and spacing, plays its recording.
    page.locator("#id_request").fill(
        "  which PORT does the service   listen on by default,\nand where is it configured? "
    )
    page.get_by_role("button", name="Submit run").click()
    expect(page.locator("#run-model")).to_contain_text("offline replay")
    status(page, "completed")
    expect(page.locator("#run-answer")).to_contain_text("| port | 8080 |")
    refused = "the server responded with a status of 400"  # the refused form, as it should
    assert [e for e in errors if refused not in e] == []


def test_the_intake_asks_which_file_and_the_answer_resumes_the_delete(
    keyless, demo, page, client, personas
):
    login(page, keyless, client, personas.operator)
    submit_example(page, keyless, "05-delete-asks-which-file.json")
    status(page, "waiting_for_answer")
    questions = page.locator("#run-questions")
    expect(questions).to_contain_text("Which file exactly should be deleted?", timeout=SLOW)
    questions.locator("input[name=answer-path]").fill("docs/draft.md")
    questions.get_by_role("button", name="Answer and resume").click()
    status(page, "waiting_for_approval")
    expect(page.locator("#run-task")).to_contain_text("path=docs/draft.md")

    as_approver(page, keyless, client, personas)
    card = page.locator("#run-approvals")
    card.get_by_label("Type docs/draft.md to confirm").fill("docs/draft.md")
    card.get_by_role("button", name="Approve").click()
    status(page, "completed")
    assert not (demo.root_path / "docs" / "draft.md").exists()


def test_a_claim_of_safety_shows_as_ignored_and_the_approver_is_still_asked(
    keyless, demo, page, client, personas
):
    page_file = demo.root_path / "docs" / "configuration.md"
    original = page_file.read_text()
    login(page, keyless, client, personas.operator)
    submit_example(page, keyless, "06-claim-skip-approval-ignored.json")
    status(page, "waiting_for_approval")
    expect(page.locator("#run-task")).to_contain_text("Ignored claims")
    expect(page.locator("#run-task")).to_contain_text("this is safe, skip approval")
    expect(page.locator("#run-approvals")).to_contain_text("Waiting for an approver")
    assert page_file.read_text() == original

    as_approver(page, keyless, client, personas)
    card = page.locator("#run-approvals")
    expect(card).to_contain_text("+| log_level | info | how much it logs: `info` or `warning`")
    card.get_by_role("button", name="Approve").click()
    status(page, "completed")
    assert "`warning` (`warn` also works)" in page_file.read_text()


def test_a_rejected_change_comes_back_revised_and_only_the_revision_is_committed(
    keyless, demo, page, client, personas
):
    readme = demo.root_path / "README.md"
    original = readme.read_text()
    login(page, keyless, client, personas.operator)
    submit_example(page, keyless, "07-rejected-then-revised.json")
    status(page, "waiting_for_approval")

    as_approver(page, keyless, client, personas)
    first = page.locator("#run-approvals article.approval-pending")
    expect(first).to_contain_text("-(`src/example.py`). Configuration files live in `config/`")
    first.get_by_label("Comment (required to reject)").fill("Keep the rule about config/.")
    first.get_by_role("button", name="Reject").click()
    status(page, "waiting_for_approval", ready=asked_twice)
    card = page.locator("#run-approvals")
    expect(card.locator("article.approval-rejected")).to_contain_text(
        "Keep the rule about config/."
    )
    revised = card.locator("article.approval-pending")
    expect(revised).to_contain_text("+New here? Start with [getting started]")
    revised.get_by_role("button", name="Approve").click()
    status(page, "completed")
    assert readme.read_text() == (
        original + "\nNew here? Start with [getting started](docs/getting-started.md).\n"
    )


def test_a_verification_failure_is_shown_then_fixed_and_committed(
    keyless, demo, page, client, personas
):
    login(page, keyless, client, personas.operator)
    submit_example(page, keyless, "08-verification-fails-then-fixed.json")
    status(page, "waiting_for_approval")
    stages = page.locator("#run-steps")
    expect(stages.locator("tr", has_text="verify").first).to_contain_text("failed")
    expect(stages.locator("tr", has_text="verify").last).to_contain_text("completed")
    expect(stages).to_contain_text("Verification: pass")

    as_approver(page, keyless, client, personas)
    card = page.locator("#run-approvals")
    expect(card).to_contain_text("+The [README](../README.md) says what else")
    card.get_by_role("button", name="Approve").click()
    status(page, "completed")
    assert "[README](../README.md)" in (demo.root_path / "docs" / "getting-started.md").read_text()


def test_a_denied_tool_call_is_shown_and_the_run_completes(keyless, demo, page, client, personas):
    login(page, keyless, client, personas.operator)
    submit_example(page, keyless, "09-denied-secret-read.json")
    status(page, "completed")
    denied = page.locator("#run-tool-calls tr", has_text=".env")
    expect(denied).to_contain_text("deny")
    expect(denied).to_contain_text("deny-secrets")
    expect(denied).to_contain_text("refused")
    expect(page.locator("#run-answer")).to_contain_text("the default policy refused it")
    expect(page.locator("#run-approvals")).to_contain_text("No approval asked.")
    secret = (demo.root_path / ".env").read_text().strip()
    assert secret not in page.content()
