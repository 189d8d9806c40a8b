"""The checks of SPEC T12 at the MCP client layer, in their order, as a pure function.

1. Is the server whitelisted?  2. Is the tool allowed?  3. Are the arguments within range
(every path inside an allowed glob and outside every forbidden one)?  4. Is an approval
needed (the policy's decision)?  5. Is the rate limit exceeded?  6. Is it inside the change
window? Each refusal names its own check, so an admin knows which setting stopped a call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any, Final, Literal

from wcmatch import glob

from .paths import PathRefused, normalize_relative

Check = Literal["whitelist", "tool", "arguments", "approval", "rate_limit", "change_window"]
PATH_KEYS: Final = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "source",
        "src",
        "target",
        "dest",
        "destination",
        "directory",
        "dir",
        "folder",
        "root",
        "cwd",
        "uri",
        "location",
    }
)
PATH_SUFFIXES: Final = ("path", "paths", "file", "dir", "directory", "folder", "uri")
DAY_NAMES: Final = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_FLAGS: Final = glob.GLOBSTAR | glob.DOTGLOB | glob.BRACE


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    enabled: bool
    allowed_tools: frozenset[str]
    allowed_paths: tuple[str, ...] = ()
    forbidden_paths: tuple[str, ...] = ()
    rate_limit_per_minute: int = 0  # 0: no limit
    window_days: frozenset[int] = frozenset()  # 0 = Monday; empty: any day
    window_start: time | None = None  # UTC; both empty: any time
    window_end: time | None = None


@dataclass(frozen=True)
class McpRefusal:
    check: Check
    reason: str


def _names_a_path(key: str) -> bool:
    plain = "".join(ch for ch in key.lower() if ch.isalnum())  # filePath, file_path, file-path
    return plain in PATH_KEYS or plain.endswith(PATH_SUFFIXES)


def path_arguments(arguments: Any) -> list[Any]:
    """Values of arguments that name files, at any depth: ``path``, ``filePath``, ``src``,
    lists of ``paths``, and the same inside nested objects."""
    found: list[Any] = []
    if isinstance(arguments, Mapping):
        for key, value in arguments.items():
            if _names_a_path(str(key)) and not isinstance(value, Mapping | list):
                found.append(value)
            elif _names_a_path(str(key)) and isinstance(value, list):
                for item in value:
                    if isinstance(item, Mapping | list):
                        found.extend(path_arguments(item))
                    else:
                        found.append(item)
            else:
                found.extend(path_arguments(value))
    elif isinstance(arguments, list):
        for item in arguments:
            found.extend(path_arguments(item))
    return found


def _within_range(config: McpServerConfig, value: Any, resolve: Callable[[Any], str]) -> str | None:
    if isinstance(value, str) and "://" in value:
        return f"argument path {value!r}: URIs are refused; give a path inside the workspace"
    try:
        normalize_relative(value)
        path = resolve(value)  # links followed inside the workspace
    except PathRefused as error:
        return f"argument path {value!r}: {error}"
    if any(glob.globmatch(path, g, flags=_FLAGS | glob.IGNORECASE) for g in config.forbidden_paths):
        return f"{path} is in a forbidden path of {config.name}"
    if not any(glob.globmatch(path, g, flags=_FLAGS) for g in config.allowed_paths):
        return f"{path} is outside the allowed paths of {config.name}"
    return None


def in_window(config: McpServerConfig, now: datetime) -> bool:
    if config.window_days and now.weekday() not in config.window_days:
        return False
    if config.window_start is not None and config.window_end is not None:
        moment = now.time().replace(tzinfo=None)
        if config.window_start <= config.window_end:
            return config.window_start <= moment < config.window_end
        return moment >= config.window_start or moment < config.window_end  # over midnight
    return True


def describe_window(config: McpServerConfig) -> str:
    days = ", ".join(DAY_NAMES[d] for d in sorted(config.window_days)) or "any day"
    if config.window_start is None or config.window_end is None:
        return days
    return f"{days} {config.window_start:%H:%M}-{config.window_end:%H:%M} UTC"


def check_mcp_call(
    config: McpServerConfig | None,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    decision: str,
    decision_reason: str,
    calls_this_minute: Callable[[], int],
    now: datetime,
    server_name: str,
    resolve: Callable[[Any], str] = normalize_relative,
) -> McpRefusal | None:
    """The first check that refuses the call, or None when all six pass.

    ``calls_this_minute`` is only asked when the first four checks passed, so refused
    calls never use up the rate limit.
    """
    if config is None or not config.enabled:
        return McpRefusal("whitelist", f"the MCP server {server_name} is not whitelisted")
    if tool not in config.allowed_tools:
        return McpRefusal("tool", f"{tool} is not an allowed tool of {config.name}")
    for value in path_arguments(arguments):
        problem = _within_range(config, value, resolve)
        if problem:
            return McpRefusal("arguments", problem)
    if decision != "allow":
        return McpRefusal("approval", f"{decision}: {decision_reason}")
    if config.rate_limit_per_minute and calls_this_minute() >= config.rate_limit_per_minute:
        return McpRefusal(
            "rate_limit",
            f"{config.name} allows {config.rate_limit_per_minute} "
            "calls a minute; try again in a minute",
        )
    if not in_window(config, now):
        return McpRefusal(
            "change_window",
            f"outside the change window of {config.name} ({describe_window(config)})",
        )
    return None
