"""The new-run form in Chromium (issue 19 point 6): the request box shows its limit as you
type, counted as the server counts it."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import EVERYWHERE
from tests.helpers import console_errors, login

pytestmark = [EVERYWHERE, pytest.mark.browser]


def test_the_request_box_counts_what_is_typed_against_its_limit(
    live_stack, page: Page, client, personas
):
    errors = console_errors(page)
    login(page, live_stack, client, personas.operator)
    page.goto(f"{live_stack.url}/runs/new/")
    count = page.locator("#request-count")
    expect(count).to_have_text("0 of 20,000 characters")
    page.fill("#run-form textarea[name=request]", "Fix the link 🙂")
    expect(count).to_have_text("14 of 20,000 characters")  # the emoji is one character
    page.fill("#run-form textarea[name=request]", "x" * 19_500)
    expect(count).to_have_text("19,500 of 20,000 characters")
    expect(count).to_have_class("muted error")
    assert errors == []
