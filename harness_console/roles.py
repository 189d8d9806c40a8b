"""The four roles of the console and the permissions each one holds.

Roles are Django groups, so an admin can see and adjust them in the admin; this module is
the single place that says what each role means. ``roles_sync`` is idempotent: the roles
migration calls it, and so does every ``post_migrate`` so that permissions of models added
by later migrations reach the roles too (and a test database flush gets them back).
"""

from __future__ import annotations

from typing import Any

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

SEE_RUNS, SUBMIT_RUNS, DECIDE = "runs.view_run", "runs.add_run", "approvals.decide_approval"
VIEW_DASHBOARDS, SEE_EVALS, ADD_EVAL_CASE, RUN_EVALS = (
    "runs.view_dashboards",
    "evals.view_evalsuiterun",
    "evals.add_evalcase",
    "evals.add_evalsuiterun",
)

ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    # Operators submit tasks and watch runs live.
    OPERATOR: (*_SEE_RUNS, "runs.add_run", "policies.view_agent", "policies.view_workspace"),
    # Approvers decide on what agents want to change; they read runs to do so, and the
    # dashboards show them how long approvals wait and what escaped verification.
    APPROVER: (*_SEE_RUNS, DECIDE, "runs.view_dashboards", *_SEE_EVALS),
    # Ops watch the operations and retrospective dashboards and the eval set's results,
    # start a suite of it from the evals page, and turn a failed run into an eval case.
    OPS: (*_SEE_RUNS, "runs.view_dashboards", *_SEE_EVALS, ADD_EVAL_CASE, RUN_EVALS),
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


# --- who may do what: every view, API endpoint, consumer and service asks these ----------
def _holds(user: Any, permission: str) -> bool:
    return bool(
        user is not None and user.is_authenticated and user.is_active and user.has_perm(permission)
    )


def may_see_runs(user: Any) -> bool:
    return _holds(user, SEE_RUNS)


def may_submit_runs(user: Any) -> bool:
    return _holds(user, SUBMIT_RUNS)


def may_act_on_any_run(user: Any) -> bool:
    """Answer or cancel anyone's run (admins, and whoever is given runs.change_run)."""
    return _holds(user, "runs.change_run")


def may_read_approvals(user: Any) -> bool:
    """Read approval requests without deciding them (the model's view permission)."""
    return may_decide(user) or _holds(user, "approvals.view_approvalrequest")


def may_roll_back_tool_calls(user: Any) -> bool:
    """Roll back one tool call's writes from the admin."""
    return _holds(user, "runs.change_toolcall")


def may_decide(user: Any) -> bool:
    """Approvers and admins decide approval requests (never on their own run: the caller
    checks that, since it depends on the run)."""
    return _holds(user, DECIDE)


def may_view_dashboards(user: Any) -> bool:
    return _holds(user, VIEW_DASHBOARDS)


def may_see_evals(user: Any) -> bool:
    return _holds(user, SEE_EVALS)


def may_add_eval_case(user: Any) -> bool:
    return _holds(user, ADD_EVAL_CASE)


def may_run_evals(user: Any) -> bool:
    """Start a suite of the eval set from the evals page (ops and admins)."""
    return _holds(user, RUN_EVALS)
