"""The admin's prompt preview in Chromium (SPEC C8, issues 19 and 20): given a task's text or
paths, it shows the instruction files a run of that task would get, and which it leaves
out; its chart draws each layer against its own budget and marks the units left out."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import EVERYWHERE
from tests.helpers import login

pytestmark = [EVERYWHERE, pytest.mark.browser]


def marked_layers(page: Page) -> list[str]:
    """The layers the chart marks, in the marks' order (its third trace)."""
    return page.evaluate("() => document.getElementById('budget-plot').data[2].y")


def hover_mark(page: Page, layer: str) -> str:
    """A person points at the chart's mark beside a layer: plotly's hover label names the
    units (plotly finds the point under the pointer, its drag layer lies on top)."""
    marks = page.locator("#budget-plot .scatterlayer .point")
    box = marks.nth(marked_layers(page).index(layer)).bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    hover = page.locator("#budget-plot .hoverlayer .hovertext")
    expect(hover).to_be_visible()
    return hover.text_content() or ""


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
    # The chart: a bar per layer over its own budget, and the file left out marked.
    chart = page.locator("#budget-plot")
    expect(chart.locator(".main-svg").first).to_be_visible()
    expect(chart.locator(".barlayer .trace")).to_have_count(2)  # budgets, tokens used
    texts = chart.locator(".textpoint").all_text_contents()
    marked = dict(zip(marked_layers(page), texts, strict=True))
    assert marked["2. instruction_files"] == "1 dropped", marked
    assert "dropped file:app/AGENTS.md (0 tokens): not on the task's path" in hover_mark(
        page, "2. instruction_files"
    )
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
