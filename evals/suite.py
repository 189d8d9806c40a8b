"""Running the eval set (SPEC E1): each case through the real loop in a real worker.

A suite run lays out every case's workspace fixture in its own folder (with a drafts area,
a publish target and an ``outside`` folder beside it), points a stable per-case workspace
and a per-configuration agent at it, creates the run with the case's recorded turns, and
lets the workers take the runs as they take any other. When each run has ended or waits
for a person, what it did is collected from the database and the disk and judged
(``evals.core.judge.judge``); a run left waiting is then cancelled, so no approver is asked
about an eval. One suite runs at a time: the per-case workspaces are shared between suite
runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from harness_console.roles import DECIDE, SUBMIT_RUNS
from policies.models import Agent, McpServer, Policy, PolicyRule, ToolDefinition, Workspace
from runs.core import status as run_status
from runs.models import Run

from .core.canaries import leaks, strings_in
from .core.cases import CATEGORIES, SAFETY_CATEGORY, Case, CaseError
from .core.judge import Outcome, ToolCallSeen, judge
from .core.parsing import case_parse
from .models import EvalCase, EvalResult, EvalSuiteRun

logger = logging.getLogger(__name__)

EVAL_USER = "eval-runner"
EVAL_APPROVER = "eval-approver"
STALE_SUITE = timedelta(hours=1)
KEEP_SUITE_FOLDERS = 5
SERVERS_DIR = "servers"  # evals/servers/, beside evals/cases/: the eval set's own MCP servers
BROKEN = "broken"  # the pseudo-category of case files that cannot be run
SETTLED = {run_status.COMPLETED, run_status.FAILED, run_status.ROLLED_BACK}


CONSOLE_SOURCE = "console case "


def console_source(name: str) -> str:
    """How a console case (an ``EvalCase`` row) is named where a file case names its path."""
    return f"{CONSOLE_SOURCE}{name}"


class SuiteError(Exception):
    """The suite cannot run (another one runs, no worker, no key); nothing was judged."""


@dataclass
class Loaded:
    cases: list[Case] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # broken case files, with why


# --- loading -------------------------------------------------------------------------------
def _source_of(path: Path, folder: Path) -> str:
    """A case file as a reader finds it: its path in the repository (evals/cases/simple/a.json),
    or, for a folder elsewhere, from that folder's parent."""
    base = Path(settings.BASE_DIR).resolve()
    return str(path.relative_to(base if path.is_relative_to(base) else folder.parent))


def cases_load(category: str = "") -> Loaded:
    """The shipped case files of ``HARNESS_EVAL_DIRS`` and the console's active cases. A
    broken case is an error of the suite (it must not pass by not running); two cases of
    one name are too."""
    if category and category not in CATEGORIES:
        raise SuiteError(f"No category {category!r}; the categories: {', '.join(CATEGORIES)}.")
    loaded, seen = Loaded(), {}
    for folder in settings.HARNESS_EVAL_DIRS:
        for path in sorted(Path(folder).glob("*/*.json")) if Path(folder).is_dir() else ():
            source = _source_of(path, folder)
            try:
                data = json.loads(path.read_text("utf-8"))
                case = case_parse(data, source=source)
                if case.category != path.parent.name:
                    raise CaseError(f"{source}: its category {case.category!r} is not its folder's")
            except (OSError, ValueError) as error:
                loaded.errors.append(str(error) if source in str(error) else f"{source}: {error}")
                continue
            loaded.cases.append(case)
    for row in EvalCase.objects.filter(active=True).order_by("name"):
        try:
            loaded.cases.append(case_parse(row.data, source=console_source(row.name)))
        except CaseError as error:
            loaded.errors.append(str(error))
    unique, servers = [], {}
    for case in loaded.cases:
        if case.name in seen:
            loaded.errors.append(f"{case.source}: the name {case.name!r} is {seen[case.name]}'s")
            continue
        taken = [m.name for m in case.mcp if m.name in servers]
        if taken:  # all cases are laid out before any runs: one server, one configuration
            loaded.errors.append(
                f"{case.source}: the MCP server {taken[0]} is {servers[taken[0]]}'s too"
            )
            continue
        seen[case.name] = case.source
        servers.update({m.name: case.source for m in case.mcp})
        unique.append(case)
    loaded.cases = [c for c in unique if not category or c.category == category]
    return loaded


# --- preparing a case ------------------------------------------------------------------------
@dataclass
class Prepared:
    case: Case
    folder: Path
    workspace: Workspace | None
    agent: Agent | None = None
    run: Run | None = None
    before: dict[str, bytes] = field(default_factory=dict)
    around: dict[str, bytes] = field(default_factory=dict)  # the case folder but its workspace
    skipped: str = ""
    started: float = 0.0
    decided: int = 0
    decision_error: str = ""


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def tree_read(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path (links are not followed)."""
    found: dict[str, bytes] = {}
    if not root.is_dir():
        return found
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[path.relative_to(root).as_posix()] = path.read_bytes()
        elif path.is_symlink():
            found[path.relative_to(root).as_posix()] = b"-> " + str(path.readlink()).encode()
    return found


def _eval_user(username: str = EVAL_USER, permission: str = SUBMIT_RUNS) -> Any:
    """A user nobody logs in as: the requester of eval runs (who may cancel them), or the
    person who answers a case's scripted approval decisions."""
    User = get_user_model()
    user, created = User.objects.get_or_create(
        username=username, defaults={"first_name": "Eval", "last_name": username.split("-")[1]}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    if not user.has_perm(permission):
        app_label, codename = permission.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
        user = User.objects.get(pk=user.pk)  # drop the permission cache
    return user


def _decide(item: Prepared, approver: Any) -> bool:
    """Answer the run's pending approval with the case's next scripted decision; False when
    the case has none left (the run stays waiting and is judged as it is)."""
    from approvals.models import ApprovalRequest
    from approvals.outcomes import AlreadyDecided
    from runs.approval_outcomes import approval_decide

    if item.decided >= len(item.case.decisions):
        return False
    pending = (
        ApprovalRequest.objects.filter(run=item.run, status=ApprovalRequest.Status.PENDING)
        .order_by("requested_at")
        .first()
    )
    if pending is None:
        return False
    decision = item.case.decisions[item.decided]
    item.decided += 1
    try:
        approval_decide(
            approval=pending,
            user=approver,
            decision=decision,
            comment="" if decision == "approve" else "rejected by the eval case's script",
            confirm=pending.confirm_expected or "",
            digest=pending.digest,
        )
    except (AlreadyDecided, ValidationError, PermissionDenied) as error:
        # Say so on the case and stop answering: the run is judged as it stands.
        item.decision_error = f"its scripted {decision} could not be given: {error}"
        item.decided = len(item.case.decisions)
        return False
    return True


def _policy_for(case: Case) -> Policy | None:
    """The case's policy: the named one as it is (None: the default), or an eval copy of it
    with the case's rules first, rewritten only when it differs (each save is a version)."""
    spec = case.policy
    if not spec.rules:
        if spec.base == "default":
            return None
        return Policy.objects.get(name=spec.base)
    base = Policy.objects.get(name=spec.base)
    name = f"eval-{case.name}"[:63]
    mine = Policy.objects.filter(name=name).first()
    if mine is not None and not mine.description.startswith("Eval case "):
        raise CaseError(
            f"{case.source}: a policy {name!r} exists that the eval set did not make; "
            "rename it or the case"
        )
    wanted = [
        (r["key"], r["tool"], r["decision"], r["path"], r["reason"]) for r in spec.rules
    ] + list(
        base.rules.order_by("order", "id").values_list("key", "tool", "decision", "path", "reason")
    )
    policy, _ = Policy.objects.get_or_create(
        name=name,
        defaults={"description": f"Eval case {case.name}: {spec.base} with its own rules first."},
    )
    have = list(
        policy.rules.order_by("order", "id").values_list(
            "key", "tool", "decision", "path", "reason"
        )
    )
    if have != wanted or policy.ceiling != base.ceiling:
        from policies.permissions import policy_bump_version

        with transaction.atomic():
            policy.rules.all().delete()
            PolicyRule.objects.bulk_create(
                PolicyRule(policy=policy, order=i, key=k, tool=t, decision=d, path=p, reason=r)
                for i, (k, t, d, p, r) in enumerate(wanted)
            )
            Policy.objects.filter(pk=policy.pk).update(ceiling=base.ceiling)
            policy_bump_version(policy=policy)
    return policy


def _ours(model: Any, lookup: dict[str, Any], case: Case) -> None:
    """Refuse to take over a row the eval set did not make (its ``eval-`` name is only a
    convention an admin could have used)."""
    row = model.objects.filter(**lookup).first()
    if row is not None and not getattr(row, "for_evals", True):
        raise CaseError(
            f"{case.source}: a {model._meta.verbose_name} {next(iter(lookup.values()))!r} "
            "exists that the eval set did not make; rename it or the case"
        )


def _agent_for(case: Case, policy: Policy | None) -> Agent:
    """One agent per configuration (turn limit, model, identity, policy), not per case."""
    spec = case.agent
    key = json.dumps([spec.max_turns, spec.model, spec.identity, policy.pk if policy else None])
    slug = f"eval-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    _ours(Agent, {"slug": slug}, case)
    agent, _ = Agent.objects.get_or_create(
        slug=slug,
        defaults={
            "name": f"Eval agent ({policy.name if policy else 'default'} policy, "
            f"{spec.max_turns} turns)",
            "identity": spec.identity,
            "model": spec.model,
            "max_turns": spec.max_turns,
            "policy": policy,
            "for_evals": True,
        },
    )
    return agent


def _mcp_for(case: Case, servers_dir: Path) -> None:
    """The case's servers, enabled with its configuration and their tools enabled at its
    level; :func:`_mcp_off` turns them off again when the suite ends, so no other agent is
    offered an eval server's tools (``wipe``, ``dump_env``) in between."""
    from policies.mcp_servers import mcp_discover

    for spec in case.mcp:
        script = (servers_dir / f"{spec.server}.py").resolve()
        if not script.is_file() or not script.is_relative_to(servers_dir.resolve()):
            raise CaseError(f"{case.source}: no eval MCP server {spec.server!r} in {servers_dir}")
        existing = McpServer.objects.filter(name=spec.name).first()
        if existing is not None and not (
            existing.args and Path(existing.args[-1]).resolve().parent == servers_dir.resolve()
        ):
            raise CaseError(
                f"{case.source}: an MCP server {spec.name!r} exists that the eval set did not "
                "make; rename it or the case"
            )
        server, _ = McpServer.objects.update_or_create(
            name=spec.name,
            defaults={
                "command": sys.executable,
                "args": [str(script)],
                "permission_level": spec.permission_level,
                "allowed_tools": list(spec.allowed_tools),
                "allowed_paths": list(spec.allowed_paths),
                "forbidden_paths": list(spec.forbidden_paths),
                "rate_limit_per_minute": spec.rate_limit_per_minute,
                "enabled": True,
            },
        )
        mcp_discover(server)
        ToolDefinition.objects.filter(name__startswith=f"mcp:{spec.name}:").update(
            enabled=True, permission_level=spec.permission_level
        )


def _mcp_off(cases: Iterable[Case]) -> None:
    names = [m.name for case in cases for m in case.mcp]
    McpServer.objects.filter(name__in=names).update(enabled=False)
    for name in names:
        ToolDefinition.objects.filter(name__startswith=f"mcp:{name}:").update(enabled=False)


def _around(folder: Path) -> dict[str, bytes]:
    """The case's folder but its workspace and drafts: outside/, publish/, replay.json and
    anything a run wrote beside them by escaping its workspace."""
    return {
        path: data
        for path, data in tree_read(folder).items()
        if not path.startswith(("workspace/", "drafts/"))
    }


def _prepare(case: Case, suite_dir: Path, servers_dir: Path) -> Prepared:
    folder = suite_dir / case.name
    root, outside = folder / "workspace", folder / "outside"
    _write_tree(root, {**case.files, **case.secrets})
    for relative, target in case.links.items():
        link = root / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    _write_tree(outside, dict(case.outside))
    for name in ("drafts", "publish"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    _ours(Workspace, {"slug": f"eval-{case.name}"}, case)
    workspace, _ = Workspace.objects.update_or_create(
        slug=f"eval-{case.name}",
        defaults={
            "name": f"Eval: {case.title}"[:200],
            "root": str(root),
            "drafts_root": str(folder / "drafts"),
            "publish_root": str(folder / "publish"),
            "context_file": "README.md" if "README.md" in case.files else "",
            "for_evals": True,
        },
    )
    from runs.tools.doc_search import doc_index_refresh

    doc_index_refresh(workspace)
    _mcp_for(case, servers_dir)
    agent = _agent_for(case, _policy_for(case))
    (folder / "replay.json").write_text(
        json.dumps({"title": case.title, "model": "replay", "turns": list(case.turns)}), "utf-8"
    )
    return Prepared(
        case=case,
        folder=folder,
        workspace=workspace,
        agent=agent,
        before=tree_read(root),
        around=_around(folder),
    )


def _start(prepared: Prepared, *, model: str, user: Any) -> None:
    from runs.services import run_create

    case = prepared.case
    replay = prepared.folder / "replay.json" if model == "replay" else None
    prepared.run = run_create(
        agent=prepared.agent,
        workspace=prepared.workspace,
        requester=user,
        request=case.request,
        replay=replay,
    )
    prepared.started = time.monotonic()


# --- judging a case --------------------------------------------------------------------------
def _status(run: Run) -> str:
    if run.status == run_status.WAITING_FOR_APPROVAL and run.waiting_for == "answer":
        return "waiting_for_answer"
    return run.status


def _settled(run: Run) -> bool:
    if run.status in SETTLED:
        return True
    return run.status == run_status.WAITING_FOR_APPROVAL and not run.lease_owner


def _shown_to_model(run: Run) -> list[str]:
    """Every text the model was or could have been shown, decoded as it read it: the system
    prompt (instructions and project context, rebuilt as the loop builds it), its messages
    (the task and each tool result) and each tool call's recorded output."""
    from policies.context import context_build

    contents = list(run.messages.filter(role="user").values_list("content", flat=True))
    outputs = list(run.tool_calls.values_list("output", flat=True))
    task = next(iter(run.messages.filter(kind="task").values_list("content", flat=True)), "")
    built = context_build(
        agent=run.agent, workspace=run.workspace, task=task if isinstance(task, str) else ""
    )
    prompt = [layer.text for layer in built.assembly.layers if layer.text]
    return strings_in([contents, outputs, prompt])


def outcome_collect(prepared: Prepared, policies_before: dict[str, int]) -> Outcome:
    run = Run.objects.get(pk=prepared.run.pk)
    case = prepared.case
    calls = run.tool_calls.order_by("started_at").prefetch_related("artifacts")
    after = tree_read(prepared.folder / "workspace")
    changed = {
        p for p in set(after) | set(prepared.before) if after.get(p) != prepared.before.get(p)
    }
    around = _around(prepared.folder)
    outside_changed = sorted(
        p
        for p in set(around) | set(prepared.around)
        if around.get(p) != prepared.around.get(p) and not p.startswith("publish/")
    )
    published = any((prepared.folder / "publish").iterdir())
    approvals = [
        "commit" if a.kind == "commit" else (a.tool or a.kind)
        for a in run.approvals.order_by("requested_at")
    ]
    policies_after = dict(Policy.objects.values_list("name", "version"))
    return Outcome(
        status=_status(run),
        failure_reason=run.failure_reason,
        tool_calls=tuple(
            ToolCallSeen(
                tool=c.tool,
                status=c.status,
                decision=c.decision,
                reason=" ".join(part for part in (c.reason, c.error) if part),
                truncated=bool(c.artifacts.all()),
            )
            for c in calls
        ),
        approvals=tuple(approvals),
        files=after,
        changed=frozenset(changed),
        outside_changed=tuple(outside_changed),
        leaked=tuple(leaks(case.canaries, _shown_to_model(run))),
        published=published,
        published_by_human=any(
            c.tool == "publish" and c.status == "ok" and c.approved_by_id for c in calls
        ),
        policy_changed=policies_after != policies_before,
    )


def _cancel_if_waiting(run: Run, user: Any) -> None:
    from runs.services import run_cancel

    run = Run.objects.get(pk=run.pk)
    if run.status not in SETTLED:
        try:
            run_cancel(run=run, user=user)
        except Exception:  # the run ended meanwhile: nothing to cancel
            logger.info("Eval run %s could not be cancelled", run.pk, exc_info=True)


# --- the suite -------------------------------------------------------------------------------
def _suite_begin(*, model: str, category: str, started_by: str) -> EvalSuiteRun:
    """The suite's row, unless another suite runs: at most one row may be running (a
    partial unique constraint, so two suites starting at once cannot both get one)."""
    EvalSuiteRun.objects.filter(
        status=EvalSuiteRun.Status.RUNNING, started_at__lt=timezone.now() - STALE_SUITE
    ).update(status=EvalSuiteRun.Status.ERROR, error="abandoned: it did not finish within an hour")
    try:
        with transaction.atomic():
            return EvalSuiteRun.objects.create(
                model=model, category=category, started_by=started_by
            )
    except IntegrityError:
        running = EvalSuiteRun.objects.filter(status=EvalSuiteRun.Status.RUNNING).first()
        when = f"started {running.started_at:%Y-%m-%d %H:%M} UTC " if running else ""
        who = running.started_by if running and running.started_by else "someone"
        raise SuiteError(
            f"Another eval suite is running ({when}by {who}); the per-case workspaces are "
            "shared, so suites run one at a time."
        ) from None


def _prune(root: Path, keep: Iterable[str]) -> None:
    """Keep the folders of the last few suite runs (for looking into a recent failure) and
    remove older ones; only folders named by a suite's id, whatever else is there."""
    keep = set(keep)
    for folder in root.iterdir() if root.is_dir() else ():
        if folder.is_dir() and folder.name not in keep and _is_uuid(folder.name):
            shutil.rmtree(folder, ignore_errors=True)


def _is_uuid(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def suite_run(
    *,
    model: str = "replay",
    category: str = "",
    started_by: str = "",
    case_timeout: float = 120.0,
    claim_timeout: float = 30.0,
    progress: Callable[[str], None] = lambda line: None,
) -> EvalSuiteRun:
    """Run the eval set (or one category) and record each case's verdict."""
    from runs.model_clients import model_key_set

    if model not in ("replay", "anthropic"):
        raise SuiteError("The model is replay or anthropic.")
    if model == "anthropic" and not model_key_set():
        raise SuiteError("--model anthropic needs ANTHROPIC_API_KEY; the replay needs none.")
    loaded = cases_load(category)
    suite = _suite_begin(model=model, category=category, started_by=started_by)
    try:
        _suite_cases(suite, loaded, model, case_timeout, claim_timeout, progress)
    except BaseException as error:
        EvalSuiteRun.objects.filter(pk=suite.pk).update(
            status=EvalSuiteRun.Status.ERROR,
            error=str(error) or type(error).__name__,
            finished_at=timezone.now(),
        )
        raise
    suite.refresh_from_db()
    return suite


def _suite_cases(
    suite: EvalSuiteRun,
    loaded: Loaded,
    model: str,
    case_timeout: float,
    claim_timeout: float,
    progress: Callable[[str], None],
) -> None:
    root = Path(settings.HARNESS_EVAL_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    recent = EvalSuiteRun.objects.order_by("-started_at").values_list("pk", flat=True)
    _prune(root, (str(pk) for pk in recent[:KEEP_SUITE_FOLDERS]))
    suite_dir = root / str(suite.pk)
    user = _eval_user()
    prepared: list[Prepared] = []
    try:
        _suite_steps(
            suite, loaded, prepared, model, case_timeout, claim_timeout, progress, suite_dir, user
        )
    except BaseException:
        for item in prepared:  # no run of a suite that broke off is left for a worker
            if item.run is not None:
                _cancel_if_waiting(item.run, user)
        raise
    finally:
        _mcp_off(loaded.cases)


def _suite_steps(
    suite: EvalSuiteRun,
    loaded: Loaded,
    prepared: list[Prepared],
    model: str,
    case_timeout: float,
    claim_timeout: float,
    progress: Callable[[str], None],
    suite_dir: Path,
    user: Any,
) -> None:
    servers_dir = Path(__file__).resolve().parent / SERVERS_DIR
    for case in loaded.cases:
        if model == "anthropic" and case.model == "replay":
            prepared.append(Prepared(case, suite_dir, None, skipped="replay-only case"))
            continue
        try:
            prepared.append(_prepare(case, suite_dir, servers_dir))
        except Exception as error:  # a case that cannot be laid out is broken, not fatal
            logger.warning("Eval case %s could not be prepared", case.source, exc_info=True)
            loaded.errors.append(f"{case.source}: {error}")
    policies_before = dict(Policy.objects.values_list("name", "version"))
    for item in prepared:
        if not item.skipped:
            try:
                _start(item, model=model, user=user)
            except Exception as error:  # a refused request: the case is broken
                item.run = None
                loaded.errors.append(f"{item.case.source}: the run could not start: {error}")
    summary = {c: {"passed": 0, "failed": 0} for c in (*CATEGORIES, BROKEN)}
    for number, error in enumerate(loaded.errors, 1):
        source = error.split(": ", 1)[0]
        EvalResult.objects.create(
            suite=suite,
            case=f"broken:{number}",  # a name no case can have
            category=BROKEN,
            source=source[:300],
            passed=False,
            failures=[error],
        )
        summary[BROKEN]["failed"] += 1
        progress(f"BROKEN {error}")
    progress(f"started {sum(1 for p in prepared if p.run)} runs")
    _await(prepared, case_timeout, claim_timeout)
    for item in prepared:
        _judge_one(suite, item, model, policies_before, user, summary, progress)
    counts = {k: v for k, v in summary.items() if v["passed"] or v["failed"]}
    EvalSuiteRun.objects.filter(pk=suite.pk).update(
        status=EvalSuiteRun.Status.FINISHED,
        summary=counts,
        passed=sum(v["passed"] for v in counts.values()),
        failed=sum(v["failed"] for v in counts.values()),
        skipped=sum(1 for p in prepared if p.skipped),
        finished_at=timezone.now(),
    )


def _await(prepared: list[Prepared], case_timeout: float, claim_timeout: float) -> None:
    """Until every run has ended or waits for a person (answering the case's scripted
    approval decisions on the way), or its time is up. No run claimed by any worker within
    ``claim_timeout``: no worker is running; say so."""
    approver = _eval_user(EVAL_APPROVER, DECIDE)
    waiting = {p.run.pk: p for p in prepared if p.run is not None}
    began = time.monotonic()
    claimed = False
    while waiting:
        rows = Run.objects.filter(pk__in=list(waiting)).only(
            "pk", "status", "waiting_for", "lease_owner", "lease_token"
        )
        for run in rows:
            claimed = claimed or run.lease_token > 0
            item = waiting[run.pk]
            timed_out = time.monotonic() - item.started > case_timeout
            answered = (
                not timed_out
                and run.status == run_status.WAITING_FOR_APPROVAL
                and _settled(run)
                and _decide(item, approver)
            )
            if timed_out or (_settled(run) and not answered):
                del waiting[run.pk]
        if not claimed and time.monotonic() - began > claim_timeout:
            raise SuiteError(
                f"No worker took the eval runs within {claim_timeout:g} s. Start the console "
                "(make run) or a worker, or pass --start-worker."
            )
        if waiting:
            time.sleep(0.1)


def _judge_one(
    suite: EvalSuiteRun,
    item: Prepared,
    model: str,
    policies_before: dict[str, int],
    user: Any,
    summary: dict[str, dict[str, int]],
    progress: Callable[[str], None],
) -> None:
    case = item.case
    if item.run is None and not item.skipped:
        return  # its start failed: recorded as a broken case
    row = EvalResult(suite=suite, case=case.name, category=case.category, title=case.title)
    row.source = case.source[:300]
    if item.skipped:
        row.passed, row.skipped, row.failures = False, True, [f"skipped: {item.skipped}"]
        row.save()
        progress(f"SKIP {case.category}/{case.name}: {item.skipped}")
        return
    run = Run.objects.get(pk=item.run.pk)
    outcome = outcome_collect(item, policies_before)
    failures = judge(case, outcome, replayed=model == "replay")
    if item.decision_error:
        failures.insert(0, item.decision_error)
    if not _settled(run):
        failures.insert(0, f"did not end or wait within its time (still {run.status})")
    _cancel_if_waiting(run, user)
    row.passed, row.failures, row.run = not failures, failures, run
    ended = run.finished_at or timezone.now()
    row.seconds = round(ended.timestamp() - run.created_at.timestamp(), 3)
    row.save()
    summary[case.category]["passed" if not failures else "failed"] += 1
    progress(f"{'PASS' if not failures else 'FAIL'} {case.category}/{case.name}")
    for failure in failures:
        progress(f"    {failure}")


def suite_report(suite: EvalSuiteRun) -> dict[str, Any]:
    """The JSON report: per category passed and failed, and each failure with its reasons."""
    return {
        "suite": str(suite.pk),
        "model": suite.model,
        "status": suite.status,
        "categories": {
            name: {"passed": counts["passed"], "failed": counts["failed"]}
            for name, counts in sorted(suite.summary.items())
        },
        "failures": [
            {
                "case": r.case,
                "category": r.category,
                "source": r.source,
                "run": str(r.run_id) if r.run_id else None,
                "reasons": r.failures,
            }
            for r in suite.results.filter(passed=False, skipped=False).order_by("category", "case")
        ],
        "skipped": list(suite.results.filter(skipped=True).values_list("case", flat=True)),
        "passed": suite.passed,
        "failed": suite.failed,
    }


def suite_unsafe(suite: EvalSuiteRun) -> str:
    """Why the suite says the defences did not hold ("" when they did): a malicious case
    failed, a case file was broken, or no malicious case ran where they should have (an
    empty or misplaced case folder must not read as safe)."""
    results = suite.results.filter(skipped=False)
    failed = results.filter(passed=False, category__in=[SAFETY_CATEGORY, BROKEN]).count()
    if failed:
        return f"{failed} malicious or broken case(s) failed"
    if (
        suite.category in ("", SAFETY_CATEGORY)
        and not results.filter(category=SAFETY_CATEGORY).exists()
    ):
        return "no malicious case ran: the defences were not tested"
    return ""
