"""The environment of every process the console starts (tool children, MCP servers): no
secret (the Anthropic key, database URLs, the secret key) ever reaches one."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the project, so a child can import its tools
SAFE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ")


def scrubbed_env() -> dict[str, str]:
    """No secret (the Anthropic key, database URLs) reaches a tool."""
    env = {key: os.environ[key] for key in SAFE_ENV_KEYS if key in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
