"""The habits that keep the layout readable, held by the suite: small modules, short
functions, and imports at the top (an import hidden in a function hides a dependency,
usually one that dodges a cycle). The import contracts in pyproject.toml hold the layers."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("harness_console", "runs", "approvals", "policies", "evals")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_INNER_IMPORTS = 5


def sources() -> list[Path]:
    return sorted(
        path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
    )


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sources()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, "split these by concept"


def test_no_function_is_over_80_lines() -> None:
    long = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}, "split these by what they do"


def test_project_imports_inside_functions_are_few_and_say_why() -> None:
    inner = []
    for path in sources():
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for sub in ast.walk(node):
                project = isinstance(sub, ast.ImportFrom) and (
                    sub.level or (sub.module or "").split(".")[0] in APPS
                )
                if project:
                    above = lines[sub.lineno - 2].strip() if sub.lineno > 1 else ""
                    said = above.startswith("#") or "#" in lines[sub.lineno - 1]
                    inner.append((f"{path.relative_to(ROOT)}:{sub.lineno}", said))
    assert len(inner) <= MAX_INNER_IMPORTS, inner
    assert [where for where, said in inner if not said] == [], "say why no top import will do"
