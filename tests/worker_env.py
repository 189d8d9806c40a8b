"""Each pytest-xdist worker gets a console of its own: its own files, databases and queues.

Loaded with ``-p tests.worker_env`` (pyproject's addopts) so that it runs when pytest loads
its plugins, before pytest-django reads the settings: everything below is environment the
settings read once, at import. The live stack's processes inherit it, so a worker's daphne,
Celery workers and beat share that worker's databases and nobody else's.

- ``HARNESS_VAR_DIR``: the SQLite files, the filesystem broker, the file cache, logs.
- ``DATABASE_URL``: PostgreSQL's database name takes the worker's id, so the test database
  is ``test_<name>_gw0``; pytest-django's own suffix is switched off in conftest
  (``django_db_modify_db_settings``), since the name is settled here for every process.
- ``HARNESS_REDIS_PREFIX`` (cache and channel layer) and ``HARNESS_QUEUE_PREFIX`` (Celery's
  queues), so two workers on one Redis never take each other's tasks or messages.

Outside xdist (``-n 0``) nothing changes.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _database_url(url: str, worker: str) -> str:
    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "postgres"
    return urlunsplit(parts._replace(path=f"/{name}_{worker}"))


def isolate(worker: str) -> None:
    env = os.environ
    base = Path(env.get("HARNESS_VAR_DIR") or Path(__file__).resolve().parent.parent / "var")
    env["HARNESS_VAR_DIR"] = str(base / worker)
    if env.get("DATABASE_URL", "").strip():
        env["DATABASE_URL"] = _database_url(env["DATABASE_URL"], worker)
    env["HARNESS_REDIS_PREFIX"] = f"{env.get('HARNESS_REDIS_PREFIX', 'harness')}-{worker}"
    env["HARNESS_QUEUE_PREFIX"] = f"{worker}-{env.get('HARNESS_QUEUE_PREFIX', '')}"


if WORKER:
    isolate(WORKER)
