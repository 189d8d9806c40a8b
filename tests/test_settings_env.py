"""Settings from the environment: the embedded default, production, and refusing unsafe starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VARIABLES = (
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "DATABASE_URL",
    "REDIS_URL",
    "HARNESS_USE_TEST_DATABASES",
)
PROBE = (
    "import django; django.setup(); from django.conf import settings as s; "
    "print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL, "
    "s.CHANNEL_LAYERS['default']['BACKEND'], s.DEBUG, sorted(s.DATABASES), s.SECRET_KEY[:6])"
)


def load_settings(tmp_path: Path, probe: str = PROBE, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    clean.update(
        HARNESS_VAR_DIR=str(tmp_path / "var"),
        DJANGO_SETTINGS_MODULE="harness_console.settings",
        **env,
    )
    return subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_with_nothing_set_it_is_the_embedded_default(tmp_path):
    result = load_settings(tmp_path)
    assert result.returncode == 0, result.stderr
    engine, broker, layer, debug, aliases, _ = result.stdout.split(" ", 5)
    assert engine == "django.db.backends.sqlite3"
    assert broker.startswith("filesystem://")
    assert layer == "channels_lite.layers.core.SQLiteChannelLayer"
    assert debug == "True"
    assert "'channels'" in aliases
    assert (tmp_path / "var" / "broker" / "queue").is_dir()


def test_the_embedded_secret_key_is_generated_once_and_kept(tmp_path):
    first = load_settings(tmp_path).stdout.split()[-1]
    second = load_settings(tmp_path).stdout.split()[-1]
    key_file = tmp_path / "var" / "secret_key"
    assert first == second
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "argv",
    [
        ["/usr/lib/python3/site-packages/celery/__main__.py", "-A", "harness_console", "worker"],
        ["/srv/venv/bin/celery", "-A", "harness_console", "worker", "--queues", "runs"],
    ],
)
def test_a_celery_worker_of_the_embedded_default_is_not_in_debug_mode(tmp_path, argv):
    """A worker serves no page: it keeps the console's key and hosts, without the debug
    cursor (every query wrapped and kept); beat and the web stay in debug mode."""
    probe = f"import sys; sys.argv = {argv!r}; " + PROBE.replace(
        "s.DEBUG", "s.DEBUG, s.ALLOWED_HOSTS[0]"
    )
    worker = load_settings(tmp_path, probe).stdout.split()
    web = load_settings(tmp_path).stdout.split()
    beat = load_settings(tmp_path, probe.replace("'worker'", "'beat'")).stdout.split()
    assert worker[3:5] == ["False", "localhost"], worker
    assert worker[-1] == web[-1]  # the same generated key
    assert web[3] == "True"
    assert beat[3] == "True"


def test_with_both_urls_set_it_is_production(tmp_path):
    result = load_settings(
        tmp_path,
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/test",
        REDIS_URL="redis://127.0.0.1:6379/0",
        SECRET_KEY="s" * 50,
        ALLOWED_HOSTS="console.example",
    )
    assert result.returncode == 0, result.stderr
    engine, broker, layer, debug, aliases, _ = result.stdout.split(" ", 5)
    assert engine == "harness_console.postgresql"  # Django's, its pool last-in first-out
    assert broker == "redis://127.0.0.1:6379/0"
    assert layer == "channels_redis.core.RedisChannelLayer"
    assert debug == "False"
    assert aliases.strip() == "['default']"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "false", "ALLOWED_HOSTS": "x.example"}, "SECRET_KEY must be set"),
        ({"DEBUG": "false", "SECRET_KEY": "s" * 50}, "ALLOWED_HOSTS must be set"),
        ({"DATABASE_URL": "postgres://postgres@127.0.0.1/test"}, "Set both DATABASE_URL and"),
        ({"REDIS_URL": "redis://127.0.0.1:6379/0"}, "Set both DATABASE_URL and"),
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        (
            {
                "DATABASE_URL": "postgres://postgres@127.0.0.1/test",
                "REDIS_URL": "redis://x",
                "ALLOWED_HOSTS": "x.example",
            },
            "SECRET_KEY must be set",
        ),
    ],
)
def test_an_unsafe_or_broken_environment_refuses_to_start(tmp_path, env, message):
    result = load_settings(tmp_path, **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_debug_off_never_writes_a_generated_key(tmp_path):
    load_settings(tmp_path, DEBUG="false", ALLOWED_HOSTS="x.example")
    assert not (tmp_path / "var" / "secret_key").exists()


def test_behind_a_tls_proxy_cookies_are_secure_and_https_origins_trusted(tmp_path):
    probe = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.CSRF_TRUSTED_ORIGINS)"
    )
    result = load_settings(
        tmp_path,
        probe,
        HARNESS_HTTPS="true",
        DEBUG="false",
        SECRET_KEY="s" * 50,
        ALLOWED_HOSTS="console.example,.corp.example",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "True True ['https://console.example', 'https://corp.example']"
    )
