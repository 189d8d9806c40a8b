"""A bench's throwaway place of its own, set up before Django starts: a temporary
HARNESS_VAR_DIR (database, broker folder, workspace, replay scripts), on PostgreSQL a
database named ``bench_<name>`` (whatever DATABASE_URL names; created, then dropped), and
Redis keys and Celery queues under the prefix ``bench-<name>``."""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Place:
    prefix: str  # Redis keys (cache, channel layer) and the Celery queue
    var_dir: Path
    replays: Path


def prepare(name: str) -> Place:
    """Point this process, and every process it starts, at the bench's own place."""
    sys.path.insert(0, str(ROOT))
    var_dir = Path(tempfile.mkdtemp(prefix=f"harness-bench-{name}-"))
    replays = var_dir / "replays"
    replays.mkdir()
    prefix = f"bench-{name}"
    os.environ["HARNESS_VAR_DIR"] = str(var_dir)
    os.environ["HARNESS_REPLAY_DIRS"] = str(replays)
    os.environ["HARNESS_REDIS_PREFIX"] = prefix
    os.environ["HARNESS_QUEUE_PREFIX"] = f"{prefix}-"
    os.environ["HARNESS_USE_TEST_DATABASES"] = "false"  # the bench database is everyone's here
    if os.environ.get("DATABASE_URL"):
        url = urlsplit(os.environ["DATABASE_URL"])
        os.environ["DATABASE_URL"] = urlunsplit(url._replace(path=f"/bench_{name}"))
        os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
        os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_console.settings")
    return Place(prefix, var_dir, replays)
