"""The permission engine (SPEC P1–P4, P6): levels, glob rules, deny wins, the default
policy's cases, grants, and a person for production changes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.core.default_policy import DEFAULT_POLICY
from policies.core.permissions import Call, Grant, Policy, PolicyError, Rule, decide

R = Rule


def call(tool="createDraft", path=None, level="L2", side_effect="filesystem_write"):
    return Call(tool, level, side_effect, path)


def test_double_star_spans_folders():
    policy = Policy("p", "L2", (R("src", "*", "allow", "src/**"),))
    assert decide(policy, call(path="src/a/b/c.md")).decision == "allow"
    assert decide(policy, call(path="src/x.md")).decision == "allow"
    assert decide(policy, call(path="docs/src/x.md")).decision == "deny"  # not under src/


@given(
    st.permutations(
        [
            R("allow-all", "*", "allow", "**"),
            R("deny-config", "*", "deny", "config/**"),
            R("ask-docs", "*", "ask", "docs/**"),
        ]
    )
)
def test_deny_wins_whatever_the_order(rules):
    policy = Policy("p", "L2", tuple(rules))
    verdict = decide(policy, call(path="config/app.yaml"))
    assert (verdict.decision, verdict.rule) == ("deny", "deny-config")


def test_otherwise_the_first_matching_rule_decides():
    policy = Policy(
        "p", "L2", (R("ask-docs", "*", "ask", "docs/**"), R("allow-all", "*", "allow", "**"))
    )
    assert decide(policy, call(path="docs/a.md")).rule == "ask-docs"
    assert decide(policy, call(path="src/a.md")).rule == "allow-all"


def test_nothing_matching_is_denied():
    verdict = decide(Policy("p", "L2", ()), call(path="a.md"))
    assert (verdict.decision, verdict.rule) == ("deny", None)
    assert "no rule matches" in verdict.reason


def test_the_level_ceiling_comes_before_any_rule():
    policy = Policy("p", "L1", (R("all", "*", "allow"),))
    verdict = decide(policy, call(path="a.md", level="L2"))
    assert verdict.decision == "deny" and "above this policy's ceiling L1" in verdict.reason


@pytest.mark.parametrize("path", ["Config/app.yaml", "CONFIG/x", "config/SUB/y"])
def test_case_games_do_not_slip_past_a_deny(path):
    policy = Policy("p", "L2", (R("deny", "*", "deny", "config/**"), R("all", "*", "allow", "**")))
    assert decide(policy, call(path=path)).decision == "deny"


# The five cases of P3, on the seeded default policy.
@pytest.mark.parametrize(
    ("tool", "level", "side", "path", "expected", "human_only"),
    [
        ("readSource", "L1", "none", "docs/a.md", "allow", False),  # reading: automatic
        ("createDraft", "L2", "filesystem_write", "docs/a.md", "allow", False),  # drafts: auto
        ("commitDraft", "L2", "filesystem_write", "docs/a.md", "ask", False),  # diff, confirm
        ("deleteFile", "L3", "filesystem_write", "docs/a.md", "ask_strong", False),  # strong
        ("renameFile", "L3", "filesystem_write", "docs/a.md", "ask_strong", False),
        ("publish", "L2", "production_change", None, "ask", True),  # always a person
    ],
)
def test_the_default_policy(tool, level, side, path, expected, human_only):
    verdict = decide(DEFAULT_POLICY, Call(tool, level, side, path))
    assert (verdict.decision, verdict.human_only) == (expected, human_only)
    assert verdict.rule and verdict.reason


@pytest.mark.parametrize("path", [".env", "app/.env.local", "keys/server.pem", ".git/config"])
def test_the_default_policy_denies_secrets_and_git_internals(path):
    assert decide(DEFAULT_POLICY, Call("readSource", "L1", "none", path)).decision == "deny"


def test_a_grant_remembers_an_ask_for_this_run_only_for_its_tool_and_paths():
    grants = [Grant("commitDraft", "docs/**", granted_by="april")]
    remembered = decide(
        DEFAULT_POLICY, Call("commitDraft", "L2", "filesystem_write", "docs/guide/a.md"), grants
    )
    assert remembered.decision == "allow" and "remembered for this run by april" in (
        remembered.reason
    )
    elsewhere = decide(
        DEFAULT_POLICY, Call("commitDraft", "L2", "filesystem_write", "src/a.py"), grants
    )
    assert elsewhere.decision == "ask"


def test_no_grant_stands_in_for_a_strong_confirmation_or_a_person():
    grants = [Grant("*", "**")]
    delete = decide(DEFAULT_POLICY, Call("deleteFile", "L3", "filesystem_write", "a.md"), grants)
    publish = decide(DEFAULT_POLICY, Call("publish", "L2", "production_change"), grants)
    assert delete.decision == "ask_strong"
    assert (publish.decision, publish.human_only) == ("ask", True)


def test_an_allow_rule_cannot_skip_the_person_for_a_production_change():
    policy = Policy("lax", "L3", (R("all", "*", "allow"),))
    verdict = decide(policy, Call("publish", "L2", "production_change"))
    assert (verdict.decision, verdict.human_only) == ("ask", True)


def test_every_rule_considered_is_reported():
    verdict = decide(DEFAULT_POLICY, Call("readSource", "L1", "none", "docs/a.md"))
    assert [c.rule_id for c in verdict.considered] == [r.id for r in DEFAULT_POLICY.rules]
    assert [c.rule_id for c in verdict.considered if c.matched] == ["read"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decision": "maybe"}, "unknown decision"),
        ({"tool": " "}, "tool pattern is empty"),
        ({"path": "/etc/**"}, "relative to the workspace"),
    ],
)
def test_a_malformed_rule_is_refused(kwargs, message):
    with pytest.raises(PolicyError, match=message):
        Rule(**{"id": "r", "tool": "*", "decision": "allow", **kwargs})


# --- a folder's glob names the folder; the root is named only by stars (issue 16) ---------
@pytest.mark.parametrize("path", ["secrets", "Secrets", "secrets/a", "secrets/a/b.txt"])
def test_a_deny_of_a_folders_contents_denies_the_folder_itself(path):
    policy = Policy("p", "L3", (R("no", "*", "deny", "secrets/**"), R("all", "*", "allow")))
    assert decide(policy, call(tool="readSource", path=path, level="L1")).decision == "deny"


@pytest.mark.parametrize("path", ["secretsx", "docs/secrets", "secret"])
def test_a_folders_glob_names_no_neighbour(path):
    policy = Policy("p", "L3", (R("no", "*", "deny", "secrets/**"), R("all", "*", "allow")))
    assert decide(policy, call(tool="readSource", path=path, level="L1")).decision == "allow"


def test_the_root_is_named_only_by_a_glob_of_stars():
    from policies.core.paths import ROOT
    from policies.core.permissions import glob_matcher

    for pattern in ("**", "*", "**/*"):
        assert glob_matcher(pattern, ignore_case=False)(ROOT)
    for pattern in ("secrets/**", "**/.env", ".git/**", "{a,b}/**"):
        assert not glob_matcher(pattern, ignore_case=True)(ROOT)
    assert glob_matcher("{a,b}/**", ignore_case=False)("b")
    assert glob_matcher("x/**/*", ignore_case=False)("x")


@pytest.mark.parametrize("pattern", ["secrets", "secrets/", "Secrets"])
def test_a_deny_of_a_folder_denies_what_is_in_it(pattern):
    policy = Policy("p", "L3", (R("no", "*", "deny", pattern), R("all", "*", "allow")))
    for path in ("secrets", "secrets/key.txt", "secrets/a/b"):
        assert decide(policy, call(tool="readSource", path=path, level="L1")).decision == "deny"
    assert decide(policy, call(tool="readSource", path="secretsx", level="L1")).decision == "allow"
