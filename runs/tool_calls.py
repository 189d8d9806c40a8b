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
import functools
import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import _Error as JsonSchemaError

from policies.core.instructions import INSTRUCTION_FILE
from policies.core.paths import PathRefused
from policies.core.permissions import Call, Grant, Policy, decide, decide_paths
from policies.core.tool_specs import BUILTIN_TOOLS
from policies.instruction_cache import instructions_invalidate
from policies.models import ToolDefinition, Workspace
from policies.paths import resolve_in_workspace
from policies.permissions import PATH_ARGUMENTS

from .doc_search import search_docs
from .models import Artifact, Run, ToolCall, WriteRecord
from .observability.telemetry import traced_tool_call
from .tools.builtin import unified_diff
from .tools.context import policy_to_context
from .tools.isolation import run_isolated

MAX_RESULT_CHARS = 16_000
TIMING_FIELDS = ("elapsed_ms",)  # measured by the harness, never shown to the model
TRUNCATED = "\n[... truncated: the full output is artifact {artifact} ...]"
BACKOFF_SECONDS = 0.2


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
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    before_run: Callable[[str, dict[str, Any]], tuple[str, str] | None] | None = None,
) -> ToolCall:
    """An MCP tool: the six checks of T12 in order, then the call through the SDK (T11:
    the external call's request id is kept with the output). The pre_tool_use hooks run
    before the checks here (they run together with the call): a halt still stops it."""
    from .mcp_client import mcp_run

    if before_run is not None and (halted := before_run(record.tool, arguments)):
        record.rule, record.reason = halted[0][:63], halted[1]
        return refuse(halted[1], "deny")

    if record.run_id and record.tool_use_id:  # at most once, like the built-in tools
        record.status = "running"
        try:
            with transaction.atomic():
                record.save(force_insert=True)
        except IntegrityError:
            raise ToolCallStarted(f"Tool call {record.tool_use_id} was started already.") from None
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
    return _record(record, reply, transform)


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
    The call's timing is measured apart (the model never sees it), so whether a result is
    cut does not depend on how long the tool took.
    """
    timing = {k: output[k] for k in TIMING_FIELDS if k in output}
    output = {k: v for k, v in output.items() if k not in timing}
    full = json.dumps(output, ensure_ascii=False)
    if len(full) <= MAX_RESULT_CHARS:
        return {**output, **timing}, None
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
    return {**shown, **timing}, full


class ToolCallStarted(Exception):
    """Another worker already started this tool_use; it never runs twice."""


BoundaryCheck = Callable[[str, list[str]], str | None]


@traced_tool_call
def tool_call_run(
    *,
    workspace: Workspace,
    tool: str,
    arguments: Any,
    policy: Policy,
    run: Run | None = None,
    user: Any = None,
    grants: Sequence[Grant] | None = None,
    tool_use_id: str = "",
    hold_asks: bool = False,
    approved_by: Any = None,
    boundary: BoundaryCheck | None = None,
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    before_run: Callable[[str, dict[str, Any]], tuple[str, str] | None] | None = None,
) -> ToolCall:
    """Decide and (if allowed) run one tool call; the returned record says what happened.

    Within a run, the run's active grants apply unless others are given. In a run's loop:
    ``tool_use_id`` makes the call happen at most once (a row marked running is inserted
    before the tool runs, with the bytes of the files it may write); ``hold_asks`` returns
    an unsaved record when the policy asks a person, so the caller can ask one;
    ``approved_by`` is that person's yes for this one call (a deny still wins); and
    ``boundary`` refuses what the task's boundaries exclude (rule ``task-boundary``);
    ``transform`` (the post_tool_use hooks) rewrites the output before anything stores or
    shows it, so a redacted secret reaches neither the model, the page nor an artifact;
    ``before_run`` (the pre_tool_use hooks) runs once the call is allowed, and may still
    refuse it with a (rule, reason).
    """
    if grants is None:
        from .grants import grants_for_run

        grants = grants_for_run(run) if run is not None else ()
    record = ToolCall(
        workspace=workspace,
        run=run,
        tool_use_id=tool_use_id[:200],
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
        return _run_mcp(
            record, definition, workspace, arguments, policy, grants, refuse, transform, before_run
        )
    try:
        paths = _paths(arguments, workspace)
    except PathRefused as error:
        return refuse(str(error))
    record.path = (paths[0] if paths else "")[:1024]
    if boundary is not None and (outside := boundary(tool, paths)):
        record.rule, record.reason = "task-boundary", outside
        return refuse(f"deny: {outside}", "deny")
    side_effect = _side_effect(definition)
    verdict = decide_paths(policy, tool, definition.permission_level, side_effect, paths, grants)
    record.decision, record.rule, record.reason = (
        verdict.decision,
        verdict.rule or "",
        verdict.reason,
    )
    record.human_only = verdict.human_only
    asks = verdict.decision in ("ask", "ask_strong")
    if asks and approved_by is not None:
        who = approved_by.get_username()
        record.decision, record.approved_by = "allow", approved_by
        record.reason = f"{verdict.reason}; approved by {who}"
    elif asks and hold_asks:
        record.status = "ask"
        return record  # unsaved: the caller asks a person
    if record.decision != "allow":
        return refuse(f"{verdict.decision}: {verdict.reason}", verdict.decision)
    if before_run is not None and (halted := before_run(tool, arguments)):
        record.rule, record.reason = halted[0][:63], halted[1]
        return refuse(halted[1], "deny")
    drafts = workspace.drafts_path / (str(run.pk) if run else "adhoc")
    drafts.mkdir(parents=True, exist_ok=True)
    if run is not None and tool_use_id:
        _journal(record, definition, paths, workspace, drafts)
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
    record = _record(record, reply, transform)
    _after_writes(record, workspace)
    return record


def _journal(
    record: ToolCall,
    definition: ToolDefinition,
    paths: list[str],
    workspace: Workspace,
    drafts: Any,
) -> None:
    """Insert the call as running before it runs; a second worker cannot (unique id)."""
    if _side_effect(definition) == "filesystem_write" and _recoverable(definition):
        record.pre_images = {
            f"{area}:{path}": _image(base / path)
            for path in paths
            for area, base in (("workspace", workspace.root_path), ("drafts", drafts))
        }
    record.status = "running"
    try:
        with transaction.atomic():
            record.save(force_insert=True)
    except IntegrityError:
        raise ToolCallStarted(f"Tool call {record.tool_use_id} was started already.") from None


RECOVERABLE_WRITES = frozenset(
    {"createDraft", "patchDraft", "commitDraft", "deleteFile", "renameFile"}
)
MAX_PRE_IMAGE_BYTES = 4 * 1024 * 1024


def _recoverable(definition: ToolDefinition) -> bool:
    return (definition.implementation or definition.name) in RECOVERABLE_WRITES


def _image(path: Any) -> str | None:
    try:
        if not path.is_file():
            return None
        if path.stat().st_size > MAX_PRE_IMAGE_BYTES:
            return "too-large"
        return base64.b64encode(path.read_bytes()).decode()
    except OSError:
        return "unreadable"


def tool_call_recover(*, record: ToolCall) -> str:
    """A call found running after its worker died: did it take effect?

    ``"rerun"``: it had no effect yet (or none it could have), so it may run now — the
    running row is removed first; ``"recovered"``: its writes are on disk, so they are
    recorded from the bytes before and after, exactly once; ``"unknown"``: a call with
    effects we cannot observe (shell, network, publish) is never repeated, and the model
    is told its outcome is unknown.
    """
    definition = ToolDefinition.objects.filter(name=record.tool).first()
    if definition is None or _side_effect(definition) == "none":
        record.delete()
        return "rerun"
    images = record.pre_images or {}
    if not _recoverable(definition) or not images or "too-large" in images.values():
        record.status, record.finished_at = "error", timezone.now()
        record.error = (
            "The worker stopped during this call; its outcome is unknown, so it was not repeated."
        )
        record.output = {"ok": False, "error": record.error, "interrupted": True}
        record.save()
        return "unknown"
    drafts = record.workspace.drafts_path / str(record.run_id)
    changed: list[tuple[str, bytes | None, bytes | None]] = []
    for key, before in images.items():
        area, path = key.split(":", 1)
        base = record.workspace.root_path if area == "workspace" else drafts
        now = _image(base / path)
        if now != before and area == "workspace":
            changed.append((path, _decode(before), _decode(now)))
        elif now != before:
            changed.append(("", None, None))  # a draft changed: the call ran
    if not changed:
        record.delete()
        return "rerun"
    writes = [
        {
            "path": path,
            "before": None if before is None else base64.b64encode(before).decode(),
            "after": None if after is None else base64.b64encode(after).decode(),
        }
        for path, before, after in changed
        if path
    ]
    if definition.implementation == "commitDraft" or record.tool == "commitDraft":
        for path, _, after in changed:
            draft = drafts / path
            if path and draft.is_file() and draft.read_bytes() == after:
                draft.unlink()  # the commit wrote the file but died before removing its draft
    _record(
        record,
        {
            "ok": True,
            "path": record.path,
            "recovered": True,
            "summary": "The call had completed when its worker stopped; recovered from disk.",
            "writes": writes,
        },
    )
    return "recovered"


def _decode(image: str | None) -> bytes | None:
    return None if image is None else base64.b64decode(image)


def _side_effect(definition: ToolDefinition) -> str:
    """A built-in tool's own side effect cannot be weakened in the registry: publishing is a
    production change whatever an admin typed, so it always needs a person."""
    spec = BUILTIN_TOOLS.get(definition.implementation or definition.name)
    if spec is not None and spec.side_effect == "production_change":
        return "production_change"
    return definition.side_effect


def _after_writes(record: ToolCall, workspace: Workspace) -> None:
    """An AGENTS.md written through the console drops the cached instructions (SPEC C6)."""
    written = getattr(record, "written_paths", None)
    if written is None:
        written = [w.path for w in record.writes.all()]
    if any(path.rsplit("/", 1)[-1] == INSTRUCTION_FILE for path in written):
        instructions_invalidate(root=workspace.root)


def _record(
    record: ToolCall,
    reply: dict[str, Any],
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> ToolCall:
    writes = reply.pop("writes", [])
    reply = _clean(reply)
    if transform is not None:
        reply = transform(reply)
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
        record.written_paths = [write["path"] for write in writes]
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
    """Restore the exact bytes from before the call's writes, newest write first."""
    records = list(tool_call.writes.filter(rolled_back_at__isnull=True).order_by("-order"))
    if not records:
        raise RollbackRefused("This call has no writes left to roll back.")
    with transaction.atomic():
        return writes_restore(records=records, workspace=tool_call.workspace, who="this call")


def writes_restore(*, records: Sequence[WriteRecord], workspace: Workspace, who: str) -> list[str]:
    """Put back the before bytes of ``records`` (in the order given), all or nothing.

    Every file must still hold what was written; if any changed since, or now leads outside
    the workspace, nothing is restored (a rollback never destroys work it did not make).
    Call inside a transaction, so the marks roll back with a failure.
    """
    targets = []
    for record in records:
        try:
            target = resolve_in_workspace(workspace.root, record.path).absolute
        except PathRefused as error:
            raise RollbackRefused(f"{record.path} cannot be restored: {error}") from None
        current = target.read_bytes() if target.is_file() else None
        expected = bytes(record.after) if record.after is not None else None
        if current != expected:
            raise RollbackRefused(
                f"{record.path} changed since {who} wrote it; nothing was rolled back."
            )
        targets.append((record, target))
    for record, target in targets:
        if record.before is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(bytes(record.before))
        WriteRecord.objects.filter(pk=record.pk).update(rolled_back_at=timezone.now())
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
        **{k: v for k, v in record.output.items() if k not in TIMING_FIELDS},
    }
    if record.status != "ok":
        output["ok"] = False
        output["error"] = record.error
    output["decision"], output["rule"] = record.decision, record.rule or None
    output["tool_call_id"] = str(record.pk)
    return output
