"""Context configuration in the admin (SPEC C1, C8): validation, versions, preview."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from policies.models import Agent, BusinessRule, InstructionVersion, LayerConfig
from policies.preview_chart import budget_figure
from policies.services import instruction_update
from tests.plotly_bundle import assert_drawable

pytestmark = pytest.mark.django_db

INLINE = "layer_configs"
RULES = "business_rules"


def agent_form(agent, layers=(), rules=(), **fields):
    data = {
        "slug": agent.slug,
        "name": agent.name,
        "identity": agent.identity,
        "model": agent.model,
        "max_turns": agent.max_turns,
        "compaction_whole_tokens": agent.compaction_whole_tokens,
        "compaction_summary_tokens": agent.compaction_summary_tokens,
        "compaction_keep_turns": agent.compaction_keep_turns,
        f"{INLINE}-TOTAL_FORMS": len(layers),
        f"{INLINE}-INITIAL_FORMS": 0,
        f"{RULES}-TOTAL_FORMS": len(rules),
        f"{RULES}-INITIAL_FORMS": 0,
        **fields,
    }
    for i, (name, position, strategy, budget) in enumerate(layers):
        data.update(
            {
                f"{INLINE}-{i}-name": name,
                f"{INLINE}-{i}-position": position,
                f"{INLINE}-{i}-strategy": strategy,
                f"{INLINE}-{i}-budget": budget,
            }
        )
    for i, text in enumerate(rules):
        data.update({f"{RULES}-{i}-text": text, f"{RULES}-{i}-active": "on"})
    return data


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def post_agent(admin_client, agent, **kwargs):
    return admin_client.post(
        reverse("admin:policies_agent_change", args=[agent.pk]), agent_form(agent, **kwargs)
    )


def test_an_admin_overrides_layers_and_adds_rules(admin_client, agent):
    response = post_agent(
        admin_client,
        agent,
        layers=[("task_state", 1, "keep_or_drop", 500)],
        rules=["Pages are in English."],
    )
    assert response.status_code == 302
    config = LayerConfig.objects.get(agent=agent)
    assert (config.name, config.position, config.strategy, config.budget) == (
        "task_state",
        1,
        "keep_or_drop",
        500,
    )
    assert BusinessRule.objects.get(agent=agent).text == "Pages are in English."


@pytest.mark.parametrize(
    ("layers", "fields", "message"),
    [
        ([("task_state", 1, "keep_or_drop", -5)], {}, "A budget cannot be negative."),
        ([("task_state", 1, "keep_or_drop", 10**9)], {}, "larger than any model reads"),
        ([("task_state", 1, "truncate_head", 5)], {}, "Select a valid choice"),
        (
            [("task_state", 1, "keep_or_drop", 5), ("task_state", 2, "keep_or_drop", 5)],
            {},
            "The layer task_state is configured twice",
        ),
        (
            [("task_state", 1, "keep_or_drop", 5), ("identity", 1, "keep_or_drop", 5)],
            {},
            "both sit at position 1",
        ),
        ([("no_such_layer", 1, "keep_or_drop", 5)], {}, "Select a valid choice"),
        ([], {"identity": "   "}, "This field is required"),
    ],
)
def test_bad_configuration_is_refused_with_a_clear_message(
    admin_client, agent, layers, fields, message
):
    response = post_agent(admin_client, agent, layers=layers, **fields)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not LayerConfig.objects.exists()
    agent.refresh_from_db()
    assert agent.identity == "You test things."


def test_an_instruction_edit_adds_a_version_and_keeps_history(admin_client, personas, agent):
    instruction_update(agent=agent, text="line one\nline two\n", author=personas.admin)
    add = reverse("admin:policies_instructionversion_add")
    prefilled = admin_client.get(add, {"agent": agent.pk}).content.decode()
    assert "line one" in prefilled  # the form starts from the text in force
    admin_client.post(add, {"agent": agent.pk, "text": "line one\nline 2\n", "note": "n"})
    versions = list(InstructionVersion.objects.filter(agent=agent).order_by("version"))
    assert [v.version for v in versions] == [1, 2]
    page = admin_client.get(
        reverse("admin:policies_instructionversion_change", args=[versions[1].pk])
    ).content.decode()
    assert "-line two" in page and "+line 2" in page
    compare = admin_client.get(
        reverse("admin:policies_instructionversion_compare", args=[versions[1].pk]),
        {"against": versions[0].pk},
    ).content.decode()
    assert "-line two" in compare and "+line 2" in compare


def test_an_instruction_version_cannot_be_changed_or_deleted(admin_client, personas, agent):
    version = instruction_update(agent=agent, text="v1", author=personas.admin)
    url = reverse("admin:policies_instructionversion_change", args=[version.pk])
    admin_client.post(url, {"agent": agent.pk, "text": "forged", "note": ""})
    delete = admin_client.post(
        reverse("admin:policies_instructionversion_delete", args=[version.pk]), {"post": "yes"}
    )
    assert delete.status_code == 403
    assert InstructionVersion.objects.get().text == "v1"
    version.text = "forged"
    with pytest.raises(ValueError, match="never rewritten"):
        version.save()


def test_restoring_copies_an_old_version_forward(admin_client, personas, agent):
    first = instruction_update(agent=agent, text="original", author=personas.admin)
    instruction_update(agent=agent, text="changed", author=personas.admin)
    url = reverse("admin:policies_instructionversion_restore", args=[first.pk])
    assert "-changed" in admin_client.get(url).content.decode()  # it shows what will change
    admin_client.post(url)
    latest = InstructionVersion.objects.filter(agent=agent).order_by("-version").first()
    assert (latest.version, latest.text, latest.restored_from) == (3, "original", first)
    assert latest.note == "Restored version 1"


def test_oversized_instructions_are_refused_and_nothing_is_saved(admin_client, agent):
    response = admin_client.post(
        reverse("admin:policies_instructionversion_add"),
        {"agent": agent.pk, "text": "x" * 200_001, "note": ""},
    )
    assert response.status_code == 302
    assert not InstructionVersion.objects.exists()
    messages = [str(m) for m in response.wsgi_request._messages]
    assert any("the limit is 200,000" in m for m in messages)


def test_the_preview_shows_each_layer_the_chart_and_the_prompt(admin_client, agent, workspace):
    (workspace.root_path / "README.md").write_text("Project context " * 1200)
    oldest = BusinessRule.objects.create(agent=agent, text="Oldest rule " * 50)
    BusinessRule.objects.create(agent=agent, text="Newest rule")
    LayerConfig.objects.create(
        agent=agent, name="business_rules", position=4, strategy="drop_whole_units", budget=10
    )
    html = admin_client.get(
        reverse("admin:policies_agent_preview", args=[agent.pk]),
        {"workspace": workspace.pk, "task": "Fix the link"},
    ).content.decode()
    assert 'data-layer="identity"' in html and 'data-layer="output_schema"' in html
    assert "larger than the whole layer budget" in html  # the old rule, dropped whole
    assert "(truncated)" in html  # the project context
    assert 'id="budget-plot"' in html and "vendor/plotly-basic.min.js" in html
    assert "You test things." in html and "Fix the link" in html
    figure = json.loads(html.split('id="budget-figure">')[1].split("</script>")[0])
    assert_drawable(figure)
    budget, used, marks = figure["data"]
    rules = used["y"].index("4. business_rules")
    tokens = int(used["text"][rules].removesuffix(" / 10"))
    assert f"<td>{tokens} / 10</td>" in html and 0 < tokens <= 10
    assert budget["x"][rules] == 100  # its share of its own budget, not of the largest
    assert used["x"][rules] == tokens * 10
    at = {label: n for n, label in enumerate(marks["y"])}
    assert marks["text"][at["4. business_rules"]] == "1 dropped"
    assert f"dropped rule:{oldest.pk} (" in marks["hovertext"][at["4. business_rules"]]
    assert marks["text"][at["3. project_context"]] == "1 cut"
    assert "cut file:README.md to " in marks["hovertext"][at["3. project_context"]]


def layer(name, position, tokens, budget, kept=(), dropped=(), truncated=False):
    return {
        "name": name,
        "position": position,
        "strategy": "drop_whole_units",
        "budget": budget,
        "tokens": tokens,
        "truncated": truncated,
        "kept": [{"source_id": s, "tokens": t, "truncated": cut} for s, t, cut in kept],
        "dropped": [{"source_id": s, "tokens": t, "reason": "over budget"} for s, t in dropped],
    }


def test_the_chart_puts_each_layer_against_its_own_budget_and_marks_what_it_left_out():
    many = [(f"rule:{n}", 40) for n in range(15)]
    report = {
        "estimated": True,
        "layers": [
            layer("identity", 1, 500, 1000, kept=[("agent:identity", 500, False)]),
            layer(
                "instruction_files",
                2,
                600,
                24_000,
                [("file:<b>x</b>.md", 600, True)],
                truncated=True,
            ),
            layer("business_rules", 3, 200, 100, dropped=many),
            layer("memory", 4, 0, 0),
        ],
    }
    figure = budget_figure(report)
    assert_drawable(figure)
    budget, used, marks = figure["data"]
    assert used["y"] == ["1. identity", "2. instruction_files", "3. business_rules", "4. memory"]
    assert budget["x"] == [100, 100, 100, 0]
    assert used["x"] == [50.0, 2.5, 200.0, 0.0]
    assert used["text"] == ["500 / 1,000", "600 / 24,000", "200 / 100", "budget 0: left out"]
    assert used["marker"]["color"] == ["#2a5bd7", "#f79009", "#b42318", "#2a5bd7"]
    assert figure["layout"]["xaxis"]["range"] == [0, 240]  # the widest bar and its text fit
    assert "(counts estimated)" in figure["layout"]["xaxis"]["title"]["text"]
    assert (marks["y"], marks["text"]) == (
        ["2. instruction_files", "3. business_rules"],
        ["1 cut", "15 dropped"],
    )
    files, rules = (text.split("<br>") for text in marks["hovertext"])
    assert files == ["cut file:&lt;b&gt;x&lt;/b&gt;.md to 600 tokens to fit"]  # shown as written
    assert rules[0] == "dropped rule:0 (40 tokens): over budget"
    assert len(rules) == 13 and rules[-1] == "and 3 more (the table lists all)"


def test_a_chart_with_nothing_left_out_has_no_marks():
    report = {"estimated": False, "layers": [layer("identity", 1, 10, 100)]}
    figure = budget_figure(report)
    assert [trace["name"] for trace in figure["data"]] == [
        "the layer's budget (100 %)",
        "tokens used",
    ]
    assert figure["layout"]["xaxis"]["range"] == [0, 140]


@pytest.mark.parametrize("who", ["approver", "operator", "ops", "outsider"])
def test_only_admins_preview_prompts_or_reload(client, personas, agent, workspace, who):
    client.force_login(getattr(personas, who))
    preview = client.get(reverse("admin:policies_agent_preview", args=[agent.pk]))
    reload = client.post(
        reverse("admin:policies_agent_reload", args=[agent.pk]), {"workspace": workspace.pk}
    )
    assert preview.status_code == 302 and "/admin/login/" in preview["Location"]
    assert reload.status_code == 302 and "/admin/login/" in reload["Location"]


def test_an_agent_without_identity_cannot_be_created(admin_client):
    response = admin_client.post(
        reverse("admin:policies_agent_add"),
        agent_form(Agent(slug="new", name="New", identity=""), identity=""),
    )
    assert response.status_code == 200
    assert not Agent.objects.filter(slug="new").exists()


def test_opening_the_preview_shows_the_first_workspace_at_once(admin_client, agent, workspace):
    html = admin_client.get(
        reverse("admin:policies_agent_preview", args=[agent.pk])
    ).content.decode()
    assert 'data-layer="identity"' in html and "You test things." in html


def test_a_malformed_agent_in_the_instruction_form_is_ignored_not_a_crash(admin_client):
    response = admin_client.get(reverse("admin:policies_instructionversion_add"), {"agent": "abc"})
    assert response.status_code == 200


def test_a_diff_keeps_lines_apart_when_the_text_has_no_final_newline(admin_client, personas, agent):
    first = instruction_update(agent=agent, text="one\ntwo", author=personas.admin)
    second = instruction_update(agent=agent, text="one\nthree", author=personas.admin)
    html = admin_client.get(
        reverse("admin:policies_instructionversion_compare", args=[second.pk]),
        {"against": first.pk},
    ).content.decode()
    assert "-two\n+three\n" in html


def test_saving_unchanged_instructions_adds_no_version(admin_client, personas, agent):
    instruction_update(agent=agent, text="same", author=personas.admin)
    response = admin_client.post(
        reverse("admin:policies_instructionversion_add"),
        {"agent": agent.pk, "text": "same", "note": ""},
        follow=True,
    )
    assert "nothing saved" in response.content.decode()
    assert InstructionVersion.objects.filter(agent=agent).count() == 1


def test_an_override_may_change_only_the_budget(admin_client, agent, workspace):
    response = post_agent(admin_client, agent, layers=[("business_rules", "", "", 7)])
    assert response.status_code == 302
    report = admin_client.get(
        reverse("admin:policies_agent_preview", args=[agent.pk]), {"workspace": workspace.pk}
    ).content.decode()
    assert '<tr data-layer="business_rules">\n      <td>4</td>' in report
    assert "0 / 7" in report and "drop_whole_units" in report


def test_two_overrides_may_swap_positions_in_one_save(admin_client, agent):
    LayerConfig.objects.create(agent=agent, name="memory", position=1)
    LayerConfig.objects.create(agent=agent, name="business_rules", position=4)
    data = agent_form(agent)
    rows = list(LayerConfig.objects.filter(agent=agent).order_by("name"))
    data.update({f"{INLINE}-TOTAL_FORMS": 2, f"{INLINE}-INITIAL_FORMS": 2})
    for i, (row, position) in enumerate(zip(rows, (1, 4), strict=True)):  # business_rules, memory
        data.update(
            {
                f"{INLINE}-{i}-id": row.pk,
                f"{INLINE}-{i}-agent": agent.pk,
                f"{INLINE}-{i}-name": row.name,
                f"{INLINE}-{i}-position": position,
                f"{INLINE}-{i}-strategy": "",
                f"{INLINE}-{i}-budget": "",
            }
        )
    response = admin_client.post(reverse("admin:policies_agent_change", args=[agent.pk]), data)
    assert response.status_code == 302
    positions = dict(LayerConfig.objects.filter(agent=agent).values_list("name", "position"))
    assert positions == {"business_rules": 1, "memory": 4}


def test_reload_from_disk_keeps_the_task_being_previewed(admin_client, agent, workspace):
    response = admin_client.post(
        reverse("admin:policies_agent_reload", args=[agent.pk]),
        {"workspace": workspace.pk, "task": "Fix the link"},
    )
    assert "task=Fix+the+link" in response["Location"]


def test_the_browser_icon_is_found_from_any_page(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("favicon.svg")


@pytest.fixture
def scoped_workspace(workspace):
    for folder, words in (("docs", "Docs rules."), ("app", "App rules.")):
        (workspace.root_path / folder).mkdir()
        (workspace.root_path / folder / "AGENTS.md").write_text(words)
    (workspace.root_path / "AGENTS.md").write_text("Root rules.")
    return workspace


def preview(admin_client, agent, workspace, **query) -> str:
    url = reverse("admin:policies_agent_preview", args=[agent.pk])
    return admin_client.get(url, {"workspace": workspace.pk, **query}).content.decode()


def test_the_preview_scopes_instruction_files_to_the_task_it_is_given(
    admin_client, agent, scoped_workspace
):
    html = preview(admin_client, agent, scoped_workspace, task="Fix a typo in docs/guide.md")
    assert "scoped to the task's paths: <code>docs/guide.md</code>" in html
    assert "Docs rules." in html and "Root rules." in html
    assert "file:app/AGENTS.md (0): not on the task&#x27;s path (docs/guide.md)" in html
    # Paths given win over the task's; none at all leaves the root's file alone.
    html = preview(admin_client, agent, scoped_workspace, task="Fix docs/x.md", paths="app/a.py")
    assert "App rules." in html and "file:docs/AGENTS.md (0): not on the task" in html
    html = preview(admin_client, agent, scoped_workspace)
    assert "no path: the task names none" in html and "Docs rules." not in html.split("<h2>")[-1]


@pytest.mark.parametrize("bad", ["/etc/passwd", "docs/../../x", "../x"])
def test_a_path_outside_the_workspace_is_refused_by_the_preview(
    admin_client, agent, scoped_workspace, bad
):
    html = preview(admin_client, agent, scoped_workspace, paths=bad)
    assert "give paths relative to the workspace, inside it" in html
    assert 'id="layers"' not in html


def test_reload_from_disk_keeps_the_paths_being_previewed(admin_client, agent, workspace):
    response = admin_client.post(
        reverse("admin:policies_agent_reload", args=[agent.pk]),
        {"workspace": workspace.pk, "task": "", "path": ["docs/a.md", "app/b.py"]},
    )
    assert "paths=docs%2Fa.md%0Aapp%2Fb.py" in response["Location"]
