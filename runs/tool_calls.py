"""Running a tool call: validate, decide, execute in isolation, truncate, record (SPEC T3–T8,
P6, R8). One service, ``tool_call_run``, used by runs and by ``manage.py call_tool``.

1. The tool must be in the registry and enabled; its arguments must match its schema.
2. Its path is resolved inside the workspace and the policy decides (nothing runs unless
   the decision is allow; asking a person is the approvals' job).
3. It runs in a child process under its timeout, retried with backoff only for failures
   the tool marks retryable.
4. A result too large for the context is truncated with a marker; the full output is kept
   as an artifact.
5. Every write is kept with its before and after bytes, its diff and its rollback.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import _Error as JsonSchemaError

from policies.core.instructions import INSTRUCTION_FILE
from policies.core.paths import PathRefused
from policies.core.permissions import Call, Grant, Policy, decide, decide_paths
from policies.core.tool_specs import BUILTIN_TOOLS
from policies.instruction_cache import instructions_invalidate
from policies.models import ToolDefinition
from policies.paths import resolve_in_workspace
from policies.permissions import PATH_ARGUMENTS

from .doc_search import search_docs
from .models import Artifact, Run, ToolCall, Workspace, WriteRecord
from .tools.builtin import unified_diff
from .tools.context import policy_to_context
from .tools.isolation import run_isolated

MAX_RESULT_CHARS = 16_000
TRUNCATED = "\n[... truncated: the full output is artifact {artifact} ...]"
BACKOFF_SECONDS = 0.2


def _schema_errors(schema: dict[str, Any], arguments: Any) -> str:
    """The argument problems, or the schema's own: a broken schema (say, from an MCP server)
    refuses the call instead of raising."""
    try:
        Draft202012Validator.check_schema(schema)
        validator = Draft202012Validator(schema)
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


def _execute(
    definition: ToolDefinition,
    workspace: Workspace,
    drafts: str,
    arguments: dict[str, Any],
    context: dict[str, Any],
) -> tuple[dict[str, Any], int]:
    attempts = 0
    while True:
        attempts += 1
        reply = run_isolated(
            impl=definition.implementation or definition.name,
            root=workspace.root,
            drafts=drafts,
            args=arguments,
            timeout=float(definition.timeout_sec),
            context=context,
        )
        if reply.get("ok") or not reply.get("retryable") or attempts > definition.retry:
            return reply, attempts
        time.sleep(BACKOFF_SECONDS * 2 ** (attempts - 1))


def _search_docs(
    workspace: Workspace, arguments: dict[str, Any], policy: Policy, grants: Sequence[Grant]
) -> dict[str, Any]:
    """Runs in the console's process: it reads the database's index, bounded by its limit."""

    def readable(path: str) -> bool:
        call = Call("readSource", "L1", "none", path)
        return decide(policy, call, grants).decision != "deny"

    return search_docs(workspace, arguments["query"], readable=readable)


IN_PROCESS = {"searchDocs": _search_docs}


def _run_mcp(
    record: ToolCall,
    definition: ToolDefinition,
    workspace: Workspace,
    arguments: dict[str, Any],
    policy: Policy,
    grants: Sequence[Grant],
    refuse: Any,
) -> ToolCall:
    """An MCP tool: the six checks of T12 in order, then the call through the SDK (T11:
    the external call's request id is kept with the output)."""
    from .mcp_client import mcp_run

    facts, reply = mcp_run(
        definition=definition,
        workspace=workspace,
        arguments=arguments,
        policy=policy,
        grants=grants,
        now=timezone.now(),
    )
    record.decision, record.rule, record.reason = facts["decision"], facts["rule"], facts["reason"]
    record.human_only, record.path = facts["human_only"], facts["path"]
    if "refused" in facts:
        record.decision = record.decision if facts["refused"].startswith("approval") else "deny"
        return refuse(facts["refused"], record.decision)
    record.attempts = 1
    return _record(record, reply)


def _clean(value: Any) -> Any:
    """NUL cannot be stored in PostgreSQL text or JSON: replace it, everywhere."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_clean(item) for item in value]
    if isinstance(value, dict):
        return {_clean(key): _clean(item) for key, item in value.items()}
    return value


def _truncate(output: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The output as the model may see it, and the full text when it had to be cut.

    Long strings are cut and long lists shortened, largest first, until the whole fits.
    """
    full = json.dumps(output, ensure_ascii=False)
    if len(full) <= MAX_RESULT_CHARS:
        return output, None
    shown = dict(output)
    budget = MAX_RESULT_CHARS // 2
    for key in sorted(shown, key=lambda k: -len(json.dumps(shown[k], ensure_ascii=False))):
        if len(json.dumps(shown, ensure_ascii=False)) <= MAX_RESULT_CHARS:
            break
        value = shown[key]
        if isinstance(value, str) and len(value) > 200:
            shown[key] = value[:budget]
        elif isinstance(value, list) and len(value) > 1:
            kept: list[Any] = []
            for item in value:
                if len(json.dumps([*kept, item], ensure_ascii=False)) > budget:
                    break
                kept.append(item)
            shown[key] = kept
        budget = max(200, budget // 2)
    return shown, full


def tool_call_run(
    *,
    workspace: Workspace,
    tool: str,
    arguments: Any,
    policy: Policy,
    run: Run | None = None,
    user: Any = None,
    grants: Sequence[Grant] | None = None,
) -> ToolCall:
    """Decide and (if allowed) run one tool call; the returned record says what happened.

    Within a run, the run's active grants apply unless others are given.
    """
    if grants is None:
        from .grants import grants_for_run

        grants = grants_for_run(run) if run is not None else ()
    record = ToolCall(
        workspace=workspace,
        run=run,
        tool=tool[:120],
        arguments=arguments if isinstance(arguments, dict) else {"_": arguments},
        policy_name=policy.name,
        policy_version=policy.version,
        requested_by=user if getattr(user, "pk", None) else None,
    )

    def refuse(reason: str, decision: str = "") -> ToolCall:  # "": refused before deciding
        record.decision, record.reason, record.status = decision, reason, "refused"
        record.error = reason
        record.finished_at = timezone.now()
        record.save()
        return record

    definition = ToolDefinition.objects.filter(name=tool, enabled=True).first()
    if definition is None:
        return refuse(f"There is no enabled tool named {tool!r}.")
    if not isinstance(arguments, dict):
        return refuse("The arguments must be a JSON object.")
    reserved = sorted(key for key in arguments if str(key).startswith("_"))
    if reserved:
        return refuse(f"Argument names starting with _ are reserved: {', '.join(reserved)}.")
    problems = _schema_errors(definition.input_schema, arguments)
    if problems:
        return refuse(f"Bad input for {tool}: {problems}.")
    if definition.source == "mcp":
        return _run_mcp(record, definition, workspace, arguments, policy, grants, refuse)
    try:
        paths = _paths(arguments, workspace)
    except PathRefused as error:
        return refuse(str(error))
    record.path = (paths[0] if paths else "")[:1024]
    side_effect = _side_effect(definition)
    verdict = decide_paths(policy, tool, definition.permission_level, side_effect, paths, grants)
    record.decision, record.rule, record.reason = (
        verdict.decision,
        verdict.rule or "",
        verdict.reason,
    )
    record.human_only = verdict.human_only
    if verdict.decision != "allow":
        return refuse(f"{verdict.decision}: {verdict.reason}", verdict.decision)
    drafts = workspace.drafts_path / (str(run.pk) if run else "adhoc")
    drafts.mkdir(parents=True, exist_ok=True)
    context = {
        "policy": policy_to_context(policy),
        "tool": {"name": tool, "level": definition.permission_level, "side_effect": side_effect},
        "grants": [[g.tool, g.path, g.granted_by] for g in grants],
        "decided": {
            key: resolved
            for key, resolved in zip(
                [k for k in PATH_ARGUMENTS if k in arguments], paths, strict=True
            )
        },
        "sandbox": {"allow_unsandboxed": workspace.allow_unsandboxed_shell},
        "publish_root": workspace.publish_root,
    }
    if tool in IN_PROCESS:
        reply, record.attempts = IN_PROCESS[tool](workspace, arguments, policy, grants), 1
    else:
        reply, record.attempts = _execute(definition, workspace, str(drafts), arguments, context)
    record = _record(record, reply)
    _after_writes(record, workspace)
    return record


def _side_effect(definition: ToolDefinition) -> str:
    """A built-in tool's own side effect cannot be weakened in the registry: publishing is a
    production change whatever an admin typed, so it always needs a person."""
    spec = BUILTIN_TOOLS.get(definition.implementation or definition.name)
    if spec is not None and spec.side_effect == "production_change":
        return "production_change"
    return definition.side_effect


def _after_writes(record: ToolCall, workspace: Workspace) -> None:
    """An AGENTS.md written through the console drops the cached instructions (SPEC C6)."""
    if any(w.path.rsplit("/", 1)[-1] == INSTRUCTION_FILE for w in record.writes.all()):
        instructions_invalidate(root=workspace.root)


def _record(record: ToolCall, reply: dict[str, Any]) -> ToolCall:
    writes = reply.pop("writes", [])
    reply = _clean(reply)
    record.status = "ok" if reply.get("ok") else ("timeout" if reply.get("timed_out") else "error")
    record.error = "" if reply.get("ok") else str(reply.get("error", "failed"))
    shown, full = _truncate(reply)
    record.finished_at = timezone.now()
    with transaction.atomic():
        record.output = shown
        record.save()
        if full is not None:
            artifact = Artifact.objects.create(
                tool_call=record,
                content=full,
                size=len(full.encode()),
                sha256=hashlib.sha256(full.encode()).hexdigest(),
            )
            marker = TRUNCATED.format(artifact=artifact.pk)
            for key in ("content", "diff", "stderr"):
                if isinstance(shown.get(key), str) and len(shown[key]) < len(str(reply[key])):
                    shown[key] += marker
            shown["artifact_id"] = str(artifact.pk)
            shown.setdefault("warnings", []).append(
                f"The output was truncated; the full output is artifact {artifact.pk}."
            )
            record.output = shown
            record.save(update_fields=["output"])
        for order, write in enumerate(writes):
            before = base64.b64decode(write["before"]) if write["before"] is not None else None
            after = base64.b64decode(write["after"]) if write["after"] is not None else None
            WriteRecord.objects.create(
                tool_call=record,
                order=order,
                path=write["path"],
                before=before,
                after=after,
                diff=unified_diff(before, after, write["path"]),  # describes binary content
                rollback={"action": "restore_before", "path": write["path"]},
            )
    return record


class RollbackRefused(Exception):
    """A rollback that would destroy a later change; nothing was rolled back."""


def tool_call_rollback(*, tool_call: ToolCall) -> list[str]:
    """Restore the exact bytes from before the call's writes, newest write first.

    Every file must still hold what the call wrote; if any changed since, nothing is
    restored (a rollback never destroys work it did not make).
    """
    records = list(tool_call.writes.filter(rolled_back_at__isnull=True).order_by("-order"))
    if not records:
        raise RollbackRefused("This call has no writes left to roll back.")
    workspace = tool_call.workspace
    targets = []
    for record in records:
        target = resolve_in_workspace(workspace.root, record.path).absolute
        current = target.read_bytes() if target.exists() else None
        expected = bytes(record.after) if record.after is not None else None
        if current != expected:
            raise RollbackRefused(
                f"{record.path} changed since this call wrote it; nothing was rolled back."
            )
        targets.append((record, target))
    with transaction.atomic():
        for record, target in targets:
            if record.before is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(bytes(record.before))
            record.rolled_back_at = timezone.now()
            record.save(update_fields=["rolled_back_at"])
    return [record.path for record, _ in targets]


def tool_output(record: ToolCall) -> dict[str, Any]:
    """The shape of SPEC T4: {ok, artifact_id, summary, path, diff, warnings} and the rest."""
    output = {
        "ok": record.status == "ok",
        "artifact_id": None,
        "summary": "",
        "path": record.path or None,
        "diff": None,
        "warnings": [],
        **{k: v for k, v in record.output.items() if k not in ("elapsed_ms",)},
    }
    if record.status != "ok":
        output["ok"] = False
        output["error"] = record.error
    output["decision"], output["rule"] = record.decision, record.rule or None
    output["tool_call_id"] = str(record.pk)
    return output
