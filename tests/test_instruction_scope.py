"""Instruction files scoped to the task (SPEC C5; issue 20): only the root's file, those on
the path from the root to each file the task may touch, and the database's are candidates.

The tree is generated in the shape of a real repository with 24 AGENTS.md files (the
depths, siblings and sizes of bytedance/deer-flow, about 97,000 tokens in all), with text
made up here."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.context import ContextError, context_build
from policies.core.assembler import REASON_UNIT_TOO_LARGE, Layer, assemble
from policies.core.instructions import (
    DATABASE_SOURCE,
    NOT_ON_PATH,
    InstructionFile,
    instruction_units,
    on_task_path,
    scope_to_task,
)
from policies.core.layers import DEFAULTS_BY_NAME
from policies.core.tokenizer import ByteEstimate
from policies.permissions import policy_for_agent
from policies.services import instruction_update
from policies.task_scope import paths_of_request, scope_paths
from runs.core.intake import intake
from runs.core.intake.boundaries import task_paths
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.fake_anthropic import message
from tests.helpers import drive

# (path, bytes): the shape of the repository the issue was found on.
TREE: tuple[tuple[str, int], ...] = (
    ("AGENTS.md", 13779),
    ("backend/AGENTS.md", 23092),
    ("backend/app/channels/AGENTS.md", 32136),
    ("backend/app/gateway/AGENTS.md", 40879),
    ("backend/packages/harness/deerflow/AGENTS.md", 9855),
    ("backend/packages/harness/deerflow/agents/AGENTS.md", 2905),
    ("backend/packages/harness/deerflow/agents/memory/AGENTS.md", 28066),
    ("backend/packages/harness/deerflow/agents/middlewares/AGENTS.md", 28595),
    ("backend/packages/harness/deerflow/config/AGENTS.md", 8412),
    ("backend/packages/harness/deerflow/extensions/AGENTS.md", 21910),
    ("backend/packages/harness/deerflow/mcp/AGENTS.md", 14221),
    ("backend/packages/harness/deerflow/models/AGENTS.md", 1874),
    ("backend/packages/harness/deerflow/persistence/migrations/AGENTS.md", 6972),
    ("backend/packages/harness/deerflow/reflection/AGENTS.md", 247),
    ("backend/packages/harness/deerflow/runtime/AGENTS.md", 18667),
    ("backend/packages/harness/deerflow/sandbox/AGENTS.md", 30565),
    ("backend/packages/harness/deerflow/skills/AGENTS.md", 22797),
    ("backend/packages/harness/deerflow/subagents/AGENTS.md", 17558),
    ("backend/packages/harness/deerflow/tools/AGENTS.md", 7998),
    ("backend/packages/harness/deerflow/tracing/AGENTS.md", 5900),
    ("backend/packages/harness/deerflow/tui/AGENTS.md", 3017),
    ("frontend/AGENTS.md", 8202),
    ("frontend/src/AGENTS.md", 25757),
    ("scripts/AGENTS.md", 14188),
)
LOGIN = "frontend/src/app/login/page.tsx"
ON_THE_LOGIN_PATH = ["AGENTS.md", "frontend/AGENTS.md", "frontend/src/AGENTS.md"]
DEEPEST = "backend/packages/harness/deerflow/agents/middlewares/retry.py"


def text_of(path: str, size: int) -> str:
    """Made-up text of ``size`` bytes that names its file, so a prompt shows what it holds."""
    head = f"# Instructions of {path}\n\n"
    body = "Keep each change small and say why in its message. " * (size // 52 + 1)
    return (head + body)[:size]


@pytest.fixture
def repository(tmp_path) -> Path:
    root = tmp_path / "repository"
    for path, size in TREE:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text_of(path, size))
    (root / "frontend" / "src" / "app" / "login").mkdir(parents=True)
    (root / LOGIN).write_text("export default function Login() {}\n")
    return root


def instructions(agent, root: Path, paths, **budgets):
    built = context_build(agent=agent, workspace_path=root, paths=paths, budgets=budgets)
    return built, built.assembly.layer("instruction_files")


def kept(layer) -> list[str]:
    return [k.source_id.removeprefix("file:") for k in layer.kept]


def reasons(layer) -> dict[str, str]:
    return {d.source_id.removeprefix("file:"): d.reason for d in layer.dropped}


# --- the 24-file tree, through the context builder ------------------------------------------
@pytest.mark.django_db
def test_a_task_on_the_login_page_gets_the_files_on_its_path(agent, repository, personas):
    instruction_update(agent=agent, text="Console rules win.", author=personas.admin)
    built, layer = instructions(agent, repository, [LOGIN])
    assert kept(layer) == [*ON_THE_LOGIN_PATH, DATABASE_SOURCE]
    assert layer.tokens <= layer.budget == DEFAULTS_BY_NAME["instruction_files"].budget
    elsewhere = reasons(layer)
    assert len(elsewhere) == len(TREE) - len(ON_THE_LOGIN_PATH)
    assert all(r == f"{NOT_ON_PATH} ({LOGIN})" for r in elsewhere.values()), elsewhere
    for path, _ in TREE:
        assert (f"# Instructions of {path}\n" in built.assembly.prompt) is (
            path in ON_THE_LOGIN_PATH
        )
    assert built.paths == (LOGIN,)


@pytest.mark.django_db
def test_the_old_budget_drops_the_least_specific_files_first_and_says_so(agent, repository):
    _, layer = instructions(agent, repository, [LOGIN], instruction_files=8_000)
    assert kept(layer) == ["frontend/src/AGENTS.md"]  # 6,440 tokens; with frontend's, 8,491
    why = reasons(layer)
    for dropped in ("AGENTS.md", "frontend/AGENTS.md"):
        assert why[dropped].startswith("over budget: the least specific files"), why[dropped]
    assert why["backend/AGENTS.md"].startswith(NOT_ON_PATH)


@pytest.mark.django_db
def test_the_deepest_path_of_the_tree_fits_the_default_budget_whole(agent, repository):
    _, layer = instructions(agent, repository, [DEEPEST])
    assert kept(layer) == [
        "AGENTS.md",
        "backend/AGENTS.md",
        "backend/packages/harness/deerflow/AGENTS.md",
        "backend/packages/harness/deerflow/agents/AGENTS.md",
        "backend/packages/harness/deerflow/agents/middlewares/AGENTS.md",
    ]
    assert "backend/packages/harness/deerflow/agents/memory/AGENTS.md" in reasons(layer)


@pytest.mark.django_db
def test_a_file_larger_than_the_whole_budget_is_dropped_whole_never_split(agent, repository):
    gateway = ["backend/app/gateway/routes.py"]
    _, layer = instructions(agent, repository, gateway, instruction_files=5_000)
    assert kept(layer) == ["AGENTS.md"]  # 3,445 tokens
    why = reasons(layer)
    assert why["backend/app/gateway/AGENTS.md"] == REASON_UNIT_TOO_LARGE  # 10,220 tokens
    assert why["backend/AGENTS.md"] == REASON_UNIT_TOO_LARGE  # 5,773 tokens
    assert "[... truncated ...]" not in layer.text


@pytest.mark.django_db
def test_a_task_that_names_no_path_gets_the_root_s_file_and_the_database_s(
    agent, repository, personas
):
    instruction_update(agent=agent, text="Console rules win.", author=personas.admin)
    _, layer = instructions(agent, repository, [])
    assert kept(layer) == ["AGENTS.md", DATABASE_SOURCE]
    assert set(reasons(layer).values()) == {f"{NOT_ON_PATH} (the task names no file)"}


@pytest.mark.django_db
def test_several_paths_take_the_files_of_each_once(agent, repository):
    _, layer = instructions(agent, repository, [LOGIN, "scripts/deploy.sh", LOGIN])
    assert kept(layer) == [  # shallower first, then by path
        "AGENTS.md",
        "frontend/AGENTS.md",
        "scripts/AGENTS.md",
        "frontend/src/AGENTS.md",
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("paths", [LOGIN, [None], [LOGIN, 3]])
def test_paths_not_given_as_a_list_of_strings_are_refused(agent, repository, paths):
    with pytest.raises(ContextError, match="as a list of strings"):
        context_build(agent=agent, workspace_path=repository, paths=paths)


# --- what a path covers ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("instruction_file", "paths", "covered"),
    [
        ("AGENTS.md", [], True),
        ("x/AGENTS.md", [], False),
        ("frontend/src/AGENTS.md", [LOGIN], True),
        ("frontend/src/app/login/AGENTS.md", [LOGIN], True),
        ("frontend/src/app/other/AGENTS.md", [LOGIN], False),
        ("frontends/AGENTS.md", ["frontend/x.ts"], False),  # a prefix of a name is not a folder
        ("backend/AGENTS.md", ["backend"], True),  # a folder named: its own file
        ("backend/AGENTS.md", ["backend/"], True),
        ("backend/app/AGENTS.md", ["backend/"], False),  # ... not those below it
        ("src/a/b/AGENTS.md", ["src/**/*.py"], True),  # a glob reaching below its prefix
        ("src/a/AGENTS.md", ["src/*/x.py"], True),
        ("src/AGENTS.md", ["src/*.py"], True),
        ("src/a/AGENTS.md", ["src/*.py"], False),  # ... or not
        ("docs/AGENTS.md", ["**/*.md"], True),
        ("docs/AGENTS.md", ["./docs/a.md"], True),
        ("app/AGENTS.md", ["docs/../app/x.py"], True),  # where the path really leads
        ("docs/AGENTS.md", ["docs/../app/x.py"], False),
        ("x/AGENTS.md", ["../x/a.md"], False),  # out of the workspace: nothing
        ("x/AGENTS.md", ["docs/../../x/a.md"], False),
        ("etc/AGENTS.md", ["/etc/x"], False),  # absolute, a home, a drive: not the workspace
        ("app/AGENTS.md", ["~/app/x.py"], False),
        ("app/AGENTS.md", ["C:/app/x.py"], False),
        ("docs/AGENTS.md", ["docs\\a.md"], True),
    ],
)
def test_what_a_path_covers(instruction_file, paths, covered):
    assert on_task_path(instruction_file, paths) is covered


FOLDERS = st.lists(st.sampled_from("abc"), min_size=0, max_size=3).map("/".join)


@settings(max_examples=150, deadline=None)
@given(
    files=st.sets(FOLDERS, min_size=1, max_size=12),
    touched=st.lists(FOLDERS, max_size=3),
)
def test_every_file_on_the_path_is_a_candidate_and_no_other(files, touched):
    """For any tree and any touched files: a file is a candidate exactly when its folder is
    the root or a folder on the way to a touched file; every other is reported, never lost."""
    records = [InstructionFile(f"{f}/AGENTS.md".lstrip("/"), b"rules " + f.encode()) for f in files]
    paths = [f"{t}/file.txt".lstrip("/") for t in touched]
    units, rejected = instruction_units(records, "from the database")
    scoped, reported = scope_to_task(units, rejected, paths)
    ancestors = {""} | {
        "/".join(t.split("/")[:depth]) for t in touched if t for depth in range(1, t.count("/") + 2)
    }
    assert {u.path.rpartition("/")[0] for u in scoped if u.path} == files & ancestors
    assert scoped[-1].source_id == DATABASE_SOURCE
    assert {r.path.rpartition("/")[0] for r in reported} == files - ancestors
    assert [u.source_id for u in scoped] == [u.source_id for u in units if u in scoped]
    assembly = assemble_default(scoped)
    assert all(d.reason.startswith("over budget") for d in assembly.dropped)


def assemble_default(units):
    spec = DEFAULTS_BY_NAME["instruction_files"]
    layer = Layer(spec.name, spec.strategy, spec.budget, tuple(units))
    return assemble([layer], ByteEstimate()).layers[0]


# --- the paths of a task ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("request_text", "paths"),
    [
        (f"Fix the login bug in {LOGIN}", (LOGIN,)),
        ("Summarize docs/notes.md", ("docs/notes.md",)),
        ("Rename docs/a.md to guides/b.md", ("docs/a.md", "guides/b.md")),
        ("Update docs/a.md using docs/b.md", ("docs/a.md", "docs/b.md")),
        ("What does the project do?", ()),
    ],
)
def test_a_task_s_paths_are_the_files_it_names(request_text, paths):
    assert set(task_paths(intake(request_text).to_json())) == set(paths)
    assert set(paths_of_request(request_text)) == set(paths)


def test_given_paths_win_over_the_task_text_and_a_refused_text_names_none():
    assert scope_paths("Summarize docs/notes.md", [" src/a.py ", ""]) == ("src/a.py",)
    assert scope_paths("Summarize docs/notes.md", []) == ("docs/notes.md",)
    assert paths_of_request("x" * 50_000) == ()
    assert paths_of_request("   ") == ()


# --- a run -----------------------------------------------------------------------------------
def notes_question(api, personas, agent, workspace):
    """A question about docs/notes.md, driven to its end; the model answers in one turn."""
    (workspace.root_path / "docs" / "notes.md").write_text("# Notes\n")
    api.answers.append(message([{"type": "text", "text": "Notes, nothing more."}]))
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="What does docs/notes.md say?",
        dispatch=False,
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    return run


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_run_sends_the_model_only_the_instruction_files_on_its_path(
    personas, agent, workspace, api
):
    root = workspace.root_path
    for folder, words in (("", "Root rules."), ("docs", "Docs rules."), ("app", "App rules.")):
        (root / folder).mkdir(exist_ok=True)
        (root / folder / "AGENTS.md").write_text(words)
    notes_question(api, personas, agent, workspace)
    system = "\n".join(block["text"] for block in api.requests[0]["body"]["system"])
    assert "Root rules." in system and "Docs rules." in system
    assert "App rules." not in system


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_run_records_the_configuration_it_used_and_keeps_it_after_edits(
    personas, agent, workspace, api, client
):
    root = workspace.root_path
    (root / "docs").mkdir()
    (root / "docs" / "AGENTS.md").write_text("Docs rules.")
    (root / "app").mkdir()
    (root / "app" / "AGENTS.md").write_text("App rules.")
    instruction_update(agent=agent, text="Console rules win.", author=personas.admin)
    run = notes_question(api, personas, agent, workspace)
    used = run.effective_config
    system = "\n".join(block["text"] for block in api.requests[0]["body"]["system"])
    files = {s["path"]: s["sha256"] for s in used["instructions"] if "path" in s}
    assert list(files) == ["AGENTS.md", "docs/AGENTS.md"]
    header = "<!-- instructions from docs/AGENTS.md -->\nDocs rules."
    assert files["docs/AGENTS.md"] == hashlib.sha256(header.encode()).hexdigest()
    assert header in system
    assert used["instructions"][-1] == {"source": DATABASE_SOURCE, "version": 1}
    assert used["instructions_scoped_to"] == ["docs/notes.md"]
    assert used["instructions_left_out"] == 1  # app/
    assert used["agent"] == {"slug": agent.slug, "model": agent.model, "max_turns": agent.max_turns}
    policy = policy_for_agent(agent)
    assert used["policy"] == {"name": policy.name, "version": policy.version}

    # Later edits change nothing of what the run says it used.
    (root / "docs" / "AGENTS.md").write_text("Docs rules, edited.")
    instruction_update(agent=agent, text="Console rules, edited.", author=personas.admin)
    run.refresh_from_db()
    assert run.effective_config == used
    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="run-config"' in page and "<code>docs/AGENTS.md</code>" in page
    assert "the console's, version 1" in page and files["docs/AGENTS.md"][:12] in page
    detail = client.get(f"/api/runs/{run.pk}/").json()
    assert detail["effective_config"] == used
