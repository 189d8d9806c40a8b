"""Seed the demo: four users (one per role), a demo workspace and a demo agent. Idempotent.

Passwords are generated on first seeding and kept in var/demo-logins.json (readable by the
owner only), so running the command again prints the same logins and changes nothing.

The demo workspace is copied from demo/workspace on first seeding. Later seedings add only
the files the demo gained since (var/demo-workspace-seeded.json lists what was handed over),
so a file the user changed, or deleted through an approved run, is never written again.
The offline replay scripts in demo/replays play the example tasks against it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from harness_console.roles import ADMIN, APPROVER, OPERATOR, OPS, roles_sync
from policies.models import Agent, BusinessRule, InstructionVersion, Workspace
from policies.services import instruction_update

DEMO_SOURCE = Path(settings.BASE_DIR) / "demo" / "workspace"
DEMO_USERS = (ADMIN, APPROVER, OPERATOR, OPS)
DEMO_IDENTITY = (
    "You are the documentation assistant of the demo workspace. You propose small, reviewed "
    "changes to Markdown documentation and never change configuration."
)

DEMO_INSTRUCTIONS = (
    "Propose every change as a draft first and explain it in one sentence.\n"
    "Ask before changing more than three files in one run."
)
DEMO_RULES = (
    "Documentation pages are in English.",
    "Every page starts with a level-one heading.",
)


def _seeded_path() -> Path:
    return Path(settings.VAR_DIR) / "demo-workspace-seeded.json"


def _demo_files() -> list[str]:
    return sorted(
        p.relative_to(DEMO_SOURCE).as_posix()
        for p in DEMO_SOURCE.rglob("*")
        if p.is_file() and not p.is_symlink()
    )


def _load_seeded() -> set[str] | None:
    try:
        data = json.loads(_seeded_path().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return {p for p in data if isinstance(p, str)} if isinstance(data, list) else None


def _save_seeded(paths: set[str]) -> None:
    path = _seeded_path()
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(sorted(paths), indent=2) + "\n")
    temporary.replace(path)


def demo_workspace_sync(target: Path) -> list[str]:
    """Copy the demo workspace to ``target``; return the files added to an existing one.

    A new workspace gets a full copy. An existing one gets each demo file it was never
    handed, and only where nothing exists at that path: nothing is ever overwritten, and a
    file handed over once is not handed over again (the user may have deleted it). A
    workspace seeded before the list existed gets the files it lacks.
    """
    files = _demo_files()
    if not target.exists():
        shutil.copytree(DEMO_SOURCE, target)
        _save_seeded(set(files))
        return []
    seeded = _load_seeded() or set()
    added = []
    for relative in files:
        if relative in seeded:
            continue
        seeded.add(relative)
        destination = target / relative
        if destination.exists() or destination.is_symlink():
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(destination, "xb") as handle:  # never replace what appeared meanwhile
                handle.write((DEMO_SOURCE / relative).read_bytes())
        except FileExistsError:
            continue
        added.append(relative)
    _save_seeded(seeded)
    return added


def _logins_path() -> Path:
    return Path(settings.VAR_DIR) / "demo-logins.json"


def _load_logins() -> dict[str, str]:
    try:
        return json.loads(_logins_path().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _save_logins(logins: dict[str, str]) -> None:
    path = _logins_path()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(logins, handle, indent=2)


class Command(BaseCommand):
    help = "Create the demo users, workspace and agent (idempotent) and print the logins."

    def handle(self, *args: Any, **options: Any) -> None:
        logins = _load_logins()
        with transaction.atomic():
            roles_sync()
            for role in DEMO_USERS:
                logins[role] = self._user(role, logins.get(role))
            workspace, added = self._workspace()
            agent, _ = Agent.objects.get_or_create(
                slug="docs-assistant",
                defaults={"name": "Docs assistant", "identity": DEMO_IDENTITY},
            )
            self._context(agent)
        _save_logins(logins)
        self.stdout.write(f"Demo workspace: {workspace.root}")
        for relative in added:
            self.stdout.write(f"  added {relative} (new in the demo)")
        self.stdout.write("Logins (role: username / password):")
        for role in DEMO_USERS:
            self.stdout.write(f"  {role + ':':<10} {role} / {logins[role]}")

    def _user(self, role: str, known: str | None) -> str:
        """Create the user if missing; reset the password only when we no longer know it."""
        User = get_user_model()
        user, created = User.objects.get_or_create(username=role)
        password = known
        if password is None or created or not user.check_password(password):
            password = secrets.token_urlsafe(12)
            user.set_password(password)
        user.is_staff = role == ADMIN
        if not user.email:  # approvers are told of new requests by email (console backend)
            user.email = f"{role}@demo.invalid"
        user.save()
        user.groups.set([Group.objects.get(name=role)])
        return password

    def _context(self, agent: Agent) -> None:
        """Instructions and business rules for the demo agent, only if it has none yet."""
        if not InstructionVersion.objects.filter(agent=agent).exists():
            instruction_update(
                agent=agent, text=DEMO_INSTRUCTIONS, author=None, note="Seeded by seed_demo"
            )
        if not BusinessRule.objects.filter(agent=agent).exists():
            for rule in DEMO_RULES:
                BusinessRule.objects.create(agent=agent, text=rule)

    def _workspace(self) -> tuple[Workspace, list[str]]:
        target = Path(settings.VAR_DIR) / "workspaces" / "demo"
        added = demo_workspace_sync(target)
        workspace, _ = Workspace.objects.get_or_create(
            slug="demo",
            defaults={
                "name": "Demo docs",
                "root": str(target),
                "publish_root": str(Path(settings.VAR_DIR) / "published" / "demo"),
            },
        )
        workspace.drafts_path.mkdir(parents=True, exist_ok=True)
        return workspace, added
