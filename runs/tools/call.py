"""A tool call's one door (SPEC T3–T8, T12, P6, R8): ``tool_call_run`` decides, runs and
records every call, the model's and the harness's, built-in and MCP, and so does
``manage.py call_tool``.

1. Decide (``decide.py``): a known tool with arguments it declares, then its paths, the
   task's boundaries and the policy — or, for an MCP tool, the six checks of T12
   (``mcp_client.mcp_decide``). Nothing runs unless the answer is Allowed; asking a person
   is the approvals' job.
2. The pre_tool_use hooks may still refuse an allowed call.
3. Journal (``journal.py``): within a run, the call is inserted as running, with the bytes
   of the files it may write, before it runs: at most once per tool_use.
4. Execute (``execute.py``): in a child process under its timeout, retried with backoff
   only for failures the tool marks retryable; MCP tools through the SDK.
5. Record (``record.py``): the output as the model may see it (truncated with a marker,
   the full output an artifact), every write with its before and after bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from policies.core.permissions import Grant, LimitContext, Policy, counted_keys
from policies.models import ToolDefinition, Workspace
from policies.permissions import PATH_ARGUMENTS
from policies.rate_limits import limit_context

from ..grants import grants_for_run
from ..models import Run, ToolCall
from ..observability.telemetry import traced_tool_call
from .decide import (
    Allowed,
    BoundaryCheck,
    NeedsApproval,
    Refused,
    arguments_refusal,
    builtin_decide,
    side_effect,
    tool_definition,
)
from .effects import effects_applied
from .execute import child_context_build, execute
from .journal import journal_open
from .mcp_client import mcp_call, mcp_decide
from .record import Insert, instructions_after_writes, tool_call_record, tool_reply_transformed

Transform = Callable[[dict[str, Any]], dict[str, Any]]
BeforeRun = Callable[[str, dict[str, Any]], tuple[str, str] | None]
Fence = Callable[[], AbstractContextManager[Any]]
Recorded = Callable[[ToolCall], None]


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
    transform: Transform | None = None,
    before_run: BeforeRun | None = None,
    fence: Fence = transaction.atomic,
    recorded: Recorded | None = None,
    definition_of: Callable[[str], ToolDefinition | None] | None = None,
    defer: Insert | None = None,
    flush: Callable[[], None] | None = None,
) -> ToolCall:
    """Decide and (if allowed) run one tool call; the returned record says what happened.

    The run's active grants apply unless others are given. ``tool_use_id``: at most once
    (a call that may change something is inserted as running first, with the bytes of the
    files it may write); ``hold_asks``: an ask comes back unsaved, for the caller to ask a
    person; ``approved_by``: that person's yes (a deny still wins); ``boundary``: the
    task's boundaries (rule ``task-boundary``); ``transform``: the post_tool_use hooks,
    before anything stores or shows the output; ``before_run``: the pre_tool_use hooks,
    which may still refuse with a (rule, reason); ``fence``: the transaction that journals
    and records the call with its effects (a lost lease raises ``LeaseLost`` there);
    ``recorded``: called with the record in it; ``definition_of``: the tool's definition;
    ``defer``: the fence's own rows (a run's checkpoint): a call with nothing for the files
    hands its new record and ``recorded``'s writes over before the fence, and the fence's
    one transaction writes them all; ``flush``: writes what was handed over, instead of the
    fence with nothing in it (a run's checkpoint: on PostgreSQL in one statement).
    """
    grants = grants if grants is not None else grants_for_run(run) if run is not None else ()
    record = _record(workspace, run, tool, tool_use_id, arguments, policy, user)
    if definition_of is None:
        definition_of = partial(tool_definition, for_evals=run is not None and run.agent.for_evals)
    definition = definition_of(tool)
    final = _Final(fence, recorded, defer if recorded is not None else None, flush)
    if refused := arguments_refusal(definition, tool, arguments):
        return _refuse(record, refused, final)
    assert definition is not None and isinstance(arguments, dict)
    limits = _limits(run, workspace, approved_by)
    if definition.source == "mcp":
        return _mcp(
            record,
            definition,
            workspace,
            arguments,
            policy,
            grants,
            transform,
            before_run,
            final=final,
            limits=limits,
            hold_asks=hold_asks,
            approved_by=approved_by,
        )
    return _builtin(
        record,
        tool,
        definition,
        workspace,
        arguments,
        policy,
        grants,
        run=run,
        tool_use_id=tool_use_id,
        hold_asks=hold_asks,
        approved_by=approved_by,
        boundary=boundary,
        transform=transform,
        before_run=before_run,
        final=final,
        limits=limits,
    )


def _record(
    workspace: Workspace,
    run: Run | None,
    tool: str,
    tool_use_id: str,
    arguments: Any,
    policy: Policy,
    user: Any,
) -> ToolCall:
    """The call's record, unsaved: who asked for what, under which policy version."""
    return ToolCall(
        workspace=workspace,
        run=run,
        tool_use_id=tool_use_id[:200],
        tool=tool[:120],
        arguments=arguments if isinstance(arguments, dict) else {"_": arguments},
        policy_name=policy.name,
        policy_version=policy.version,
        requested_by=user if getattr(user, "pk", None) else None,
    )


def _limits(run: Run | None, workspace: Workspace, approved_by: Any) -> LimitContext:
    """The deciding rule's window and rate are counted per this run, its agent and its
    workspace; a call a person approved was counted when it was asked."""
    return limit_context(
        now=timezone.now(),
        run_id=run.pk if run is not None else None,
        agent_id=run.agent_id if run is not None else None,
        workspace_id=workspace.pk,
        counted=approved_by is None,
    )


class _Final:
    """The call's fence, and what the caller writes with the finished record in the same
    transaction (``recorded``); ``defer``: the fence inserts rows handed to it."""

    def __init__(
        self,
        fence: Fence,
        recorded: Recorded | None,
        defer: Insert | None,
        flush: Callable[[], None] | None = None,
    ) -> None:
        self.fence, self.recorded, self.defer, self.flush = fence, recorded, defer, flush

    @contextmanager
    def recording(self, record: ToolCall) -> Iterator[None]:
        with self.fence():
            yield
            if self.recorded is not None:
                self.recorded(record)

    def holds(self, record: ToolCall, reply: dict[str, Any] | None = None) -> bool:
        """Whether the record can be handed to the fence rather than written in it: a new
        record (not journalled) whose reply has nothing for the files."""
        return self.defer is not None and record._state.adding and not (reply or {}).get("effects")

    def held(self, record: ToolCall) -> None:
        """The record and the caller's writes are the fence's rows; then the fence (or the
        caller's ``flush``): its one transaction checks the lease and writes them all, or
        none."""
        assert self.recorded is not None
        self.recorded(record)
        if self.flush is not None:
            self.flush()
            return
        with self.fence():
            pass


def _builtin(
    record: ToolCall,
    tool: str,
    definition: ToolDefinition,
    workspace: Workspace,
    arguments: dict[str, Any],
    policy: Policy,
    grants: Sequence[Grant],
    *,
    run: Run | None,
    tool_use_id: str,
    hold_asks: bool,
    approved_by: Any,
    boundary: BoundaryCheck | None,
    transform: Transform | None,
    before_run: BeforeRun | None,
    final: _Final,
    limits: LimitContext,
) -> ToolCall:
    """A built-in (or custom) tool: decided by its paths, the boundaries and the policy;
    an ask is handed back unsaved (``hold_asks``) or refused; an allowed call runs in a
    child process, journalled first within a run, and its effects reach the files only with
    its record, under the fence."""
    decided = builtin_decide(
        definition=definition,
        tool=tool,
        arguments=arguments,
        workspace=workspace,
        policy=policy,
        grants=grants,
        boundary=boundary,
        approved_by=approved_by,
        limits=limits,
    )
    if isinstance(decided, NeedsApproval):
        return _asked(record, decided, hold_asks=hold_asks, final=final, limits=limits)
    if isinstance(decided, Refused):
        return _refuse(record, decided, final)
    _allow(record, decided)
    if before_run is not None and (halted := before_run(tool, arguments)):
        _give_back(limits, decided.counted)  # a hook refused it: it used none of a rate
        return _refuse(record, Refused(halted[1], "deny", halted[0][:63]), final)
    drafts = workspace.drafts_path / (str(run.pk) if run else "adhoc")
    drafts.mkdir(parents=True, exist_ok=True)
    # At most once is about effects: a call that changes nothing is journalled with its
    # result (run again after a crash, it does no harm), one that may is journalled first.
    if run is not None and tool_use_id and side_effect(definition) != "none":
        journal_open(record, definition, decided.paths, workspace, drafts, fence=final.fence)
    keys = [k for k in PATH_ARGUMENTS if k in arguments]
    context = child_context_build(
        tool=tool,
        definition=definition,
        side_effect=side_effect(definition),
        policy=policy,
        grants=grants,
        decided=dict(zip(keys, decided.paths, strict=True)),
        workspace=workspace,
    )
    reply, record.attempts = execute(
        tool=tool,
        definition=definition,
        workspace=workspace,
        drafts=drafts,
        arguments=arguments,
        policy=policy,
        grants=grants,
        context=context,
    )
    reply = tool_reply_transformed(reply, transform)
    return _recorded(record, reply, definition, workspace, drafts, final)


def _recorded(
    record: ToolCall,
    reply: dict[str, Any],
    definition: ToolDefinition,
    workspace: Workspace,
    drafts: Any,
    final: _Final,
) -> ToolCall:
    """A built-in call's result: with nothing for the files, handed to the fence's one
    checkpoint; else its effects applied and recorded under the fence, after its check."""
    if final.holds(record, reply):
        assert final.defer is not None
        record = tool_call_record(record, reply, insert=final.defer)
        final.held(record)
        return record
    with final.recording(record):
        reply = effects_applied(
            reply,
            may_write=side_effect(definition) == "filesystem_write",
            root=workspace.root_path,
            drafts=drafts,
        )
        record = tool_call_record(record, reply)
    instructions_after_writes(record, workspace)
    return record


def _mcp(
    record: ToolCall,
    definition: ToolDefinition,
    workspace: Workspace,
    arguments: dict[str, Any],
    policy: Policy,
    grants: Sequence[Grant],
    transform: Transform | None,
    before_run: BeforeRun | None,
    *,
    final: _Final,
    limits: LimitContext,
    hold_asks: bool = False,
    approved_by: Any = None,
) -> ToolCall:
    """An MCP tool: the six checks of T12 in order, then the call through the SDK (T11:
    the external call's request id is kept with the output). The pre_tool_use hooks run
    before the checks here (they run together with the call): a halt still stops it. A
    whole-root tool its server sets to ask is handed back unsaved (``hold_asks``) before
    anything is journalled, like a built-in tool's ask; ``approved_by`` is the yes."""
    if before_run is not None and (halted := before_run(record.tool, arguments)):
        return _refuse(record, Refused(halted[1], "deny", halted[0][:63]), final)
    now = limits.now
    server, decided = mcp_decide(
        definition=definition,
        workspace=workspace,
        arguments=arguments,
        policy=policy,
        grants=grants,
        now=now,
        limits=limits,
        task=(record.run.task or {}) if record.run is not None else None,  # its boundaries
        approved_by=approved_by,
    )
    if isinstance(decided, NeedsApproval):
        return _asked(record, decided, hold_asks=hold_asks, final=final, limits=limits)
    if record.run_id and record.tool_use_id:  # at most once, like the built-in tools
        journal_open(record, definition, fence=final.fence)
    if isinstance(decided, Refused):
        return _refuse(record, decided, final)
    _allow(record, decided)
    assert server is not None
    record.attempts = 1
    reply = mcp_call(
        server=server, definition=definition, arguments=arguments, workspace=workspace, now=now
    )
    reply = tool_reply_transformed(reply, transform)
    with final.recording(record):
        return tool_call_record(record, reply)


def _asked(
    record: ToolCall,
    decided: NeedsApproval,
    *,
    hold_asks: bool,
    final: _Final,
    limits: LimitContext | None = None,
) -> ToolCall:
    """A call a person must approve: handed back unsaved for the caller to ask one
    (``hold_asks``), else refused, since nobody is there to ask (and then it gives back
    what its rule's rate counted: an ask put to nobody uses none of it)."""
    verdict = decided.verdict
    record.path = (decided.paths[0] if decided.paths else "")[:1024]
    record.decision, record.rule, record.reason = (
        verdict.decision,
        verdict.rule or "",
        verdict.reason,
    )
    record.human_only = verdict.human_only
    if hold_asks:
        record.status = "ask"
        return record  # unsaved: the caller asks a person
    if limits is not None:
        _give_back(limits, counted_keys(verdict))
    reason = f"{verdict.decision}: {verdict.reason}"
    return _refuse(
        record,
        Refused(reason, verdict.decision, verdict.rule or "", record.path, verdict.human_only),
        final,
    )


def _give_back(limits: LimitContext, keys: Sequence[str]) -> None:
    if limits.rate_release is not None:
        for key in keys:
            limits.rate_release(key)


def _allow(record: ToolCall, allowed: Allowed) -> None:
    record.decision, record.rule, record.reason = allowed.decision, allowed.rule, allowed.reason
    record.human_only = allowed.human_only
    record.path = (allowed.paths[0] if allowed.paths else "")[:1024]
    if allowed.approved_by is not None:
        record.approved_by = allowed.approved_by


def _refuse(record: ToolCall, refused: Refused, final: _Final) -> ToolCall:
    """Every refusal is recorded too (SPEC P6): who asked for what, and why not; under the
    run's fence, like every record, so a worker that lost the run writes none."""
    if refused.rule:
        record.rule = refused.rule
    if refused.path:
        record.path = refused.path
    record.human_only = record.human_only or refused.human_only
    record.decision, record.reason, record.status = refused.decision, refused.reason, "refused"
    record.error = refused.reason
    record.finished_at = timezone.now()
    if final.holds(record):
        assert final.defer is not None
        final.defer(record)
        final.held(record)
        return record
    with final.recording(record):
        record.save()
    return record
