"""Admin pages that fit (issue 19, point 5): at 1400×900 in Chromium, with the admin's
sidebar open as it first is, every field of every rule of a policy — Decision, Reason and
Delete included — and every column of the model price list lie within the screen, with no
horizontal scrolling of the page or of the list."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from playwright.sync_api import Page, expect

from policies.models import Policy, PolicyRule
from runs.models import ModelPrice
from tests.conftest import EVERYWHERE
from tests.helpers import login

pytestmark = [EVERYWHERE, pytest.mark.browser]

WIDTH = 1400

# Each element's box, and whether the page (or a box that scrolls) is wider than its view.
BOXES = """(selector) => Array.from(document.querySelectorAll(selector)).map((e) => {
  const r = e.getBoundingClientRect();
  return {what: e.className || e.tagName, text: e.textContent.trim().slice(0, 40),
          left: r.left, right: r.right, width: r.width};
})"""
SCROLLS = """() => [document.documentElement, ...document.querySelectorAll("#content *")]
  .filter((e) => e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0 && (
    e === document.documentElement || ["auto", "scroll"].includes(getComputedStyle(e).overflowX)))
  .map((e) => `${e.id || e.className || e.tagName}: ${e.scrollWidth} > ${e.clientWidth}`)"""


def off_screen(page: Page, selector: str) -> list[dict]:
    boxes = page.evaluate(BOXES, selector)
    assert boxes, f"nothing matches {selector}"
    return [b for b in boxes if b["width"] > 0 and (b["left"] < 0 or b["right"] > WIDTH)]


def test_a_policy_s_rules_and_the_price_list_fit_a_1400_px_screen(
    live_stack, page: Page, client, personas
):
    policy = Policy.objects.create(name="wide", ceiling="L3")
    for order, (tool, path, decision) in enumerate(
        [
            ("{searchDocs,readSource,glob,grep,runValidation,requestApproval}", "", "allow"),
            ("*", "{**/.env,**/.env.*,**/*.pem,**/*.key,**/id_rsa*,**/id_ed25519*}", "deny"),
            ("{deleteFile,renameFile}", "docs/**", "ask_strong"),
        ],
        start=1,
    ):
        PolicyRule.objects.create(
            policy=policy,
            order=order * 10,
            key=f"rule-number-{order}",
            tool=tool,
            path=path,
            decision=decision,
            reason="publishing, deploying, sending: always a person's decision " * 4,
            window_days="mon,tue,wed,thu,fri",
            rate_limit=30,
        )
    since = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
    for model in ("claude-sonnet-4-5-20250929", "claude-3-7-sonnet-20250219"):
        for version, price in ((1, "3"), (2, "3.125")):
            ModelPrice.objects.create(
                model=model,
                version=version,
                effective_from=since,
                input_per_mtok=Decimal(price),
                output_per_mtok=Decimal("15"),
                cache_write_per_mtok=Decimal("3.75"),
                cache_read_per_mtok=Decimal("0.000125"),
                created_by=personas.admin,
            )
    page.set_viewport_size({"width": WIDTH, "height": 900})
    login(page, live_stack, client, personas.admin)

    page.goto(f"{live_stack.url}/admin/policies/policy/{policy.pk}/change/")
    expect(page.locator("#nav-sidebar")).to_be_visible()  # open, as a new admin sees it
    for summary in page.locator(".inline-related:not(.empty-form) details summary").all():
        summary.click()  # each rule's change window and rate limit, unfolded
    rules = ".inline-related:not(.empty-form)"
    assert page.locator(rules).count() == 3
    fields = [
        "order",
        "key",
        "decision",
        "tool",
        "path",
        "reason",
        "window_days",
        "window_start",
        "window_end",
        "window_timezone",
        "window_excluded",
        "outside_window",
        "rate_limit",
        "rate_scope",
        "over_rate",
    ]
    for field in fields:  # the input itself, not only its label
        assert off_screen(page, f"{rules} [name$='-{field}']") == [], field
        expect(page.locator(f"{rules} [name$='-{field}']")).to_have_count(3)
    assert off_screen(page, f"{rules} span.delete") == []
    assert off_screen(page, f"{rules} span.delete input[type=checkbox]") == []
    assert page.evaluate(SCROLLS) == []

    page.goto(f"{live_stack.url}/admin/runs/modelprice/")
    expect(page.locator("#changelist-filter")).to_be_visible()  # beside the list, as it is
    columns = page.locator("#result_list thead th")
    assert columns.count() == 9
    assert off_screen(page, "#result_list thead th") == []
    assert off_screen(page, "#result_list tbody td, #result_list tbody th") == []
    assert page.evaluate(SCROLLS) == []  # Django's list scrolls inside itself when too wide
    expect(page.locator("#result_list")).to_contain_text("3.125")  # as exact as entered
    expect(page.locator("#result_list")).to_contain_text("0.000125")
    expect(page.locator("#result_list")).to_contain_text("2026-01-15 09:30")
