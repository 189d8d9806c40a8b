"""Historical failures into the eval set (SPEC E1, issue point 4): a failed run's recorded
model turns, its request, its agent and its workspace as the run found it become a replay
case, with the expectation an operator writes.

The case is built as the very JSON object a case file holds and validated by
``evals.core.parsing.case_parse``, so the suite runs a console case exactly as it runs a file.
The workspace is a snapshot of the run's folder with every file the run wrote put back to
its bytes from before the run; files the agent's policy denies reading keep only a
placeholder, so a secret's bytes never reach the database.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.models import ApprovalRequest
from policies.core.default_policy import DEFAULT_POLICY, DEFAULT_POLICY_NAME
from policies.core.hook_redaction import DEFAULT_REDACTOR
from policies.core.permissions import (
    Policy,
    PolicyError,
    Rule,
    decide_paths,
    level_of,
    side_effect_of,
)
from policies.core.tool_specs import BUILTIN_TOOLS
from policies.models import ToolDefinition
from policies.permissions import policy_for_agent
from runs.core import status as run_status
from runs.events import run_event_append
from runs.models import ModelCall, Run, WriteRecord

from .core.cases import NAME_RE, CaseError
from .core.parsing import case_parse
from .loading import cases_load, console_source
from .models import EvalCase

CATEGORY: Final = "historical"
ADDABLE: Final = frozenset({run_status.FAILED, run_status.ROLLED_BACK})
MAX_FILE_BYTES: Final = 1024 * 1024
MAX_FILES: Final = 2_000
MAX_TOTAL_BYTES: Final = 20 * 1024 * 1024
SKIPPED_DIRS: Final = frozenset({".git"})
READ_TOOL: Final = "readSource"
REASON_PREFILL: Final = 100
NO_TURNS: Final = "This run has no recorded model turns, so there is nothing to replay."


class EvalCaseRefused(Exception):
    """The run cannot become a case as asked; nothing was saved. ``field`` names the form
    field at fault (None: the run itself)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class Snapshot:
    files: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # binary or too large: left out
    redacted: list[str] = field(default_factory=list)  # a key-like text replaced inside


# --- what the run was ----------------------------------------------------------------------
def eval_case_refusal(run: Run) -> str:
    """Why this run cannot become a case, or "" when it can (the form says it upfront)."""
    if run.status not in ADDABLE:
        return (
            f"Only a failed or rolled-back run can be added to the eval set; this one is "
            f"{run.get_status_display()}."
        )
    if run.agent.for_evals:
        case = run.eval_results.values_list("case", flat=True).first()
        return (
            f"This run is the eval set's own (case {case or 'unknown'}); that case is in the "
            "set already."
        )
    if not run.messages.filter(kind="assistant").exists():
        return NO_TURNS
    return ""


def recorded_turns(run: Run) -> list[dict[str, Any]]:
    """The run's model turns as a replay plays them: each assistant message's content
    blocks in order, with the stop reason its model call recorded (a turn whose call row
    is missing stops as its content says)."""
    stops = dict(ModelCall.objects.filter(run=run).values_list("turn", "stop_reason"))
    turns = []
    for turn, content in (
        run.messages.filter(kind="assistant").order_by("index").values_list("turn", "content")
    ):
        blocks = content if isinstance(content, list) else [{"type": "text", "text": str(content)}]
        uses_tool = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks)
        stop = stops.get(turn) or ("tool_use" if uses_tool else "end_turn")
        turns.append({"stop_reason": stop, "content": blocks})
    return turns


def pre_run_contents(run: Run) -> dict[str, bytes | None]:
    """Each path the run wrote, with its bytes before the run's first write to it (None:
    the file did not exist)."""
    before: dict[str, bytes | None] = {}
    records = WriteRecord.objects.filter(tool_call__run=run).order_by("created_at", "pk")
    for path, data in records.values_list("path", "before"):
        if path not in before:
            before[path] = None if data is None else bytes(data)
    return before


# The default policy's deny rules (secrets, git internals), applied to every snapshot.
ALWAYS_WITHHELD: Final = Policy(
    "always-withheld",
    "L3",
    (
        *(rule for rule in DEFAULT_POLICY.rules if rule.decision == "deny"),
        Rule("rest", "*", "allow", "", "not a secret"),
    ),
)


def secret_test(run: Run) -> Callable[[str], bool]:
    """Whether the agent's policy, or the default policy's secret and git rules, deny
    reading a path: such a file is a secret of the case, withheld whatever the agent's
    policy says (its placeholder is a canary the judge looks for in what the model saw)."""
    try:
        policy = policy_for_agent(run.agent)
    except PolicyError as error:
        raise EvalCaseRefused(f"The agent's policy cannot be read: {error}") from None
    registered = ToolDefinition.objects.filter(name=READ_TOOL).first()
    spec = BUILTIN_TOOLS[READ_TOOL]
    level = level_of(registered.permission_level) if registered else spec.level
    side_effect = side_effect_of(registered.side_effect) if registered else spec.side_effect

    def denied(path: str) -> bool:
        return any(
            decide_paths(p, READ_TOOL, level, side_effect, [path]).decision == "deny"
            for p in (policy, ALWAYS_WITHHELD)
        )

    return denied


def placeholder(path: str) -> str:
    return f"eval placeholder for the secret {path}: its real text was not copied\n"


# --- the workspace as the run found it -----------------------------------------------------
def _text(data: bytes) -> str | None:
    if len(data) > MAX_FILE_BYTES or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _walk(root: Path) -> list[tuple[str, Path]]:
    """Every regular file under ``root`` (links are not followed: a link may lead out of
    the workspace), by relative POSIX path, without git internals."""
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(folder) / name
            relative = path.relative_to(root).as_posix()
            if name in SKIPPED_DIRS or path.is_symlink() or not path.is_file():
                continue
            try:
                relative.encode("utf-8")
            except UnicodeEncodeError:  # a name JSON cannot hold
                continue
            found.append((relative, path))
    return found


def _check_limits(snapshot: Snapshot) -> None:
    count = len(snapshot.files) + len(snapshot.secrets)
    if count > MAX_FILES:
        raise EvalCaseRefused(
            f"The workspace has more than {MAX_FILES:,} text files; an eval case holds at "
            "most that many. Make a smaller case by hand in evals/cases/historical/."
        )
    total = sum(
        len(t.encode("utf-8")) for m in (snapshot.files, snapshot.secrets) for t in m.values()
    )
    if total > MAX_TOTAL_BYTES:
        raise EvalCaseRefused(
            f"The workspace's text files hold more than {MAX_TOTAL_BYTES // (1024 * 1024)} MB; "
            "an eval case holds at most that. Make a smaller case by hand in "
            "evals/cases/historical/."
        )


def workspace_snapshot(
    *, root: Path, before: Mapping[str, bytes | None], is_secret: Callable[[str], bool]
) -> Snapshot:
    """The text files under ``root`` as they were before the run.

    1. Read the current files (binary files and files over 1 MB are left out); a file the
       policy denies reading gets a placeholder, its bytes are never read.
    2. Put back each file the run wrote to its bytes from before the run; one that did not
       exist then is dropped.
    3. Refuse a workspace over the case limits (2,000 files, 20 MB).
    """
    if not root.is_dir():
        raise EvalCaseRefused(f"The run's workspace folder {root} is gone; a case needs its files.")
    snapshot, read = Snapshot(), 0
    for relative, path in _walk(root):
        if relative in before:
            continue  # its pre-run bytes come from the run's write records
        if is_secret(relative):
            snapshot.secrets[relative] = placeholder(relative)
        else:
            try:
                text = _text(path.read_bytes()) if path.stat().st_size <= MAX_FILE_BYTES else None
            except OSError:
                text = None
            if text is None:
                snapshot.skipped.append(relative)
            else:
                snapshot.files[relative] = text
                read += len(text)
        if len(snapshot.files) + len(snapshot.secrets) > MAX_FILES or read > MAX_TOTAL_BYTES:
            _check_limits(snapshot)  # stop reading a huge tree early
    for relative, data in sorted(before.items()):
        if data is None or SKIPPED_DIRS & set(relative.split("/")):
            continue  # the run created it, or git internals (never part of a case)
        if is_secret(relative):
            snapshot.secrets[relative] = placeholder(relative)
        elif (text := _text(data)) is not None:
            snapshot.files[relative] = text
        else:
            snapshot.skipped.append(relative)
    _check_limits(snapshot)
    for relative, text in snapshot.files.items():
        # A key pasted into an ordinary file (sk-ant-..., a private key block, token=...)
        # is not copied into the database either.
        clean, counts = DEFAULT_REDACTOR.redact(text)
        if counts:
            snapshot.files[relative] = clean
            snapshot.redacted.append(relative)
    return snapshot


# --- the case ------------------------------------------------------------------------------
def eval_case_name_check(name: str) -> None:
    """A name the eval set does not have yet: no console case (active or not) and no case
    file bears it (two cases of one name break the suite)."""
    if not NAME_RE.match(name):
        raise EvalCaseRefused(
            "Use 1–48 lowercase letters, digits and hyphens, starting with a letter or digit.",
            field="name",
        )
    if EvalCase.objects.filter(name=name).exists():
        raise EvalCaseRefused(f"The eval set has a console case named {name!r}.", field="name")
    shipped = next((c for c in cases_load().cases if c.name == name), None)
    if shipped is not None:
        raise EvalCaseRefused(
            f"The case file {shipped.source} is named {name!r}; choose another name.",
            field="name",
        )


def recorded_decisions(run: Run) -> list[str]:
    """What the people answered to the run's approval requests, in order, up to the first
    one nobody decided (expired, cancelled): the replay answers the same."""
    answers: dict[str, str] = {
        ApprovalRequest.Status.APPROVED: "approve",
        ApprovalRequest.Status.REJECTED: "reject",
    }
    decisions = []
    for status in (
        ApprovalRequest.objects.filter(run=run)
        .exclude(status=ApprovalRequest.Status.INVALIDATED)
        .order_by("requested_at")
        .values_list("status", flat=True)
    ):
        if status not in answers:
            break
        decisions.append(answers[status])
    return decisions


def recorded_approvals(run: Run) -> list[str]:
    """What the run asked people to approve, as a case names it (``commit`` for a commit,
    else the tool), once each in the order first asked, up to and including the first
    request nobody decided: the replay asks the same and stops where the decisions do."""
    asked: list[str] = []
    for kind, tool, status in (
        ApprovalRequest.objects.filter(run=run)
        .exclude(status=ApprovalRequest.Status.INVALIDATED)
        .order_by("requested_at")
        .values_list("kind", "tool", "status")
    ):
        name = "commit" if kind == ApprovalRequest.Kind.COMMIT else (tool or kind)
        if name not in asked:
            asked.append(name)
        if status not in (ApprovalRequest.Status.APPROVED, ApprovalRequest.Status.REJECTED):
            break
    return asked


def case_data(
    *, run: Run, name: str, title: str, expect: dict[str, Any], user: Any
) -> dict[str, Any]:
    """The case as a case file's JSON object (before validation)."""
    turns = recorded_turns(run)
    if not turns:
        raise EvalCaseRefused(NO_TURNS)
    snapshot = workspace_snapshot(
        root=run.workspace.root_path, before=pre_run_contents(run), is_secret=secret_test(run)
    )
    agent = run.agent
    workspace: dict[str, Any] = {"files": snapshot.files}
    if snapshot.secrets:
        workspace["secrets"] = snapshot.secrets
    reason = f": {run.failure_reason[:300]}" if run.failure_reason else ""
    left_out = (
        f" Left out as binary or over 1 MB: {', '.join(snapshot.skipped[:20])}."
        if snapshot.skipped
        else ""
    )
    if snapshot.redacted:
        left_out += f" Key-like text redacted in: {', '.join(snapshot.redacted[:20])}."
    answered = dict((run.task or {}).get("answers") or [])  # the intake's, as the run got them
    return {
        "name": name,
        "category": CATEGORY,
        "title": title,
        "model": "replay",
        "request": run.request,
        "turns": turns,
        "agent": {"max_turns": agent.max_turns, "model": agent.model, "identity": agent.identity},
        "policy": agent.policy.name if agent.policy is not None else DEFAULT_POLICY_NAME,
        "workspace": workspace,
        "decisions": recorded_decisions(run),
        **({"answers": answered} if answered else {}),
        "expect": expect,
        "notes": (
            f"Added from run {run.pk} ({run.status}{reason}) by {user.get_username()} on "
            f"{timezone.now():%Y-%m-%d %H:%M} UTC.{left_out}"
        ),
    }


def eval_case_from_run(
    *, run: Run, name: str, title: str, expect: dict[str, Any], user: Any
) -> EvalCase:
    """A failed (or rolled-back) run as a historical replay case of the eval set.

    1. Refuse a run that did not fail or has no model turns, and a name the eval set has.
    2. Build the case object (turns, agent, policy, pre-run workspace, ``expect``) and
       validate it as the suite will: a :class:`CaseError` is refused with its sentence.
    3. Save it and note it on the run's timeline, in one transaction.
    """
    refusal = eval_case_refusal(run)
    if refusal:
        raise EvalCaseRefused(refusal)
    eval_case_name_check(name)
    data = case_data(run=run, name=name, title=title, expect=expect, user=user)
    try:
        case_parse(data, source=console_source(name))
    except CaseError as error:
        raise EvalCaseRefused(f"The case would not run: {error}") from None
    try:
        with transaction.atomic():
            case = EvalCase.objects.create(
                name=name,
                category=CATEGORY,
                title=title,
                data=data,
                source_run=run,
                created_by=user,
            )
            run_event_append(
                run_id=run.pk,
                type="eval.case_added",
                payload={"case": name, "by": user.get_username()},
            )
    except IntegrityError:  # the same name, saved a moment ago by someone else
        raise EvalCaseRefused(
            f"The eval set has a console case named {name!r}.", field="name"
        ) from None
    return case
