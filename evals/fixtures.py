"""Laying out an eval case (SPEC E1): its folder on disk and the rows its run needs.

Each case gets its own folder under the suite's: ``workspace/`` (its files, secrets and
links), ``outside/`` (what must stay untouched), ``drafts/`` and ``publish/``, and
``replay.json`` (its recorded turns). A stable workspace ``eval-<case>`` points at it; the
agent is one per configuration (turn limit, model, identity, policy), the policy the named
one or an eval copy with the case's rules first, and its MCP servers are started from the
eval set's own. Every row is one the eval set made: it refuses to take over a row of an
``eval-`` name that it did not make.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction

from harness_console.roles import SUBMIT_RUNS
from policies.mcp_servers import mcp_discover, mcp_tools_list
from policies.models import Agent, McpServer, Policy, PolicyRule, ToolDefinition, Workspace
from policies.permissions import policy_bump_version
from runs.models import Run
from runs.tools.doc_search import doc_index_refresh

from .core.cases import Case, CaseError, McpSpec

EVAL_USER: Final = "eval-runner"
EVAL_APPROVER: Final = "eval-approver"
RULE_FIELDS: Final = ("key", "tool", "decision", "path", "reason")
# The tools an MCP server offered, by how it was started (command, arguments, timeout).
Listed = dict[tuple[str, ...], list[Any]]


@dataclass
class Prepared:
    """A case laid out, and then what the suite learns of its run as it goes: the run, when
    it started, whether the case's answers and how many of its scripted decisions were
    given."""

    case: Case
    folder: Path
    workspace: Workspace | None
    agent: Agent | None = None
    run: Run | None = None
    before: dict[str, bytes] = field(default_factory=dict)
    around: dict[str, bytes] = field(default_factory=dict)  # the case folder but its workspace
    skipped: str = ""
    started: float = 0.0
    answered: bool = False
    decided: int = 0
    decision_error: str = ""


def case_prepare(
    case: Case, suite_dir: Path, servers_dir: Path, listed: Listed | None = None
) -> Prepared:
    """The case's folder under ``suite_dir``, its workspace, MCP servers, policy and agent,
    and what its folder holds before the run (to compare with after). ``listed``: the
    tools of each server script started so far in this suite (see :func:`_mcp_for`)."""
    folder = suite_dir / case.name
    root = _lay_out(case, folder)
    workspace = _workspace_for(case, folder)
    _mcp_for(case, servers_dir, {} if listed is None else listed)
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
        around=around_read(folder),
    )


def _lay_out(case: Case, folder: Path) -> Path:
    """The case's files on disk; its workspace's root."""
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
    return root


def _workspace_for(case: Case, folder: Path) -> Workspace:
    """The stable workspace ``eval-<case>``, pointed at this suite's folder of the case and
    its document index refreshed (the folder is new, the slug is not)."""
    _ours(Workspace, {"slug": f"eval-{case.name}"}, case)
    workspace, _ = Workspace.objects.update_or_create(
        slug=f"eval-{case.name}",
        defaults={
            "name": f"Eval: {case.title}"[:200],
            "root": str(folder / "workspace"),
            "drafts_root": str(folder / "drafts"),
            "publish_root": str(folder / "publish"),
            "context_file": "README.md" if "README.md" in case.files else "",
            "for_evals": True,
        },
    )
    doc_index_refresh(workspace)
    return workspace


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


def around_read(folder: Path) -> dict[str, bytes]:
    """The case's folder but its workspace and drafts: outside/, publish/, replay.json and
    anything a run wrote beside them by escaping its workspace."""
    return {
        path: data
        for path, data in tree_read(folder).items()
        if not path.startswith(("workspace/", "drafts/"))
    }


def eval_user(username: str = EVAL_USER, permission: str = SUBMIT_RUNS) -> Any:
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


def _ours(model: Any, lookup: dict[str, Any], case: Case) -> None:
    """Refuse to take over a row the eval set did not make (its ``eval-`` name is only a
    convention an admin could have used)."""
    row = model.objects.filter(**lookup).first()
    if row is not None and not row.for_evals:
        raise CaseError(
            f"{case.source}: a {model._meta.verbose_name} {next(iter(lookup.values()))!r} "
            "exists that the eval set did not make; rename it or the case"
        )


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
    _ours(Policy, {"name": name}, case)
    wanted = [tuple(r[f] for f in RULE_FIELDS) for r in spec.rules] + list(
        base.rules.order_by("order", "id").values_list(*RULE_FIELDS)
    )
    policy, _ = Policy.objects.get_or_create(
        name=name,
        defaults={
            "description": f"Eval case {case.name}: {spec.base} with its own rules first.",
            "for_evals": True,
        },
    )
    _policy_rules_set(policy, wanted, base.ceiling)
    return policy


def _policy_rules_set(policy: Policy, wanted: list[tuple[Any, ...]], ceiling: Any) -> None:
    """The eval copy's rules and ceiling, saved (a new version) only when they differ."""
    have = list(policy.rules.order_by("order", "id").values_list(*RULE_FIELDS))
    if have == wanted and policy.ceiling == ceiling:
        return
    with transaction.atomic():
        policy.rules.all().delete()
        PolicyRule.objects.bulk_create(
            PolicyRule(policy=policy, order=i, key=k, tool=t, decision=d, path=p, reason=r)
            for i, (k, t, d, p, r) in enumerate(wanted)
        )
        Policy.objects.filter(pk=policy.pk).update(ceiling=ceiling)
        policy_bump_version(policy=policy)


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


def _mcp_for(case: Case, servers_dir: Path, listed: Listed) -> None:
    """The case's servers, enabled with its configuration and their tools enabled at its
    level; :func:`mcp_servers_off` turns them off again when the suite ends, so no other
    agent is offered an eval server's tools (``wipe``, ``dump_env``) in between.

    Each case names a server of its own, but most start the same script: what a server
    started one way offers is asked once per suite (``listed``, by how it is started), not
    once per case (a Python MCP server took 1.5 s to start and answer here)."""
    for spec in case.mcp:
        script = _mcp_script(case, spec, servers_dir)
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
                "for_evals": True,
            },
        )
        started_as = (server.command, *map(str, server.args), str(server.timeout_sec))
        if started_as not in listed:
            listed[started_as] = mcp_tools_list(server)
        mcp_discover(server, listed[started_as])
        ToolDefinition.objects.filter(name__startswith=f"mcp:{spec.name}:").update(
            enabled=True, permission_level=spec.permission_level
        )


def _mcp_script(case: Case, spec: McpSpec, servers_dir: Path) -> Path:
    """The server's script, one of the eval set's own; and a server of its name, if there
    is one, must be one the eval set made (it runs a script of the same folder)."""
    script = (servers_dir / f"{spec.server}.py").resolve()
    if not script.is_file() or not script.is_relative_to(servers_dir.resolve()):
        raise CaseError(f"{case.source}: no eval MCP server {spec.server!r} in {servers_dir}")
    _ours(McpServer, {"name": spec.name}, case)
    return script


def mcp_servers_off(cases: Iterable[Case]) -> None:
    """The cases' MCP servers and their tools, switched off until a suite needs them again."""
    names = [m.name for case in cases for m in case.mcp]
    McpServer.objects.filter(name__in=names).update(enabled=False)
    for name in names:
        ToolDefinition.objects.filter(name__startswith=f"mcp:{name}:").update(enabled=False)
