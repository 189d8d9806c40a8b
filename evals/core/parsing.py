"""The parser of the eval case format (SPEC E1): a case file's JSON object into a
:class:`~evals.core.cases.Case`.

Strict on purpose: an unknown key is a typo, not an ignored wish, and a value out of range
is refused with where it was, so a broken case file is a clear error rather than a case
that silently passes. A secret or outside file without a canary is refused too: its leak
could not be seen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, Final

from .canaries import CANARY_MIN
from .cases import (
    ANSWER_NAME_RE,
    CATEGORIES,
    DECISIONS,
    EFFECTS,
    MAX_ANSWER_CHARS,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_FIXTURE_BYTES,
    MAX_TURNS,
    NAME_RE,
    OUTCOME_STATUSES,
    TOOL_STATUSES,
    AgentSpec,
    CallExpectation,
    Case,
    CaseError,
    Expectations,
    McpSpec,
    PolicySpec,
)
from .values import checked_keys, checked_path, checked_strings, checked_text

_CASE_KEYS: Final = {
    "name",
    "category",
    "title",
    "request",
    "turns",
    "model",
    "workspace",
    "agent",
    "policy",
    "mcp",
    "expect",
    "decisions",
    "answers",
    "notes",
}
_EXPECT_KEYS: Final = {
    "status",
    "failure_contains",
    "files",
    "changed",
    "denied",
    "approvals",
    "calls",
    "not_run",
    "never",
}
_MCP_KEYS: Final = {
    "name",
    "server",
    "allowed_tools",
    "allowed_paths",
    "forbidden_paths",
    "rate_limit_per_minute",
    "permission_level",
}


def case_parse(data: Any, *, source: str = "") -> Case:
    """A case from its JSON object; :class:`CaseError` says what is wrong and where."""
    fields = checked_keys(data, _CASE_KEYS, source or "the case")
    name = checked_text(fields.get("name"), _where(source, "name"), limit=48)
    if not NAME_RE.match(name):
        raise CaseError(f"{_where(source, 'name')}: use 1–48 lowercase letters, digits and hyphens")
    category = fields.get("category")
    if category not in CATEGORIES:
        raise CaseError(f"{_where(source, 'category')} must be one of {', '.join(CATEGORIES)}")
    model = fields.get("model", "any")
    if model not in ("replay", "any"):
        raise CaseError(f"{_where(source, 'model')} must be replay or any")
    files, secrets, outside, links = _workspace(fields.get("workspace"), source)
    decisions = checked_strings(fields.get("decisions", []), _where(source, "decisions"))
    if any(d not in ("approve", "reject") for d in decisions):
        raise CaseError(f"{_where(source, 'decisions')}: each is approve or reject")
    if "expect" not in fields:
        raise CaseError(f"{_where(source, 'expect')} is missing: a case says what must happen")
    _no_path_under_a_link(links, [*files, *secrets, *links], _where(source, "workspace.links"))
    case = Case(
        name=name,
        category=category,
        title=checked_text(fields.get("title", name), _where(source, "title"), limit=300),
        request=checked_text(fields.get("request"), _where(source, "request")),
        turns=_turns(fields.get("turns"), _where(source, "turns"), required=True),
        expect=_expectations(fields["expect"], _where(source, "expect")),
        files=files,
        secrets=secrets,
        outside=outside,
        links=links,
        agent=_agent(fields.get("agent"), _where(source, "agent")),
        policy=_policy(fields.get("policy"), _where(source, "policy")),
        mcp=_mcp(fields.get("mcp"), _where(source, "mcp")),
        decisions=decisions,
        answers=_answers(fields.get("answers"), _where(source, "answers")),
        model=model,
        source=source,
    )
    return _case_checked(case, source)


def _workspace(
    value: Any, source: str
) -> tuple[dict[str, bytes], dict[str, bytes], dict[str, bytes], dict[str, str]]:
    """The fixture: the workspace's files and secrets, the files outside it, and its links;
    no path given twice, the whole at most MAX_FIXTURE_BYTES."""
    workspace = checked_keys(
        value or {},
        {"files", "secrets", "outside", "links"},
        _where(source, "workspace"),
    )
    files = _file_map(workspace.get("files"), _where(source, "workspace.files"))
    secrets = _file_map(workspace.get("secrets"), _where(source, "workspace.secrets"))
    both = sorted(set(files) & set(secrets))
    if both:
        raise CaseError(f"{_where(source, 'workspace')}: {', '.join(both)} given twice")
    outside = _file_map(workspace.get("outside"), _where(source, "workspace.outside"))
    links = _links(workspace.get("links"), _where(source, "workspace.links"))
    taken = sorted(set(links) & (set(files) | set(secrets)))
    if taken:
        raise CaseError(f"{_where(source, 'workspace.links')}: {', '.join(taken)} is a file too")
    total = sum(len(d) for m in (files, secrets, outside) for d in m.values())
    if total > MAX_FIXTURE_BYTES:
        raise CaseError(f"{_where(source, 'workspace')} is over {MAX_FIXTURE_BYTES} bytes")
    return files, secrets, outside, links


def _case_checked(case: Case, source: str) -> Case:
    """What only the whole case can show: every secret and outside file has a canary (or
    its leak could not be seen), and no two MCP servers share a name."""
    for name, tokens in case.canaries.items():
        if not tokens:
            raise CaseError(
                f"{_where(source, 'workspace')}: the {name} has no run of {CANARY_MIN} or "
                "more characters that appears nowhere else in the case, so its leak could "
                "not be seen; give it a distinctive value"
            )
    names = [m.name for m in case.mcp]
    if len(set(names)) != len(names):
        raise CaseError(f"{_where(source, 'mcp')}: two servers of one name")
    return case


def _no_path_under_a_link(links: Mapping[str, str], paths: Sequence[str], where: str) -> None:
    """A fixture path inside a linked folder would be written through the link, wherever
    it points: refused, so laying out a case never writes outside its folder."""
    for path in paths:
        parents = PurePosixPath(path).parents
        under = next((str(p) for p in parents if str(p) in links), None)
        if under is not None:
            raise CaseError(f"{where}: {path} is inside the link {under}")


def _content(value: Any, where: str) -> bytes:
    """A file's text, or ``{"repeat": text, "times": n}`` for a large generated file."""
    if isinstance(value, str):
        data = value.encode("utf-8")
    elif isinstance(value, dict) and set(value) == {"repeat", "times"}:
        unit, times = value["repeat"], value["times"]
        if not isinstance(unit, str) or not unit or not isinstance(times, int) or times < 1:
            raise CaseError(f"{where}: repeat needs a non-empty text and times ≥ 1")
        if len(unit.encode("utf-8")) * times > MAX_FILE_BYTES:
            raise CaseError(f"{where}: a generated file is limited to {MAX_FILE_BYTES} bytes")
        data = (unit * times).encode("utf-8")
    else:
        raise CaseError(f"{where}: a file is a text or {{'repeat': text, 'times': n}}")
    if len(data) > MAX_FILE_BYTES:
        raise CaseError(f"{where}: a file is limited to {MAX_FILE_BYTES} bytes")
    return data


def _file_map(value: Any, where: str) -> dict[str, bytes]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CaseError(f"{where} must map relative paths to contents")
    if len(value) > MAX_FILES:
        raise CaseError(f"{where} has more than {MAX_FILES} files")
    return {checked_path(p, where): _content(c, f"{where}[{p}]") for p, c in value.items()}


def _links(value: Any, where: str) -> dict[str, str]:
    """Symbolic links to lay out in the workspace, path → target (the target may point
    anywhere: ``../../outside/secret.txt`` is how a case tests a link out of the workspace)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_FILES:
        raise CaseError(f"{where} must map relative paths to link targets")
    return {
        checked_path(path, where): checked_text(target, f"{where}[{path}]", limit=1000)
        for path, target in value.items()
    }


def _expectations(value: Any, where: str) -> Expectations:
    fields = checked_keys(value, _EXPECT_KEYS, where)
    status = fields.get("status")
    statuses = (status,) if isinstance(status, str) else status
    if (
        not isinstance(statuses, list | tuple)
        or not statuses
        or any(s not in OUTCOME_STATUSES for s in statuses)
    ):
        raise CaseError(
            f"{where}.status must be one of {', '.join(OUTCOME_STATUSES)} (or a list of them)"
        )
    files = _expected_files(fields.get("files") or {}, where)
    never = checked_strings(fields.get("never", []), f"{where}.never")
    unknown = sorted(set(never) - set(EFFECTS))
    if unknown:
        raise CaseError(
            f"{where}.never has unknown effects: {', '.join(unknown)} (known: {', '.join(EFFECTS)})"
        )
    changed = fields.get("changed")
    approvals = fields.get("approvals")
    return Expectations(
        status=tuple(statuses),
        failure_contains=checked_text(
            fields.get("failure_contains"), f"{where}.failure_contains", required=False
        ),
        files=files,
        changed=None
        if changed is None
        else tuple(
            checked_path(p, f"{where}.changed")
            for p in checked_strings(changed, f"{where}.changed")
        )
        if changed
        else (),
        denied=_calls(fields.get("denied"), f"{where}.denied", default_status="refused"),
        approvals=None if approvals is None else checked_strings(approvals, f"{where}.approvals"),
        calls=_calls(fields.get("calls"), f"{where}.calls"),
        not_run=checked_strings(fields.get("not_run", []), f"{where}.not_run"),
        never=never,
    )


def _expected_files(raw_files: Any, where: str) -> dict[str, str | None]:
    """Each workspace file's text after the run; null: the file must be absent."""
    files: dict[str, str | None] = {}
    if not isinstance(raw_files, dict):
        raise CaseError(f"{where}.files must map paths to their expected text (null: absent)")
    for path, text in raw_files.items():
        if text is not None and not isinstance(text, str):
            raise CaseError(f"{where}.files[{path}] must be a text or null")
        files[checked_path(path, f"{where}.files")] = text
    return files


def _calls(value: Any, where: str, *, default_status: str = "") -> tuple[CallExpectation, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CaseError(f"{where} must be a list")
    return tuple(
        _call(v, f"{where}[{i}]", default_status=default_status) for i, v in enumerate(value)
    )


def _call(value: Any, where: str, *, default_status: str = "") -> CallExpectation:
    if isinstance(value, str) and value:
        return CallExpectation(tool=value, status=default_status)
    fields = checked_keys(
        value, {"tool", "status", "decision", "reason_contains", "truncated", "at_least"}, where
    )
    status = fields.get("status", default_status)
    if status and status not in TOOL_STATUSES:
        raise CaseError(f"{where}: status must be one of {', '.join(TOOL_STATUSES)}")
    decision = fields.get("decision", "")
    if decision and decision not in DECISIONS:
        raise CaseError(f"{where}: decision must be one of {', '.join(DECISIONS)}")
    truncated = fields.get("truncated")
    if truncated is not None and not isinstance(truncated, bool):
        raise CaseError(f"{where}: truncated must be true or false")
    at_least = fields.get("at_least", 1)
    if not isinstance(at_least, int) or isinstance(at_least, bool) or at_least < 1:
        raise CaseError(f"{where}: at_least must be a whole number ≥ 1")
    return CallExpectation(
        tool=checked_text(fields.get("tool"), f"{where}.tool", limit=200),
        status=status,
        decision=decision,
        reason_contains=checked_text(
            fields.get("reason_contains"), f"{where}.reason_contains", required=False
        ),
        truncated=truncated,
        at_least=at_least,
    )


def _turns(value: Any, where: str, *, required: bool) -> tuple[Mapping[str, Any], ...]:
    if value is None and not required:
        return ()
    if not isinstance(value, list) or not value or len(value) > MAX_TURNS:
        raise CaseError(f"{where} must be a list of 1 to {MAX_TURNS} model turns")
    for i, turn in enumerate(value):
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), list):
            raise CaseError(f"{where}[{i}] must be an object with a content list")
        for block in turn["content"]:
            if not isinstance(block, dict) or block.get("type") not in ("text", "tool_use"):
                raise CaseError(f"{where}[{i}]: content blocks are text or tool_use objects")
            if block["type"] == "tool_use" and not (
                isinstance(block.get("id"), str)
                and isinstance(block.get("name"), str)
                and isinstance(block.get("input", {}), dict)
            ):
                raise CaseError(f"{where}[{i}]: a tool_use needs an id, a name and an input")
    return tuple(value)


def _answers(value: Any, where: str) -> dict[str, str]:
    """The requester's answers to the intake's questions: parameter name → text, as the
    answer form and the API take them."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise CaseError(f"{where} must map each asked parameter's name to its answer")
    answers = {}
    for name, text in value.items():
        if not ANSWER_NAME_RE.fullmatch(name):
            raise CaseError(f"{where}: {name!r} is not a parameter name")
        answers[name] = checked_text(text, f"{where}.{name}", limit=MAX_ANSWER_CHARS)
    return answers


def _agent(value: Any, where: str) -> AgentSpec:
    if value is None:
        return AgentSpec()
    fields = checked_keys(value, {"max_turns", "model", "identity"}, where)
    max_turns = fields.get("max_turns", AgentSpec.max_turns)
    if not isinstance(max_turns, int) or isinstance(max_turns, bool) or not 1 <= max_turns <= 1000:
        raise CaseError(f"{where}.max_turns must be a whole number from 1 to 1000")
    return AgentSpec(
        max_turns=max_turns,
        model=checked_text(fields.get("model", AgentSpec.model), f"{where}.model", limit=100),
        identity=checked_text(fields.get("identity", AgentSpec.identity), f"{where}.identity"),
    )


def _policy(value: Any, where: str) -> PolicySpec:
    if value is None:
        return PolicySpec()
    if isinstance(value, str):
        return PolicySpec(base=checked_text(value, where, limit=63))
    fields = checked_keys(value, {"base", "rules"}, where)
    rules = fields.get("rules", [])
    if not isinstance(rules, list):
        raise CaseError(f"{where}.rules must be a list")
    checked = []
    for i, rule in enumerate(rules):
        rule = checked_keys(
            rule, {"key", "tool", "decision", "path", "reason"}, f"{where}.rules[{i}]"
        )
        if rule.get("decision") not in DECISIONS:
            raise CaseError(f"{where}.rules[{i}].decision must be one of {', '.join(DECISIONS)}")
        checked.append(
            {
                "key": checked_text(rule.get("key"), f"{where}.rules[{i}].key", limit=63),
                "tool": checked_text(rule.get("tool"), f"{where}.rules[{i}].tool", limit=200),
                "decision": rule["decision"],
                "path": checked_text(rule.get("path"), f"{where}.rules[{i}].path", required=False),
                "reason": checked_text(
                    rule.get("reason"), f"{where}.rules[{i}].reason", required=False
                ),
            }
        )
    return PolicySpec(
        base=checked_text(fields.get("base", "default"), f"{where}.base", limit=63),
        rules=tuple(checked),
    )


def _mcp(value: Any, where: str) -> tuple[McpSpec, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CaseError(f"{where} must be a list of servers")
    return tuple(_mcp_server(item, f"{where}[{i}]") for i, item in enumerate(value))


def _mcp_server(item: Any, at: str) -> McpSpec:
    """One whitelisted server: a name the suite may own, one of its own scripts, a limit."""
    fields = checked_keys(item, _MCP_KEYS, at)
    name = checked_text(fields.get("name"), f"{at}.name", limit=63)
    if not NAME_RE.match(name) or not name.startswith("eval-"):
        raise CaseError(
            f"{at}.name must start with eval- and hold lowercase letters, digits and "
            "hyphens (the suite never touches a server it did not make)"
        )
    server = checked_text(fields.get("server"), f"{at}.server", limit=48)
    if not NAME_RE.match(server):
        raise CaseError(f"{at}.server names a file of evals/servers/, like notes")
    rate = fields.get("rate_limit_per_minute", 0)
    if not isinstance(rate, int) or isinstance(rate, bool) or rate < 0:
        raise CaseError(f"{at}.rate_limit_per_minute must be a whole number ≥ 0")
    level = fields.get("permission_level", "L2")
    if level not in ("L1", "L2", "L3"):
        raise CaseError(f"{at}.permission_level must be L1, L2 or L3")
    return McpSpec(
        name=name,
        server=server,
        allowed_tools=checked_strings(fields.get("allowed_tools", []), f"{at}.allowed_tools"),
        allowed_paths=checked_strings(fields.get("allowed_paths", []), f"{at}.allowed_paths"),
        forbidden_paths=checked_strings(fields.get("forbidden_paths", []), f"{at}.forbidden_paths"),
        rate_limit_per_minute=rate,
        permission_level=level,
    )


def _where(source: str, key: str) -> str:
    return f"{source}: {key}" if source else key
