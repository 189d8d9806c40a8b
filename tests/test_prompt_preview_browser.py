"""The admin's prompt preview in Chromium (SPEC C8, issue 20): given a task's text or paths,
it shows the instruction files a run of that task would get, and which it leaves out."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import EVERYWHERE
from tests.helpers import login

pytestmark = [EVERYWHERE, pytest.mark.browser]


def columns(page: Page) -> tuple[str, str]:
    row = page.locator('tr[data-layer="instruction_files"]')
    return row.locator("td").nth(4).inner_text(), row.locator("td").nth(5).inner_text()


def test_an_admin_sees_the_files_on_a_task_s_path_and_the_rest_left_out(
    live_stack, page: Page, client, personas, agent, workspace
):
    root = workspace.root_path
    (root / "AGENTS.md").write_text("Root rules.")
    for folder in ("docs", "app"):
        (root / folder).mkdir()
        (root / folder / "AGENTS.md").write_text(f"{folder.title()} rules.")
    login(page, live_stack, client, personas.admin)
    page.goto(f"{live_stack.url}/admin/policies/agent/{agent.pk}/preview/")
    page.fill("#id_task", "Fix a typo in docs/guide.md")
    page.click("#preview-form input[type=submit]")
    expect(page.locator("#scope")).to_contain_text("the task's paths: docs/guide.md")
    kept, dropped = columns(page)
    assert "file:AGENTS.md" in kept and "file:docs/AGENTS.md" in kept
    assert "file:app/AGENTS.md (0): not on the task's path (docs/guide.md)" in dropped
    expect(page.locator("#prompt")).to_contain_text("Docs rules.")
    expect(page.locator("#prompt")).not_to_contain_text("App rules.")

    page.fill("#id_paths", "app/main.py")  # given paths win over the task's
    page.click("#preview-form input[type=submit]")
    expect(page.locator("#scope")).to_contain_text("the task's paths: app/main.py")
    kept, dropped = columns(page)
    assert "file:app/AGENTS.md" in kept and "file:docs/AGENTS.md" in dropped

    page.click("input[value='Reload from disk']")  # and come back to the same selection
    expect(page.locator(".messagelist")).to_contain_text("will be read again")
    expect(page.locator("#id_paths")).to_have_value("app/main.py")
    expect(page.locator("#scope")).to_contain_text("app/main.py")
