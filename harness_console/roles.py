"""The four roles of the console and the permissions each one holds.

Roles are Django groups, so an admin can see and adjust them in the admin; this module is
the single place that says what each role means. ``roles_sync`` is idempotent: the roles
migration calls it, and so does every ``post_migrate`` so that permissions of models added
by later migrations reach the roles too (and a test database flush gets them back).
"""

from __future__ import annotations

from functools import cache, partial
from typing import Any

from django.http import HttpRequest

ADMIN, APPROVER, OPERATOR, OPS = "admin", "approver", "operator", "ops"
ROLES = (ADMIN, APPROVER, OPERATOR, OPS)

# Apps whose every permission the admin role holds, besides user and group management.
ADMIN_APPS = ("runs", "approvals", "policies", "evals")
ADMIN_EXTRA = (
    "auth.add_user",
    "auth.change_user",
    "auth.view_user",
    "auth.view_group",
    "auth.change_group",
)
_SEE_RUNS = ("runs.view_run", "runs.view_step", "runs.view_runevent")
_SEE_EVALS = ("evals.view_evalsuiterun", "evals.view_evalresult", "evals.view_evalcase")

ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    # Operators submit tasks and watch runs live.
    OPERATOR: (*_SEE_RUNS, "runs.add_run", "policies.view_agent", "policies.view_workspace"),
    # Approvers decide on what agents want to change; they read runs to do so, and the
    # dashboards show them how long approvals wait and what escaped verification.
    APPROVER: (*_SEE_RUNS, "runs.decide_approval", "runs.view_dashboards", *_SEE_EVALS),
    # Ops watch the operations and retrospective dashboards and the eval set's results,
    # and turn a failed run into an eval case.
    OPS: (*_SEE_RUNS, "runs.view_dashboards", *_SEE_EVALS, "evals.add_evalcase"),
}


def roles_sync(*, apps: Any = None) -> None:
    """Create the role groups and give each exactly the permissions this module names.

    ``apps`` is the migration state's registry inside a migration, the live one otherwise.
    """
    if apps is None:
        from django.apps import apps as live_apps

        apps = live_apps
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")

    def lookup(names: tuple[str, ...]) -> list:
        found = []
        for name in names:
            app_label, codename = name.split(".", 1)
            found.extend(
                Permission.objects.filter(content_type__app_label=app_label, codename=codename)
            )
        return found

    for role in ROLES:
        group, _ = Group.objects.get_or_create(name=role)
        if role == ADMIN:
            wanted = list(Permission.objects.filter(content_type__app_label__in=ADMIN_APPS))
            wanted += lookup(ADMIN_EXTRA)
        else:
            wanted = lookup(ROLE_PERMISSIONS[role])
        group.permissions.set(wanted)


def roles_sync_after_migrate(sender: Any, **kwargs: Any) -> None:
    """post_migrate fires once per app; syncing once, after our last app, is enough."""
    if getattr(sender, "label", None) != "evals":
        return
    using = kwargs.get("using", "default")
    if using != "default":
        return
    roles_sync()


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The navigation shows only what the user's role may open; an approver's shows how
    many requests wait for them. That count is one COUNT query, made only by a template
    that shows it (a fragment re-fetched by a live page usually does not)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav": []}
    items: list[tuple[str, str, str]] = []
    context: dict[str, Any] = {"nav": items}
    if user.has_perm("runs.view_run"):
        items.append(("runs", "Runs", "runs:list"))
    if user.has_perm("runs.decide_approval"):
        from approvals.selectors import pending_count_for

        items.append(("approvals", "Approvals", "approvals:queue"))
        context["approvals_pending"] = cache(partial(pending_count_for, user))
        context["approvals_live"] = True  # the page loads approvals.js: a live count
    if user.has_perm("runs.view_dashboards"):
        items.append(("dashboards", "Dashboards", "dashboards"))
    if user.has_perm("evals.view_evalsuiterun"):
        items.append(("evals", "Evals", "evals:index"))
    if user.is_staff:
        items.append(("admin", "Admin", "admin:index"))
    return context
