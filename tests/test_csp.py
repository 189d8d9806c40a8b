"""The Content-Security-Policy (issue 16, section 4): on every page each persona can open,
the admin's and the API docs' included; no script runs unless it is one of our files or
carries the response's nonce; no inline event handler anywhere in templates/ or static/.

The browser half (a real Chromium on the live stack, no violation while the pages work) is
in test_csp_browser.py."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from django.contrib import admin
from django.test import Client
from django.urls import reverse

from approvals.models import ApprovalRequest
from tests.conftest import SEEDED
from tests.helpers import driven

pytestmark = SEEDED

ROOT = Path(__file__).resolve().parent.parent
# What a <script> may be without a src and still never run.
DATA_TYPES = {"application/json", "application/ld+json"}


class Scripts(HTMLParser):
    """Every script element and inline handler of a page, as the browser would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[dict[str, str | None]] = []
        self.handlers: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script":
            self.scripts.append(named)
        for name, value in attrs:
            if name.startswith("on"):
                self.handlers.append(f"<{tag} {name}=...>")
            if name in {"href", "src", "action", "formaction"} and (
                value or ""
            ).strip().lower().startswith("javascript:"):
                self.handlers.append(f"<{tag} {name}=javascript:...>")


def policy_of(response) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy")
    assert header, f"no Content-Security-Policy on {response.request['PATH_INFO']}"
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


def inline_problems(html: str, nonce: str | None) -> list[str]:
    parser = Scripts()
    parser.feed(html)
    problems = list(parser.handlers)
    for script in parser.scripts:
        if script.get("src") or (script.get("type") or "").lower() in DATA_TYPES:
            continue
        if nonce is None or script.get("nonce") != nonce:
            problems.append(f"inline <script> without the response's nonce: {script}")
    return problems


def pages(world: dict[str, str]) -> list[str]:
    run, approval = world["run"], world["approval"]
    urls = [
        "/",
        "/login/",
        "/runs/",
        "/runs/new/",
        f"/runs/{run}/",
        f"/runs/{run}/panel/",
        "/approvals/",
        "/approvals/history/",
        f"/approvals/{approval}/",
        "/dashboards/",
        "/dashboards/ops/",
        "/dashboards/retro/?days=30",
        "/evals/",
        "/api/",
        "/api/docs/",
        "/admin/",
        "/admin/password_change/",
        "/no-such-page/",
    ]
    for model in admin.site._registry:
        info = model._meta.app_label, model._meta.model_name
        urls.append(reverse("admin:{}_{}_changelist".format(*info)))
        urls.append(reverse("admin:{}_{}_add".format(*info)))
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            urls.append(reverse("admin:{}_{}_change".format(*info), args=[first.pk]))
    return urls


def test_every_page_every_persona_opens_carries_the_policy_and_no_unnonced_script(
    personas, agent, workspace, docs
):
    run = driven(personas, agent, workspace)
    world = {"run": str(run.pk), "approval": str(ApprovalRequest.objects.get(run=run).pk)}
    problems, opened = [], 0
    for name, user in [("anonymous", None), *personas.all().items()]:
        client = Client()
        client.raise_request_exception = False
        if user is not None:
            client.force_login(user)
        for url in pages(world):
            response = client.get(url)
            policy = policy_of(response)
            assert "'unsafe-inline'" not in policy["script-src"], policy
            assert "'unsafe-eval'" not in policy["script-src"], policy
            assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
            if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
                continue
            opened += 1
            nonces = [s.strip("'").removeprefix("nonce-") for s in policy["script-src"]]
            nonce = next((n for n in nonces if n not in {"self"}), None)
            for problem in inline_problems(response.content.decode(), nonce):
                problems.append(f"{name} {url}: {problem}")
    assert opened > 60  # every persona's own pages, and the admin's many
    assert not problems, "\n".join(problems[:30])


def test_the_docs_start_up_script_is_a_file_under_the_same_policy(personas):
    client = Client()
    client.force_login(personas.operator)
    page = client.get("/api/docs/")
    script = re.search(r'<script src="([^"]*\?script[^"]*)"', page.content.decode())
    assert script, page.content[:2000]
    loaded = client.get(script.group(1).replace("&amp;", "&"))
    assert loaded.status_code == 200 and "javascript" in loaded["Content-Type"]
    assert "SwaggerUIBundle" in loaded.content.decode()


def test_no_template_or_static_file_holds_an_inline_script_or_handler():
    """The source of every page: a template's inline <script> would need the nonce (none
    does today), an on...= attribute or a javascript: URL can never run under the policy."""
    problems = []
    for path in [*(ROOT / "templates").rglob("*.html"), *(ROOT / "static").rglob("*.js")]:
        text = path.read_text()
        for match in re.finditer(r"<script\b([^>]*)>", text):
            attrs = match.group(1)
            if "src=" in attrs or "application/json" in attrs or "csp_nonce" in attrs:
                continue
            problems.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
        for match in re.finditer(r"""\son[a-z]+\s*=\s*["']""", text):
            problems.append(f"{path.relative_to(ROOT)}: inline handler {match.group(0).strip()}")
        if re.search(r"javascript:", text, re.IGNORECASE):
            problems.append(f"{path.relative_to(ROOT)}: a javascript: URL")
        if re.search(r"\beval\(|new Function\(|setTimeout\(\s*[\"']", text):
            problems.append(f"{path.relative_to(ROOT)}: code built from a string")
    assert not problems, "\n".join(problems)
