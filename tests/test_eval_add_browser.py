"""Add to eval set in Chromium (issue 19, points 4 and 5): ops open a failed run's page,
follow "Add to eval set", find the expectation pre-filled to what a replay reproduces (for
a rejected run: the rejection and the approvals asked, not the approver's name and words),
and save it as it is: the case holds that expectation."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from approvals.models import ApprovalRequest
from evals.models import EvalCase
from runs.models import Run
from tests.conftest import SEEDED
from tests.helpers import login
from tests.test_eval_pages import failed_run

pytestmark = [*SEEDED, pytest.mark.browser]


def test_ops_add_a_rejected_run_to_the_eval_set_with_its_prefilled_expectation(
    live_stack, page: Page, client, personas, agent, workspace
):
    run = failed_run(personas, agent, workspace)
    reason = "rejected by april-approver: Not this wording, please"
    Run.objects.filter(pk=run.pk).update(failure_reason=reason, failure_kind="rejected")
    for n, (kind, tool, status) in enumerate(
        [("tool_call", "patchDraft", "approved"), ("commit", "", "rejected")]
    ):
        ApprovalRequest.objects.create(
            run=run, kind=kind, tool=tool, tool_use_id=f"t{n}", status=status
        )
    login(page, live_stack, client, personas.ops)
    page.goto(f"{live_stack.url}/runs/{run.pk}/")
    page.locator("#run-add-eval").click()
    expect(page.get_by_role("heading", name="Add to eval set")).to_be_visible()
    expect(page.locator("#eval-add-rejected")).to_be_visible()

    name = f"run-{run.pk.hex[:8]}"
    prefilled = {
        "#id_name": name,
        "#id_status": "failed",
        "#id_failure_contains": "rejected by",
        "#id_approvals": "patchDraft, commit",
        "#id_denied": "",
        "#id_not_run": "",
    }
    for field, value in prefilled.items():
        expect(page.locator(field)).to_have_value(value)
    page.locator("#eval-add-form").get_by_role("button", name="Add to eval set").click()

    expect(page).to_have_url(re.compile(rf"/evals/#case-{name}$"))
    expect(page.locator("main")).to_contain_text(f"Added {name} to the eval set")
    case = EvalCase.objects.get(source_run=run)
    assert case.name == name and case.created_by == personas.ops
    assert case.data["expect"] == {
        "status": "failed",
        "failure_contains": "rejected by",
        "approvals": ["patchDraft", "commit"],
    }
