"""The checks of SPEC T12 at the MCP client layer, in their order, as a pure function.

1. Is the server whitelisted?  2. Is the tool allowed?  3. Are the arguments within range
(every argument declared in the tool's reach, every path it names, resolved against the
server's root, inside an allowed glob and outside every forbidden one, and no whole-root
tool where paths are restricted)?  4. Is an approval
needed (the policy's decision)?  5. Is the rate limit exceeded?  6. Is it inside the change
window? Each refusal names its own check, so an admin knows which setting stopped a call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, get_args

from .mcp_reach import ArgumentKind, ArgumentRefused, ToolReach, names_a_path, reach_paths
from .paths import ROOT, PathRefused
from .permissions import glob_matcher
from .windows import Weekly

Resolve = Callable[[Any], str]

Check = Literal[
    "whitelist", "tool", "arguments", "task_boundary", "approval", "rate_limit", "change_window"
]
WholeRootPolicy = Literal["refuse", "ask"]
WHOLE_ROOT_POLICIES: Final[tuple[WholeRootPolicy, ...]] = get_args(WholeRootPolicy)


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    enabled: bool
    allowed_tools: frozenset[str]
    allowed_paths: tuple[str, ...] = ()
    forbidden_paths: tuple[str, ...] = ()
    rate_limit_per_minute: int = 0  # 0: no limit
    window: Weekly | None = None  # None: any time
    whole_root_tools: WholeRootPolicy = "refuse"  # with forbidden paths: refuse, or ask


@dataclass(frozen=True)
class McpRefusal:
    check: Check
    reason: str


def path_arguments(arguments: Any) -> list[Any]:
    """Values of arguments named like paths, at any depth (``path``, ``filePath``, lists of
    ``paths``, nested objects): what discovery reads to prefill a declaration. The checks
    themselves go by the declaration (:func:`reach_paths`), never by names."""
    found: list[Any] = []
    if isinstance(arguments, Mapping):
        for key, value in arguments.items():
            if names_a_path(str(key)) and not isinstance(value, Mapping | list):
                found.append(value)
            elif names_a_path(str(key)) and isinstance(value, list):
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


def _out_of_range(config: McpServerConfig, kind: ArgumentKind, path: str) -> str | None:
    """Forbidden globs first (case-insensitive, ``X/**`` naming ``X``), then the allowed
    ones."""
    shown = "the root" if path == ROOT else path
    if any(glob_matcher(g, ignore_case=True, forbids=True)(path) for g in config.forbidden_paths):
        return f"{shown} is in a forbidden path of {config.name}"
    if kind == "revision":
        return None  # a ref's name (main, HEAD~1) is no file: only forbidden paths stop it
    if not _allowed(config, path):
        return f"{shown} is outside the allowed paths of {config.name}"
    return None


def _allowed(config: McpServerConfig, path: str) -> bool:
    return any(glob_matcher(g, ignore_case=False)(path) for g in config.allowed_paths)


def _no_entries(path: str) -> Iterable[str]:
    return ()


def _nothing_exists(path: str) -> bool:
    return False


def restricted(config: McpServerConfig) -> bool:
    """Whether the server keeps a tool from part of its root: it forbids paths, or its
    allowed globs do not all name the whole root. Only on an unrestricted server may a
    whole-root tool (a diff, a show) run unasked, or a file have other names (hard links):
    asking only about forbidden paths let ``allowed_paths=["notes/**"]`` diff out ``.env``."""
    whole = bool(config.allowed_paths) and all(g == "**" for g in config.allowed_paths)
    return bool(config.forbidden_paths) or not whole


def arguments_refusal(
    config: McpServerConfig,
    reach: ToolReach,
    arguments: Mapping[str, Any],
    resolve: Resolve,
    entries: Callable[[str], Iterable[str]] = _no_entries,
    exists: Callable[[str], bool] = _nothing_exists,
    changes: bool = False,
) -> str | None:
    """Check 3: every argument declared, every path it names (resolved against the server's
    root) within range, every entry of a tree it covers too (``entries``: what is under a
    folder, links as where they lead), and a whole-root tool only on a server that
    restricts nothing. A tool that ``changes`` things takes a folder it is given along
    whole (a move of ``notes`` moves ``notes/private``): a folder below the root is a tree
    to it. (The root is where a git tool runs, ``repo_path``, not what it moves.)"""
    try:
        named = reach_paths(reach, arguments, resolve, exists)
        for kind, path in named:
            problem = _out_of_range(config, kind, path)
            whole = kind == "tree" or (changes and kind == "path" and path != ROOT)
            for entry in entries(path) if whole and not problem else ():
                if found := _out_of_range(config, "path", entry):
                    problem = f"{path} holds what this tool may not reach: {found}"
                    break
            if problem:
                return problem
    except (ArgumentRefused, PathRefused) as error:
        return str(error)
    if reach.whole_root and restricted(config) and config.whole_root_tools == "refuse":
        return whole_root_reason(config)
    return None


def whole_root_reason(config: McpServerConfig) -> str:
    return (
        f"this tool's output can hold any file of {config.name}'s root, and the server has "
        "forbidden paths or allowed paths narrower than its root"
    )


def check_mcp_call(
    config: McpServerConfig | None,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    reach: ToolReach,
    decision: Callable[[], tuple[str, str]],
    rate_exceeded: Callable[[int], bool],
    now: datetime,
    server_name: str,
    resolve: Resolve,
    entries: Callable[[str], Iterable[str]] = _no_entries,
    exists: Callable[[str], bool] = _nothing_exists,
    changes: bool = False,
    approved: bool = False,
    boundary: Callable[[], str | None] = lambda: None,
) -> McpRefusal | None:
    """The first check that refuses the call, or None when all six pass.

    ``decision`` is the policy's, with its reason: asked only of a call checks 1 to 3 and
    the task's boundaries let through, so the deciding rule's own rate limit counts no
    call they refuse.

    ``resolve`` is the server's: a path against its root, links followed; ``changes``: the
    tool has a side effect. A whole-root tool on a restricted server that is set to ask
    needs a person (check 4), unless one ``approved`` this very call. ``boundary`` is the
    run's task (between checks 3 and 4, like a policy of its own): what it refuses never
    reaches the approval or the rate.
    ``rate_exceeded`` (given the limit: whether the calls of the last sixty seconds reach
    it; when they do not, this call is counted) is only asked when the first four checks
    passed, so refused calls never use up the rate limit.
    """
    if config is None or not config.enabled:
        return McpRefusal("whitelist", f"the MCP server {server_name} is not whitelisted")
    if tool not in config.allowed_tools:
        return McpRefusal("tool", f"{tool} is not an allowed tool of {config.name}")
    problem = arguments_refusal(config, reach, arguments, resolve, entries, exists, changes)
    if problem:
        return McpRefusal("arguments", problem)
    if outside := boundary():
        return McpRefusal("task_boundary", outside)
    decided, decided_reason = decision()
    if decided == "allow" and reach.whole_root and restricted(config) and not approved:
        decided, decided_reason = "ask", whole_root_reason(config)
    if decided != "allow":
        return McpRefusal("approval", f"{decided}: {decided_reason}")
    if config.rate_limit_per_minute and rate_exceeded(config.rate_limit_per_minute):
        return McpRefusal(
            "rate_limit",
            f"{config.name} allows {config.rate_limit_per_minute} "
            "calls a minute; try again in a minute",
        )
    if config.window is not None and not config.window.holds(now):
        return McpRefusal(
            "change_window",
            f"outside the change window of {config.name} ({config.window.name})",
        )
    return None
