"""Models that moved between apps (agents and workspaces to policies, the eval set to its own
app): an existing database
migrates forward without copying a row, and the permissions, with every role and user that
holds them, follow their models."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from policies.models import Agent, Workspace
from tests.conftest import EVERYWHERE

pytestmark = EVERYWHERE

BEFORE = [("runs", "0017_one_running_suite"), ("policies", "0014_policy_changes")]


def old_model(app: str, name: str):
    state = MigrationExecutor(connection).loader.project_state(BEFORE)
    return state.apps.get_model(app, name)


def test_agents_and_workspaces_keep_their_rows_and_permissions(tmp_path):
    call_command("migrate", "policies", "0014", verbosity=0)
    call_command("migrate", "runs", "0017", verbosity=0)
    try:
        # The database as the earlier release left it: the models in runs, a role holding
        # runs.view_agent.
        runs_agent = ContentType.objects.get_or_create(app_label="runs", model="agent")[0]
        ContentType.objects.filter(app_label="policies", model__in=("agent", "workspace")).delete()
        view = Permission.objects.get_or_create(
            content_type=runs_agent, codename="view_agent", defaults={"name": "Can view agent"}
        )[0]
        group = Group.objects.create(name="agent-readers")
        group.permissions.add(view)
        old_model("runs", "Workspace").objects.create(
            slug="old", name="Old workspace", root=str(tmp_path)
        )
        old_model("runs", "Agent").objects.create(slug="veteran", name="Veteran", identity="I was.")
    finally:
        call_command("migrate", verbosity=0)
    agent = Agent.objects.get(slug="veteran")
    assert (agent.name, agent.identity) == ("Veteran", "I was.")
    assert Workspace.objects.get(slug="old").root == str(tmp_path)
    assert Agent._meta.db_table == "runs_agent"  # the same table, never copied
    view.refresh_from_db()
    assert view.content_type.app_label == "policies"
    assert group.permissions.filter(
        content_type__app_label="policies", codename="view_agent"
    ).exists()


def test_the_eval_set_keeps_its_records_and_permissions(personas):
    from evals.models import EvalSuiteRun

    call_command("migrate", "evals", "zero", verbosity=0)
    call_command("migrate", "runs", "0018", verbosity=0)
    try:
        runs_case = ContentType.objects.get_or_create(app_label="runs", model="evalcase")[0]
        ContentType.objects.filter(app_label="evals", model="evalcase").delete()
        add = Permission.objects.get_or_create(
            content_type=runs_case, codename="add_evalcase", defaults={"name": "Can add"}
        )[0]
        personas.ops.user_permissions.add(add)
        state = MigrationExecutor(connection).loader.project_state(
            [("runs", "0018_agents_and_workspaces")]
        )
        state.apps.get_model("runs", "EvalSuiteRun").objects.create(model="replay", passed=3)
    finally:
        call_command("migrate", verbosity=0)
    assert EvalSuiteRun.objects.get().passed == 3
    add.refresh_from_db()
    assert add.content_type.app_label == "evals"
    personas.ops.refresh_from_db()
    assert type(personas.ops).objects.get(pk=personas.ops.pk).has_perm("evals.add_evalcase")


def test_deciding_approvals_stays_with_the_approvers_who_held_it(personas):
    call_command("migrate", "approvals", "0003", verbosity=0)
    call_command("migrate", "runs", "0019", verbosity=0)
    try:
        run_type = ContentType.objects.get(app_label="runs", model="run")
        moved = Permission.objects.get(codename="decide_approval")
        Permission.objects.filter(pk=moved.pk).update(content_type=run_type)
    finally:
        call_command("migrate", verbosity=0)
    moved.refresh_from_db()
    assert moved.content_type.model_class().__name__ == "ApprovalRequest"
    assert Group.objects.get(name="approver").permissions.filter(pk=moved.pk).exists()
    fresh = type(personas.approver).objects.get(pk=personas.approver.pk)
    assert fresh.has_perm("approvals.decide_approval")


def test_a_run_waiting_for_its_requester_gets_its_own_status(run):
    call_command("migrate", "runs", "0020", verbosity=0)
    try:
        old = MigrationExecutor(connection).loader.project_state(
            [("runs", "0020_decide_approval_moves")]
        )
        Run = old.apps.get_model("runs", "Run")
        Run.objects.filter(pk=run.pk).update(status="waiting_for_approval", waiting_for="answer")
        other = Run.objects.create(
            agent_id=run.agent_id,
            workspace_id=run.workspace_id,
            requester_id=run.requester_id,
            request="x",
            status="waiting_for_approval",
            waiting_for="approval",
        )
    finally:
        call_command("migrate", verbosity=0)
    from runs.models import Run as Current

    assert Current.objects.get(pk=run.pk).status == "waiting_for_answer"
    assert Current.objects.get(pk=other.pk).status == "waiting_for_approval"
    assert Current.objects.get(pk=run.pk).waiting_for == "answer"


def test_the_eval_sets_policies_and_servers_made_before_the_flag_are_marked():
    from policies.models import McpServer, Policy, ToolDefinition

    call_command("migrate", "policies", "0015", verbosity=0)
    try:
        state = MigrationExecutor(connection).loader.project_state(
            [("policies", "0015_agents_and_workspaces")]
        )
        OldPolicy = state.apps.get_model("policies", "Policy")
        OldServer = state.apps.get_model("policies", "McpServer")
        OldTool = state.apps.get_model("policies", "ToolDefinition")
        OldPolicy.objects.create(name="eval-case", description="Eval case case: default with")
        OldPolicy.objects.create(name="eval-admins", description="The admins' own policy")
        OldServer.objects.create(
            name="eval-notes", command="py", args=["/x/evals/servers/notes.py"]
        )
        OldServer.objects.create(name="eval-real", command="npx", args=["@mcp/server-git"])
        for name in ("mcp:eval-notes:wipe", "mcp:eval-real:log"):
            OldTool.objects.create(
                name=name, description="d", permission_level="L1", side_effect="none"
            )
    finally:
        call_command("migrate", verbosity=0)
    flagged = {
        "policies": set(Policy.objects.filter(for_evals=True).values_list("name", flat=True)),
        "servers": set(McpServer.objects.filter(for_evals=True).values_list("name", flat=True)),
        "tools": set(ToolDefinition.objects.filter(for_evals=True).values_list("name", flat=True)),
    }
    assert flagged == {
        "policies": {"eval-case"},
        "servers": {"eval-notes"},
        "tools": {"mcp:eval-notes:wipe"},
    }


def test_the_models_and_the_migrations_agree():
    # makemigrations --check exits non-zero when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
