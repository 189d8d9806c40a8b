"""Shared test harness: personas, the live stack (daphne + a real Celery worker), Playwright.

Personas, and what each may do:
- ``admin``: everything, including the Django admin.
- ``approver``: sees runs and decides approvals.
- ``operator``: sees runs and submits new ones.
- ``ops``: sees runs and the dashboards.
- ``outsider``: logged in, but in no role: sees nothing.
"""

from __future__ import annotations

import functools
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import hypothesis
import pytest
from django.conf import settings
from django.contrib.auth.hashers import (
    PBKDF2PasswordHasher,
    get_hashers,
    get_hashers_by_algorithm,
    make_password,
)
from django.contrib.auth.models import Group, User
from django.db import DatabaseError
from django.db.backends.base.operations import BaseDatabaseOperations

from harness_console.roles import ADMIN, APPROVER, OPERATOR, OPS, roles_sync
from policies.models import Agent, Workspace
from runs.models import Run
from runs.services import run_create

from . import post_migrate_rows
from .fake_anthropic import FakeAnthropic
from .helpers import BROKEN, FIX
from .otlp_receiver import OtlpReceiver
from .stack import CHROMIUM_ARGS, CHROMIUM_EXECUTABLE, LiveStack, clear_broker_folder
from .webhook_sink import WebhookSink

FAKE_KEY = "sk-ant-test-not-a-real-key-000000000000"

# Playwright's sync API runs an event loop in the test thread; ORM calls there are safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# The tests' own offline replay scripts, beside the demo's; the live stack inherits this.
ROOT = Path(__file__).resolve().parent.parent
REPLAY_DIRS = [ROOT / "demo" / "replays", ROOT / "tests" / "replays"]
os.environ["HARNESS_REPLAY_DIRS"] = os.pathsep.join(str(d) for d in REPLAY_DIRS)
settings.HARNESS_REPLAY_DIRS = REPLAY_DIRS
# Short leases, so the sweeper finds a killed worker's run in seconds, not half a minute.
os.environ.setdefault("HARNESS_RUN_LEASE_SECONDS", "4")
os.environ.setdefault("HARNESS_SWEEP_SECONDS", "1")
# Overdue approvals expire within a second of their deadline (SPEC A5).
os.environ.setdefault("HARNESS_APPROVAL_SWEEP_SECONDS", "1")
settings.HARNESS_RUN_LEASE_SECONDS = float(os.environ["HARNESS_RUN_LEASE_SECONDS"])

# Property tests assert behaviour, never speed: on a loaded CI machine input generation
# and examples are slower, which is no failure of the code under test.
hypothesis.settings.register_profile(
    "harness", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.load_profile("harness")


def _flush_retrying(flush):
    """A transactional test's teardown empties every table in one statement (TRUNCATE on
    PostgreSQL), while the live stack's worker and beat keep their own transactions going;
    PostgreSQL may break the lock cycle between them by failing the TRUNCATE ("deadlock
    detected"). That is the test harness meeting the stack, not the code under test: try the
    flush again, a few times, before failing the test."""

    @functools.wraps(flush)
    def execute_sql_flush(self, sql_list):
        for attempt in range(5):
            try:
                return flush(self, sql_list)
            except DatabaseError:
                if attempt == 4 or self.connection.vendor != "postgresql":
                    raise
                time.sleep(0.2 * (attempt + 1))
        return None

    return execute_sql_flush


BaseDatabaseOperations.execute_sql_flush = _flush_retrying(  # type: ignore[method-assign]
    BaseDatabaseOperations.execute_sql_flush
)

# Whether this test process has started the live stack: from then on its processes write
# to this process's test database between tests.
STACK = {"started": False}


def _deleting_flush(sql_flush):
    """On PostgreSQL, a transactional test's teardown deletes every table's rows in one
    transaction (its foreign keys, Django's, deferred to the commit) rather than TRUNCATE
    them: the tests leave a few rows, and TRUNCATE, which gives each table a new file, cost
    190-330 ms a test here against 10 ms. Both leave the same empty tables while nobody else
    writes. Once this process has started the live stack, whose processes do, TRUNCATE again:
    it waits for their transactions and removes what they committed meanwhile, where a
    DELETE would leave a row committed after its statement began. Asked to reset sequences
    or to cascade, Django's own statements."""

    @functools.wraps(sql_flush)
    def deleting(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or STACK["started"] or not tables:
            return sql_flush(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        deletes = [f"DELETE FROM {self.quote_name(table)}" for table in tables]  # noqa: S608
        return ["SET CONSTRAINTS ALL DEFERRED", *deletes]

    return deleting


if not settings.EMBEDDED:
    from django.db.backends.postgresql.operations import DatabaseOperations as Postgres

    Postgres.sql_flush = _deleting_flush(Postgres.sql_flush)  # type: ignore[method-assign]

post_migrate_rows.install()


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's own hasher with one iteration, as Django's docs advise for tests: the real
    count (over a million) costs most of a second a hash here, and the demo seed and the
    personas make several hashes a test. The hash says its own count, so the live stack,
    on the default hashers, still verifies these (and upgrades them when someone logs in)."""

    iterations = 1


settings.PASSWORD_HASHERS = ["tests.conftest.QuickPBKDF2PasswordHasher"]
get_hashers.cache_clear()
get_hashers_by_algorithm.cache_clear()


PASSWORD = "correct horse battery staple"
EVERYWHERE = pytest.mark.django_db(transaction=True, databases="__all__")


@dataclass
class Personas:
    admin: User
    approver: User
    operator: User
    ops: User
    outsider: User

    def all(self) -> dict[str, User]:
        return {
            name: getattr(self, name)
            for name in ("admin", "approver", "operator", "ops", "outsider")
        }


@functools.cache
def password_hash() -> str:
    """Every persona shares one hash of PASSWORD."""
    return make_password(PASSWORD)


def make_user(username: str, role: str | None) -> User:
    user = User.objects.create(username=username, password=password_hash())
    if role:
        user.groups.add(Group.objects.get(name=role))
    if role == ADMIN:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return user


@pytest.fixture
def personas(db: None) -> Personas:
    roles_sync()
    return Personas(
        admin=make_user("ada-admin", ADMIN),
        approver=make_user("april-approver", APPROVER),
        operator=make_user("otto-operator", OPERATOR),
        ops=make_user("olga-ops", OPS),
        outsider=make_user("oscar-outsider", None),
    )


@pytest.fixture
def workspace(db: None, tmp_path: Path) -> Workspace:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "AGENTS.md").write_text("# Test workspace\n")
    return Workspace.objects.create(
        slug="test", name="Test workspace", root=str(root), drafts_root=str(tmp_path / "drafts")
    )


@pytest.fixture
def agent(db: None) -> Agent:
    return Agent.objects.create(slug="tester", name="Tester", identity="You test things.")


@pytest.fixture
def run(personas: Personas, agent: Agent, workspace: Workspace) -> Run:
    """A run submitted by the operator, not handed to any worker."""
    return run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=FIX,
        dispatch=False,
    )


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A made-up Anthropic key in the environment, as a deployment sets one."""
    value = "sk-ant-api03-test-" + secrets.token_urlsafe(24)
    monkeypatch.setenv("ANTHROPIC_API_KEY", value)
    return value


@pytest.fixture
def api(api_key: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    """The fake Messages API, with the real SDK pointed at it by its base URL."""
    fake = FakeAnthropic()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    yield fake
    fake.close()


@pytest.fixture
def docs(workspace: Workspace) -> Path:
    """The workspace's docs/ folder as the fix-link replay expects it: configuration.md links
    to a page that is not there, getting-started.md is the page it meant.

    Only these two files: tests read, compare and roll back this folder, so a module whose
    tests need another page overrides ``docs`` with a fixture of its own that takes this one
    and adds that page, and no other module's folder changes.
    """
    folder = workspace.root_path / "docs"
    folder.mkdir()
    (folder / "configuration.md").write_text(BROKEN)
    (folder / "getting-started.md").write_text("# Getting started\n")
    return folder


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """The test databases' names are settled before the settings are read, for this process
    and the live stack alike (tests/worker_env.py gives each xdist worker its own), so
    pytest-django adds no suffix of its own that the stack's processes would not know."""


@pytest.fixture(scope="session")
def live_stack(django_db_setup: None, django_db_blocker) -> Iterator[LiveStack]:
    """daphne and a Celery worker as subprocesses, on the test databases, for the session."""
    var_dir = Path(settings.VAR_DIR)
    if settings.EMBEDDED:
        clear_broker_folder(var_dir)
    else:
        from harness_console.celery import app

        app.control.purge()
    # The Anthropic SDK in the worker talks to a local fake server (tests queue its answers).
    fake = FakeAnthropic()
    # Approval notifications from the worker reach this local receiver (every risk).
    webhook = WebhookSink()
    # Every process of the stack exports its spans to this local OTLP receiver (SPEC O1).
    otlp = OtlpReceiver()
    stack = LiveStack(
        log_dir=var_dir / "test-logs",
        extra_env={
            "ANTHROPIC_API_KEY": FAKE_KEY,
            "ANTHROPIC_BASE_URL": fake.url,
            "HARNESS_APPROVAL_WEBHOOK_URL": webhook.url,
            "HARNESS_APPROVAL_NOTIFY_RISK": "low",
            **otlp.env(),
        },
    )
    stack.fake_anthropic = fake
    stack.webhook = webhook
    stack.otlp = otlp
    STACK["started"] = True
    try:
        stack.start(collectstatic=not settings.WHITENOISE_USE_FINDERS)
        yield stack
    finally:
        stack.stop()
        fake.close()
        webhook.close()
        otlp.close()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    """Debian's Chromium: Playwright's own browser download cannot work here (NOTES.md)."""
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM_EXECUTABLE,
        "args": CHROMIUM_ARGS,
    }


@pytest.fixture(autouse=True)
def patient_browser(request: pytest.FixtureRequest) -> None:
    """A page waits up to a minute for a navigation or an action, and an assertion up to
    20 s, before it fails: bounds on a hang, never a speed the test asks for. Playwright's
    30 s and 5 s defaults fail on a loaded machine while the console is only slow."""
    if request.node.get_closest_marker("browser") is None:
        return
    from playwright.sync_api import Page, expect

    page = request.getfixturevalue("page")
    assert isinstance(page, Page)
    page.set_default_timeout(60_000)
    page.set_default_navigation_timeout(60_000)
    expect.set_options(timeout=20_000)


def pytest_collection_modifyitems(config, items: list) -> None:
    """Browser tests last: Playwright's sync API leaves an event loop running in the main
    thread for the rest of the session, where Django's sync code paths refuse to run; and
    the tests of the live stack just before them."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("browser") is not None,
            # Once the live stack is up its sweeper dispatches any unclaimed run it finds in
            # the test database, so tests that drive runs in-process all go before it.
            "live_stack" in getattr(item, "fixturenames", ()),
        )
    )


@pytest.fixture(autouse=True)
def fresh_instruction_cache() -> None:
    """Test databases reuse ids across sessions, while the cache outlives them: start each
    test from a fresh generation (not cache.clear(), which on Redis would flush the broker)."""
    from policies import instruction_cache

    instruction_cache.instructions_invalidate()
    instruction_cache._memo.clear()
    # The same for the price table this process keeps: a flush removes its rows without
    # moving the stamp that tags it.
    from runs.observability.pricing import prices_changed

    prices_changed()
    # And the decision inputs a process keeps: a flush removes rows without moving the
    # stamp that tags them.
    from policies.decision_inputs import decision_inputs_forget

    decision_inputs_forget()


@pytest.fixture
def seeded(django_db_blocker) -> None:
    """The rows the migrations seed — the default policy and the built-in tools — which a
    transactional test's flush removes; for tests that run the whole flow."""
    from policies.core.default_policy import DEFAULT_POLICY
    from policies.core.tool_specs import BUILTIN_TOOLS
    from policies.models import Policy, PolicyRule, ToolDefinition

    policy, created = Policy.objects.get_or_create(
        name=DEFAULT_POLICY.name, defaults={"ceiling": DEFAULT_POLICY.ceiling}
    )
    if created:
        for order, rule in enumerate(DEFAULT_POLICY.rules, start=1):
            PolicyRule.objects.create(
                policy=policy,
                order=order * 10,
                key=rule.id,
                tool=rule.tool,
                path=rule.path,
                decision=rule.decision,
                reason=rule.reason,
            )
    prices_seed()
    for spec in BUILTIN_TOOLS.values():
        ToolDefinition.objects.get_or_create(
            name=spec.name,
            defaults={
                "description": spec.description,
                "input_schema": spec.input_schema,
                "permission_level": spec.level,
                "side_effect": spec.side_effect,
                "timeout_sec": spec.timeout_sec,
                "retry": spec.retry,
                "approval_required": spec.approval_required,
                "source": "builtin",
                "enabled": True,
            },
        )


def prices_seed() -> None:
    """The price table as the migration seeds it (a flush empties it)."""
    import importlib

    from runs.models import ModelPrice

    seed = importlib.import_module("runs.migrations.0014_prices_and_backfill")
    for model, input_, output, write, read in seed.PRICES:
        if not ModelPrice.objects.filter(model=model).exists():
            ModelPrice.objects.create(
                model=model,
                version=1,
                effective_from=seed.SINCE,
                input_per_mtok=input_,
                output_per_mtok=output,
                cache_write_per_mtok=write,
                cache_read_per_mtok=read,
            )


SEEDED = [EVERYWHERE, pytest.mark.usefixtures("seeded")]
