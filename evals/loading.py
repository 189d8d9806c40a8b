"""Loading the eval set (SPEC E1): the shipped case files and the console's active cases.

A case that cannot be loaded is not dropped: it comes back as an error, and the suite
records it as a broken case (a case must not pass by not running). The suite lays out
every case before any run starts, so two cases of one name, or two configurations of one
MCP server, are errors too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from .core.cases import CATEGORIES, Case, CaseError
from .core.parsing import case_parse
from .models import EvalCase

BROKEN = "broken"  # the pseudo-category of case files that cannot be run
CONSOLE_SOURCE = "console case "


def console_source(name: str) -> str:
    """How a console case (an ``EvalCase`` row) is named where a file case names its path."""
    return f"{CONSOLE_SOURCE}{name}"


class SuiteError(Exception):
    """The suite cannot run (another one runs, no worker, no key); nothing was judged.

    Defined here, with the loading, because the first thing that can refuse a suite is its
    category; the suite's later steps raise it too."""


@dataclass
class Loaded:
    cases: list[Case] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # broken case files, with why


def cases_load(category: str = "") -> Loaded:
    """The shipped case files of ``HARNESS_EVAL_DIRS`` and the console's active cases. A
    broken case is an error of the suite (it must not pass by not running); two cases of
    one name are too."""
    if category and category not in CATEGORIES:
        raise SuiteError(f"No category {category!r}; the categories: {', '.join(CATEGORIES)}.")
    loaded = Loaded()
    _files_load(loaded)
    _rows_load(loaded)
    unique = _unique(loaded)
    loaded.cases = [c for c in unique if not category or c.category == category]
    return loaded


def _files_load(loaded: Loaded) -> None:
    """The case files, each in the folder of its category."""
    for folder in settings.HARNESS_EVAL_DIRS:
        for path in sorted(Path(folder).glob("*/*.json")) if Path(folder).is_dir() else ():
            source = _source_of(path, folder)
            try:
                data = json.loads(path.read_text("utf-8"))
                case = case_parse(data, source=source)
                if case.category != path.parent.name:
                    raise CaseError(f"{source}: its category {case.category!r} is not its folder's")
            except (OSError, ValueError) as error:
                loaded.errors.append(str(error) if source in str(error) else f"{source}: {error}")
                continue
            loaded.cases.append(case)


def _rows_load(loaded: Loaded) -> None:
    """The console's active cases, parsed as a file's object is."""
    for row in EvalCase.objects.filter(active=True).order_by("name"):
        try:
            loaded.cases.append(case_parse(row.data, source=console_source(row.name)))
        except CaseError as error:
            loaded.errors.append(str(error))


def _unique(loaded: Loaded) -> list[Case]:
    """The loaded cases but a second of one name, or one that configures an MCP server
    another case configures: each of those is an error instead."""
    unique: list[Case] = []
    seen: dict[str, str] = {}  # case name → the source that has it
    servers: dict[str, str] = {}  # MCP server name → the source that configures it
    for case in loaded.cases:
        if case.name in seen:
            loaded.errors.append(f"{case.source}: the name {case.name!r} is {seen[case.name]}'s")
            continue
        taken = [m.name for m in case.mcp if m.name in servers]
        if taken:  # all cases are laid out before any runs: one server, one configuration
            loaded.errors.append(
                f"{case.source}: the MCP server {taken[0]} is {servers[taken[0]]}'s too"
            )
            continue
        seen[case.name] = case.source
        servers.update({m.name: case.source for m in case.mcp})
        unique.append(case)
    return unique


def _source_of(path: Path, folder: Path) -> str:
    """A case file as a reader finds it: its path in the repository (evals/cases/simple/a.json),
    or, for a folder elsewhere, from that folder's parent."""
    base = Path(settings.BASE_DIR).resolve()
    return str(path.relative_to(base if path.is_relative_to(base) else folder.parent))
