"""Settings for both configurations of the console, read from the environment.

With no environment variables set this is the *embedded default*: SQLite, the Celery
filesystem broker and the channels-lite layer, all under ``var/``, so one command starts
everything on a laptop. With ``DATABASE_URL`` and ``REDIS_URL`` set it is *production*:
PostgreSQL, Redis as Celery broker and channel layer, workers on any number of machines.

Environment variables (documented in the README):
``DEBUG``, ``SECRET_KEY``, ``ALLOWED_HOSTS``, ``DATABASE_URL``, ``REDIS_URL``; plus
``HARNESS_VAR_DIR`` (where the embedded default keeps its files) for tests and packaging.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP
from kombu import Queue

from harness_console.db_pool import pool_options

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("HARNESS_VAR_DIR") or BASE_DIR / "var").resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_int(name: str, *, default: int, minimum: int) -> int:
    """An integer setting (unset or empty: ``default``), refused below ``minimum``."""
    value = int(os.environ.get(name) or default)
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be {minimum} or more.")
    return value


def env_bool(name: str, *, default: bool) -> bool:
    """Read a boolean so that a typo fails loudly instead of silently meaning False."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true or false).")


DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
EMBEDDED = not DATABASE_URL
# Prefix of the console's keys in a shared Redis (channel layer and cache).
REDIS_PREFIX = os.environ.get("HARNESS_REDIS_PREFIX", "harness")
if bool(DATABASE_URL) != bool(REDIS_URL):
    raise ImproperlyConfigured(
        "Set both DATABASE_URL and REDIS_URL for production, or neither for the embedded default."
    )


def _celery_worker() -> bool:
    """This process is a Celery worker: ``celery -A harness_console worker`` or
    ``python -m celery … worker``, as ``serve`` and the README's production lines start it."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    celery = program.name == "celery" or program.parent.name == "celery"
    return celery and "worker" in sys.argv[1:]


# The embedded default is a single-machine console, so it runs in debug mode unless told
# otherwise; production must opt in to debug explicitly. The console's debug mode decides
# the generated key, the local hosts and plain log lines.
CONSOLE_DEBUG = env_bool("DEBUG", default=EMBEDDED)
CELERY_WORKER = _celery_worker()
# Django's own debug mode, in the processes that serve pages. A worker serves none: there
# it would only wrap every query to keep its SQL (on SQLite, one more statement each to
# quote the parameters) and hold up to 9,000 of them per connection, which Celery warns
# of; measured, it cost a run's loop step a third of its time (bench/loop.py).
DEBUG = CONSOLE_DEBUG and not CELERY_WORKER


def _secret_key() -> str:
    """An explicit key always wins; in debug mode a key is generated once into var/."""
    key = os.environ.get("SECRET_KEY", "").strip()
    if key:
        return key
    if not CONSOLE_DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    path = VAR_DIR / "secret_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


def _allowed_hosts() -> list[str]:
    raw = os.environ.get("ALLOWED_HOSTS", "").strip()
    if raw:
        return [host.strip() for host in raw.split(",") if host.strip()]
    if not CONSOLE_DEBUG:
        raise ImproperlyConfigured("ALLOWED_HOSTS must be set when DEBUG is off.")
    return ["localhost", "127.0.0.1", "[::1]"]


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = _allowed_hosts()

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "harness_console",
    "runs",
    "approvals",
    "policies",
    "evals",
]
if EMBEDDED:
    INSTALLED_APPS.append("channels_lite")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Above the guard, so that its refusals carry the policy too.
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Before anything reads the request: no credentials in a URL, no NUL characters.
    "harness_console.web.request_guard.RequestGuard",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, and synchronous only: every middleware above runs in the request's one thread
    # under daphne rather than hopping threads twice apiece (harness_console.web.one_thread).
    "harness_console.web.one_thread.OneThread",
]

ROOT_URLCONF = "harness_console.urls"
ASGI_APPLICATION = "harness_console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "harness_console.navigation.navigation",
                # {{ csp_nonce }} for the few <script> tags that are not files of ours.
                "django.template.context_processors.csp",
            ],
        },
    },
]

# --- Databases -------------------------------------------------------------------------
# Under tests, daphne and the Celery worker run as subprocesses against the test databases;
# the test harness tells them so with HARNESS_USE_TEST_DATABASES.
USE_TEST_DATABASES = env_bool("HARNESS_USE_TEST_DATABASES", default=False)

SQLITE_OPTIONS = {
    # Measured in NOTES.md: no lock errors and a far lower p99 under web + worker writes.
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;"
    ),
}


def _sqlite(name: str) -> dict:
    path, test_path = VAR_DIR / f"{name}.sqlite3", VAR_DIR / f"test-{name}.sqlite3"
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": test_path if USE_TEST_DATABASES else path,
        "OPTIONS": SQLITE_OPTIONS,
        "TEST": {"NAME": test_path},
    }


# HTTP requests daphne runs at once, each on a long-lived thread (web/request_threads.py).
HARNESS_WEB_THREADS = env_int("HARNESS_WEB_THREADS", default=8, minimum=1)
HARNESS_DB_POOL_SIZE = env_int("HARNESS_DB_POOL_SIZE", default=10, minimum=0)  # 0: no pool
HARNESS_DB_POOL_TIMEOUT = float(os.environ.get("HARNESS_DB_POOL_TIMEOUT", "10"))

DATABASES: dict[str, Any]
if EMBEDDED:
    DATABASES = {"default": _sqlite("db"), "channels": _sqlite("channels")}
    DATABASE_ROUTERS = ["harness_console.db_routers.ChannelLayerRouter"]
else:
    # Health checks: a connection the pool hands out is checked first (one round trip, unless
    # it was handed out a moment ago and nothing came on its socket since: db_pool.py), so
    # the connections a PostgreSQL restart or failover cut are replaced, not handed to a run.
    _default = dj_database_url.parse(DATABASE_URL, conn_max_age=0, conn_health_checks=True)
    if _default["ENGINE"] == "django.db.backends.postgresql":  # Django's, its pool LIFO
        _default["ENGINE"] = "harness_console.postgresql"
    # Connections stay bounded: persistent ones (CONN_MAX_AGE) are per thread, and piled up
    # under daphne's threads until PostgreSQL refused clients (NOTES.md). Each process keeps
    # a pool of at most HARNESS_DB_POOL_SIZE (web and workers; a request waits up to
    # HARNESS_DB_POOL_TIMEOUT s): max_connections >= (web + worker processes) x this.
    # 0: no pool, a connection per request, closed after it (behind PgBouncer, say).
    if HARNESS_DB_POOL_SIZE:
        _default["OPTIONS"] = {
            **_default.get("OPTIONS", {}),
            "pool": pool_options(HARNESS_DB_POOL_SIZE, HARNESS_DB_POOL_TIMEOUT),
            # Prepared statements, for the loop step's (runs.flow.checkpoint_statement);
            # off without the pool: an external pooler may switch server connections.
            "prepare_threshold": 5,
        }
    _default["TEST"] = {"NAME": f"test_{_default['NAME']}"}
    if USE_TEST_DATABASES:
        _default["NAME"] = _default["TEST"]["NAME"]
    DATABASES = {"default": _default}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels --------------------------------------------------------------------------
if EMBEDDED:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_lite.layers.core.SQLiteChannelLayer",
            "CONFIG": {"database": "channels", "polling_interval": 0.05, "expiry": 60},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [REDIS_URL],
                "prefix": REDIS_PREFIX,
            },
        }
    }

# --- Celery ----------------------------------------------------------------------------
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# What a task prints (the console mail backend's emails) is information, not a warning.
CELERY_WORKER_REDIRECT_STDOUTS_LEVEL = "INFO"
# Three queues, so that nothing waits behind what it should not: runs (a run's execution and
# its session_end hooks), housekeeping (beat's sweepers, which must reach a worker while
# hundreds of runs are queued) and default (notifications, anything else). The run worker
# consumes runs; a second, small worker consumes housekeeping and default (serve.py, README).
# HARNESS_QUEUE_PREFIX keeps two consoles (or a bench) apart on one Redis database.
HARNESS_QUEUE_PREFIX = os.environ.get("HARNESS_QUEUE_PREFIX", "").strip()
RUNS_QUEUE = f"{HARNESS_QUEUE_PREFIX}runs"
HOUSEKEEPING_QUEUE = f"{HARNESS_QUEUE_PREFIX}housekeeping"
CELERY_TASK_DEFAULT_QUEUE = f"{HARNESS_QUEUE_PREFIX}default"
CELERY_TASK_QUEUES = [
    Queue(name, routing_key=name)
    for name in (RUNS_QUEUE, HOUSEKEEPING_QUEUE, CELERY_TASK_DEFAULT_QUEUE)
]
_ROUTED = {
    RUNS_QUEUE: ("runs.tasks.run_execute", "runs.tasks.run_session_end"),
    HOUSEKEEPING_QUEUE: (
        "runs.tasks.runs_sweep",
        "runs.tasks.approvals_sweep",
        "runs.tasks.rollups_reconcile_recent",
        "runs.tasks.rollups_fold_pending",
        "runs.tasks.live_layer_trim",
        "evals.tasks.suites_sweep",
    ),
    # An eval suite (one at a time, minutes waiting on its runs): not behind the backlog its
    # own runs join, nor holding the sweepers' pool.
    CELERY_TASK_DEFAULT_QUEUE: ("evals.tasks.suite_execute",),
}
CELERY_TASK_ROUTES = {task: {"queue": queue} for queue, tasks in _ROUTED.items() for task in tasks}
# A run waits for the model most of its life: a waiting run holds a thread, not a process
# (bench/throughput.py: under 1 MiB of RSS per run in flight, 14-17 MiB per prefork process).
# HARNESS_RUN_THREADS: runs one run worker drives at once (200 in flight on this 2-core
# machine); its CPU between model calls and the database bound a worker, not threads.
# Prefetch 1 per thread: a worker takes only what it can start; machines share a backlog.
HARNESS_RUN_THREADS = env_int("HARNESS_RUN_THREADS", default=200, minimum=1)
# Run worker processes per machine (serve starts them all): one per core this process may
# use, since a process's Python runs on one core at a time (one process left the other core
# idle at 200 runs in flight). A bigger machine gets more by itself; threads are per process.
HARNESS_RUN_PROCESSES = env_int(
    "HARNESS_RUN_PROCESSES", default=len(os.sched_getaffinity(0)) or 1, minimum=1
)
CELERY_WORKER_POOL = "threads"
CELERY_WORKER_CONCURRENCY = HARNESS_RUN_THREADS
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Runs resume from the database, not the broker (SPEC R9): the sweeper re-dispatches runs
# whose worker's lease expired. A worker renews its lease every third of its length.
HARNESS_RUN_LEASE_SECONDS = float(os.environ.get("HARNESS_RUN_LEASE_SECONDS", "30"))
HARNESS_SWEEP_SECONDS = float(os.environ.get("HARNESS_SWEEP_SECONDS", "10"))
# Pending approvals past their policy's deadline expire (SPEC A5); reminders go out first.
HARNESS_APPROVAL_SWEEP_SECONDS = float(os.environ.get("HARNESS_APPROVAL_SWEEP_SECONDS", "30"))
# Rollups (SPEC O6): how often yesterday and today are rebuilt from the raw rows (repairing
# what changed after a run ended), and runs that ended folded in (and before every read).
HARNESS_ROLLUP_RECONCILE_SECONDS = float(os.environ.get("HARNESS_ROLLUP_RECONCILE_SECONDS", "900"))
HARNESS_ROLLUP_FOLD_SECONDS = float(os.environ.get("HARNESS_ROLLUP_FOLD_SECONDS", "10"))
# The operations dashboard calls a working run with no event for this long stuck.
HARNESS_STUCK_AFTER_SECONDS = int(os.environ.get("HARNESS_STUCK_AFTER_SECONDS", "600"))
# Tool calls one model turn may make (SPEC T6: tool spam); calls beyond are refused, each with
# a tool result saying why, so a turn of a thousand tool_use blocks runs at most this many.
HARNESS_MAX_TOOL_CALLS_PER_TURN = max(
    1, int(os.environ.get("HARNESS_MAX_TOOL_CALLS_PER_TURN", "20"))
)
CELERY_BEAT_SCHEDULE: dict[str, dict] = {
    "sweep-abandoned-runs": {"task": "runs.tasks.runs_sweep", "schedule": HARNESS_SWEEP_SECONDS},
    "reconcile-rollups": {
        "task": "runs.tasks.rollups_reconcile_recent",
        "schedule": HARNESS_ROLLUP_RECONCILE_SECONDS,
    },
    "fold-rollups": {
        "task": "runs.tasks.rollups_fold_pending",
        "schedule": HARNESS_ROLLUP_FOLD_SECONDS,
    },
    "expire-approvals": {
        "task": "runs.tasks.approvals_sweep",
        "schedule": HARNESS_APPROVAL_SWEEP_SECONDS,
    },
    "sweep-abandoned-suites": {
        "task": "evals.tasks.suites_sweep",
        "schedule": HARNESS_SWEEP_SECONDS,
    },
}
if EMBEDDED:
    BROKER_DIR = VAR_DIR / "broker"
    for _folder in ("queue", "processed", "control"):
        (BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = (
        "filesystem://localhost//"  # the host is ignored; naming it avoids a warning
    )
    # kombu's filesystem transport with atomic message writes (harness_console/broker.py).
    CELERY_BROKER_TRANSPORT = "harness_console.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # Both directions in one folder, as kombu's filesystem transport needs across processes.
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "store_processed": False,
        "control_folder": str(BROKER_DIR / "control"),
        # 0.1 s: about 50 ms from .delay() to task start (1 s default gives about 820 ms).
        "polling_interval": 0.1,
    }
    CELERY_BEAT_SCHEDULE["trim-live-channel-rows"] = {
        "task": "runs.tasks.live_layer_trim",
        "schedule": 300.0,
    }
else:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Cache -----------------------------------------------------------------------------
# Shared by every process (web and workers): instruction loading is cached here (SPEC C6).
if EMBEDDED:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
            "TIMEOUT": 24 * 3600,
            # The default (300 entries, then culls at random) would evict live generations.
            "OPTIONS": {"MAX_ENTRIES": 100_000},
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": REDIS_PREFIX,
            "TIMEOUT": 24 * 3600,
        }
    }

# --- Harness ---------------------------------------------------------------------------
# The token counter behind every budget; an exact counter with the same three methods
# (count, size, tokens_for_size) can replace the estimate here.
HARNESS_TOKENIZER = os.environ.get("HARNESS_TOKENIZER", "policies.core.tokenizer.ByteEstimate")

# Each model call's own timeout, and the limit for one call with its retries (SPEC R11).
HARNESS_MODEL_TIMEOUT_SECONDS = float(os.environ.get("HARNESS_MODEL_TIMEOUT_SECONDS", "60"))
HARNESS_MODEL_DEADLINE_SECONDS = float(os.environ.get("HARNESS_MODEL_DEADLINE_SECONDS", "180"))

# Where offline replay scripts are found (SPEC R11): a request whose text, agent and
# workspace match a script is answered by it, labelled "offline replay". Colon-separated.
HARNESS_REPLAY_DIRS = [
    Path(folder).resolve()
    for folder in (
        os.environ.get("HARNESS_REPLAY_DIRS") or str(BASE_DIR / "demo" / "replays")
    ).split(os.pathsep)
    if folder.strip()
]

# The eval set (SPEC E1): folders of case files (each category in its own folder), and where
# a suite run lays out each case's workspace. With workers on several machines that folder
# must be shared, like every workspace.
HARNESS_EVAL_DIRS = [
    Path(folder).resolve()
    for folder in (os.environ.get("HARNESS_EVAL_DIRS") or str(BASE_DIR / "evals" / "cases")).split(
        os.pathsep
    )
    if folder.strip()
]
HARNESS_EVAL_ROOT = Path(os.environ.get("HARNESS_EVAL_ROOT") or VAR_DIR / "evals").resolve()
# A suite run's runner (a worker, or run_evals) shows it is alive as it goes; one silent for
# this long is marked abandoned by beat's sweeper, and the runs it left unfinished cancelled.
HARNESS_EVAL_LEASE_SECONDS = float(os.environ.get("HARNESS_EVAL_LEASE_SECONDS", "120"))
if HARNESS_EVAL_LEASE_SECONDS <= 0:
    raise ImproperlyConfigured("HARNESS_EVAL_LEASE_SECONDS must be above 0.")
# Runs of a suite in flight at once: it shares the run workers with everyone's runs.
HARNESS_EVAL_RUNS_AT_ONCE = env_int("HARNESS_EVAL_RUNS_AT_ONCE", default=8, minimum=1)

# --- Metrics ---------------------------------------------------------------------------
# /metrics (SPEC O2) answers "Authorization: Bearer <METRICS_TOKEN>" (Prometheus's
# `authorization` scrape option) and logged-in admins; empty: admins only.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "").strip()

# --- Approvals: notifications ---------------------------------------------------------
# Approvers get an email for each new request at or above this risk (low ... critical);
# "none" sends none. The webhook, if set, gets a JSON body for the same requests; with a
# secret, X-Harness-Signature is the HMAC-SHA256 of "<X-Harness-Timestamp>.<body>".
HARNESS_APPROVAL_NOTIFY_RISK = os.environ.get("HARNESS_APPROVAL_NOTIFY_RISK", "medium")
HARNESS_APPROVAL_WEBHOOK_URL = os.environ.get("HARNESS_APPROVAL_WEBHOOK_URL", "")
HARNESS_APPROVAL_WEBHOOK_SECRET = os.environ.get("HARNESS_APPROVAL_WEBHOOK_SECRET", "")
# Links in emails and webhook bodies point here.
HARNESS_BASE_URL = os.environ.get("HARNESS_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "harness-console@localhost")
# Embedded default: mail is printed by the process that sends it (the worker's log); in
# production set EMAIL_HOST (and EMAIL_PORT, EMAIL_HOST_USER, ...) for SMTP.
if os.environ.get("EMAIL_HOST"):
    MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {
                "host": os.environ["EMAIL_HOST"],
                "port": int(os.environ.get("EMAIL_PORT", "587")),
                "username": os.environ.get("EMAIL_HOST_USER", ""),
                "password": os.environ.get("EMAIL_HOST_PASSWORD", ""),
                "use_tls": env_bool("EMAIL_USE_TLS", default=True),
                "timeout": 10,
            },
        }
    }
else:
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}

# --- Auth ------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

SESSION_COOKIE_HTTPONLY = True

# Content-Security-Policy on every response (Django's own middleware). Scripts come only
# from our static files or carry the request's nonce; no inline handler, no eval. Styles
# allow inline: plotly.js and htmx write <style> elements and style attributes as they
# draw, and a style cannot run code. WebSockets are same-origin ('self' covers ws:/wss:).
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "script-src-attr": [CSP.NONE],
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:", "blob:"],
    "font-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "worker-src": [CSP.SELF, "blob:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
# Behind a TLS-terminating proxy: secure cookies, trust its X-Forwarded-Proto, and accept
# form posts from the https origins of ALLOWED_HOSTS.
HTTPS = env_bool("HARNESS_HTTPS", default=False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    CSRF_TRUSTED_ORIGINS = [f"https://{host.lstrip('.')}" for host in ALLOWED_HOSTS if host != "*"]

REST_FRAMEWORK = {
    # Browsers use their session (with CSRF); scripts a token an admin issues with
    # ``manage.py drf_create_token <user>`` (header ``Authorization: Token <key>``).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: a client without credentials gets 401 with WWW-Authenticate.
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's parsers, refusing NUL characters with a 400 (harness_console/web/api.py).
    "DEFAULT_PARSER_CLASSES": [
        "harness_console.web.api.ConsoleJSONParser",
        "harness_console.web.api.ConsoleFormParser",
        "harness_console.web.api.ConsoleMultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # limit (1..200, larger is capped) and offset, checked: harness_console/web/api.py.
    "DEFAULT_PAGINATION_CLASS": "harness_console.web.api.ConsolePagination",
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Harness Console API",
    "DESCRIPTION": "Runs, their events and approvals (SPEC X3).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and the docs page answer users with a role only, like the API itself
    # (harness_console/api_urls.py gives both views that permission).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "runs.models.Run.Status",
        "ApprovalStatusEnum": "approvals.models.ApprovalRequest.Status",
        "ToolCallStatusEnum": "runs.models.ToolCall.STATUSES",
    },
}

# --- I18N, static ----------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("HARNESS_STATIC_ROOT") or VAR_DIR / "static")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
]
WHITENOISE_USE_FINDERS = DEBUG

# --- Logging ---------------------------------------------------------------------------
# One JSON object per line in production, for a log pipeline; plain lines in debug mode.
# HARNESS_LOG_FORMAT (json or text) overrides. Every line a worker logs for a run carries
# run_id and trace_id (SPEC O3; harness_console.logging.RunContext).
HARNESS_LOG_FORMAT = os.environ.get("HARNESS_LOG_FORMAT", "").strip().lower() or (
    "text" if CONSOLE_DEBUG else "json"
)
if HARNESS_LOG_FORMAT not in {"json", "text"}:
    raise ImproperlyConfigured(
        f"HARNESS_LOG_FORMAT={HARNESS_LOG_FORMAT!r} is not a log format (use json or text)."
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {
            "()": "harness_console.logging.TextFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        # timestamp, level, logger, message, run_id, trace_id and any extra of the record.
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(levelname)s %(name)s %(message)s",
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": True,
        },
    },
    "filters": {
        "quiet_403": {"()": "harness_console.logging.QuietPermissionDenied"},
        "run_context": {"()": "harness_console.logging.RunContext"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": HARNESS_LOG_FORMAT,
            "filters": ["quiet_403", "run_context"],
        }
    },
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {
        # Replaces Django's own console handler, which would print every line a second time.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.db.backends": {"level": "WARNING"},
    },
}
