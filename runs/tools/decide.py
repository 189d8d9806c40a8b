"""Deciding a tool call (SPEC T1, T3, P1–P3, P6), before anything runs.

1. The tool must be in the registry and enabled; its arguments must be a JSON object that
   matches its schema, with no name the console reserves (``_``).
2. A built-in tool's paths are resolved inside the workspace; the task's boundaries and
   then the policy decide. Within a run the shell, which only a task that needs a command
   has in its boundaries, always asks a person to type the command (L3, human only).

The answer is a value: :class:`Refused` (nothing runs; the record says why),
:class:`NeedsApproval` (a person is asked) or :class:`Allowed`. MCP tools are decided by
their own six checks (``mcp_client.mcp_decide``), into the same values.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import _Error as JsonSchemaError

from policies.core.paths import PathRefused
from policies.core.permissions import (
    Grant,
    LimitContext,
    Policy,
    SideEffect,
    Verdict,
    counted_keys,
    decide_paths,
    level_of,
    side_effect_of,
)
from policies.core.tool_specs import BUILTIN_TOOLS, SHELL_TOOL
from policies.models import ToolDefinition, Workspace
from policies.paths import resolve_in_workspace
from policies.permissions import PATH_ARGUMENTS

from .builtin import IMPLEMENTATIONS

# (the built-in a call runs, or a custom tool's name; its paths; its side effect)
BoundaryCheck = Callable[[str, list[str], SideEffect], str | None]


@dataclass(frozen=True)
class Refused:
    """Nothing runs. ``reason`` is what the record and the model are told; ``decision`` is
    empty when the call was refused before any rule was considered (bad input)."""

    reason: str
    decision: str = ""
    rule: str = ""
    path: str = ""
    human_only: bool = False


@dataclass(frozen=True)
class NeedsApproval:
    """The policy asks a person (``ask`` or ``ask_strong``) before this call may run."""

    verdict: Verdict
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Allowed:
    """The call may run: the policy allowed it, or a person approved this very call."""

    decision: str
    rule: str
    reason: str
    paths: tuple[str, ...]
    human_only: bool = False
    approved_by: Any = None
    counted: tuple[str, ...] = ()  # the rate counters it was counted under (counted_keys)


Decided = Refused | NeedsApproval | Allowed


def tool_definition(tool: str, *, for_evals: bool = False) -> ToolDefinition | None:
    """The enabled tool of that name; one of the eval set's own tools only for its runs."""
    tools = ToolDefinition.objects.filter(name=tool, enabled=True)
    return (tools if for_evals else tools.without_evals()).first()


def arguments_refusal(
    definition: ToolDefinition | None, tool: str, arguments: Any
) -> Refused | None:
    """Step 1, for every tool: a known, enabled tool with arguments it declares."""
    if definition is None:
        return Refused(f"There is no enabled tool named {tool!r}.")
    if not isinstance(arguments, dict):
        return Refused("The arguments must be a JSON object.")
    reserved = sorted(key for key in arguments if str(key).startswith("_"))
    if reserved:
        return Refused(f"Argument names starting with _ are reserved: {', '.join(reserved)}.")
    problems = _schema_errors(definition.input_schema, arguments)
    if problems:
        return Refused(f"Bad input for {tool}: {problems}.")
    return None


def builtin_decide(
    *,
    definition: ToolDefinition,
    tool: str,
    arguments: dict[str, Any],
    workspace: Workspace,
    policy: Policy,
    grants: Sequence[Grant],
    boundary: BoundaryCheck | None = None,
    approved_by: Any = None,
    limits: LimitContext | None = None,
) -> Decided:
    """Step 2 for a built-in (or custom) tool: its paths, the task's boundaries, the policy
    with its deciding rule's window and rate (``limits``). ``approved_by`` is a person's
    yes for this one call: it turns an ask into an allow (a deny still wins)."""
    try:
        paths = _paths(arguments, workspace)
    except PathRefused as error:
        return Refused(str(error))
    first = (paths[0] if paths else "")[:1024]
    try:
        runs_as = builtin_of(definition)
    except ValueError as error:
        return Refused(f"deny: {error}", "deny", "implementation", first)
    shell = runs_as == SHELL_TOOL
    effect = side_effect(definition)
    if boundary is not None and (outside := boundary(runs_as or tool, paths, effect)):
        return Refused(f"deny: {outside}", "deny", "task-boundary", first)
    verdict = decide_paths(
        policy, tool, level_of(definition.permission_level), effect, paths, grants, limits
    )
    if shell and boundary is not None:
        verdict = shell_asks(verdict)
    rule = verdict.rule or ""
    asks = verdict.decision in ("ask", "ask_strong")
    if asks and approved_by is not None:
        reason = f"{verdict.reason}; approved by {approved_by.get_username()}"
        return Allowed("allow", rule, reason, tuple(paths), verdict.human_only, approved_by)
    if asks:
        return NeedsApproval(verdict, tuple(paths))
    if verdict.decision != "allow":
        reason = f"{verdict.decision}: {verdict.reason}"
        return Refused(reason, verdict.decision, rule, first, verdict.human_only)
    counted = counted_keys(verdict)
    return Allowed("allow", rule, verdict.reason, tuple(paths), verdict.human_only, None, counted)


def builtin_of(definition: ToolDefinition) -> str | None:
    """The built-in tool a definition runs, whatever it is called: its own name, or a custom
    tool's ``implementation`` naming a built-in (``deleteFile``) or a built-in's function
    (``runs.tools.builtin.files:delete_file``). The boundaries, the shell's typed approval
    and the journal go by this, never by the name an admin gave. None for a custom tool of
    its own; ValueError for one that names any other part of the console's own code."""
    implementation = definition.implementation or definition.name
    if implementation in BUILTIN_TOOLS or implementation in IMPLEMENTATIONS:
        return implementation
    module, _, function = implementation.partition(":")
    for name, builtin in IMPLEMENTATIONS.items():
        if (builtin.__module__, builtin.__name__) == (module, function):
            return name
    if module.split(".")[0] in CONSOLE_PACKAGES:
        raise ValueError(
            f"{definition.name} runs {implementation}, a part of the console itself, not a "
            "tool: an admin gives it a built-in's name or a module of its own"
        )
    return None


CONSOLE_PACKAGES = frozenset({"runs", "approvals", "policies", "evals", "harness_console"})


def is_shell(definition: ToolDefinition) -> bool:
    """The raw shell, under its own name or a custom tool's (``implementation``)."""
    try:
        return builtin_of(definition) == SHELL_TOOL
    except ValueError:
        return False


def shell_asks(verdict: Verdict) -> Verdict:
    """Within a run, the shell (inside the boundaries only of a task that needs a command)
    is an L3 action a person approves by typing the command, every time: whatever the
    policy allows becomes ``ask_strong`` for a person only, no grant standing in. A deny
    stays a deny."""
    if verdict.decision == "deny":
        return verdict
    reason = f"{verdict.reason}; the shell runs only once a person types the command"
    return Verdict("ask_strong", True, verdict.rule, reason, limits=verdict.limits)


def side_effect(definition: ToolDefinition) -> SideEffect:
    """A built-in tool's own side effect cannot be weakened in the registry: publishing is a
    production change whatever an admin typed, so it always needs a person."""
    try:
        spec = BUILTIN_TOOLS.get(builtin_of(definition) or "")
    except ValueError:  # refused before it runs; as strict as can be meanwhile
        return "production_change"
    if spec is not None and spec.side_effect == "production_change":
        return "production_change"
    return side_effect_of(definition.side_effect)


@functools.lru_cache(maxsize=512)
def _validator(schema_json: str) -> Draft202012Validator:
    """Checking a schema costs milliseconds; a tool's schema is checked once per version."""
    schema = json.loads(schema_json)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _schema_errors(schema: dict[str, Any], arguments: Any) -> str:
    """The argument problems, or the schema's own: a broken schema (say, from an MCP server)
    refuses the call instead of raising."""
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
        problems = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
    except (SchemaError, JsonSchemaError, re.error, TypeError, ValueError) as error:
        return f"the tool's input schema is broken ({type(error).__name__}: {error})"
    return "; ".join(
        (f"argument {'.'.join(map(str, e.path))!r}: " if e.path else "") + e.message
        for e in problems[:5]
    )


def _paths(arguments: dict[str, Any], workspace: Workspace) -> list[str]:
    """Resolve every path argument inside the workspace (raises PathRefused)."""
    return [
        resolve_in_workspace(workspace.root, arguments[key]).relative
        for key in PATH_ARGUMENTS
        if key in arguments
    ]
