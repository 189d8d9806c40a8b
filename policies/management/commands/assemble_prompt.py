"""Print how a prompt is assembled for an agent and a workspace (SPEC C8)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from policies.context import ContextError, context_build, context_report, parse_budgets
from policies.task_scope import scope_paths

from ...models import Agent, Workspace


class Command(BaseCommand):
    help = "Show each layer (budget, tokens, kept, dropped and why) and the assembled prompt."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--agent", required=True, help="The agent's slug.")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--workspace", help="A workspace's slug or name.")
        where.add_argument("--workspace-path", help="Any folder, as a workspace.")
        parser.add_argument("--task", default="", help="The task text (the task_state layer).")
        parser.add_argument(
            "--path",
            action="append",
            default=[],
            help="A file, folder or glob the task touches; repeatable. Without it, the paths "
            "the task text names. Only the AGENTS.md files on the way to them are sent.",
        )
        parser.add_argument(
            "--budget",
            action="append",
            default=[],
            metavar="LAYER=TOKENS",
            help="Override a layer's budget for this assembly; repeatable.",
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            agent = Agent.objects.get(slug=options["agent"])
        except Agent.DoesNotExist:
            raise CommandError(f"No agent with the slug {options['agent']!r}.") from None
        workspace = None
        if options["workspace"]:
            name = options["workspace"]
            workspace = Workspace.objects.filter(Q(slug=name) | Q(name=name)).first()
            if workspace is None:
                raise CommandError(f"No workspace with the slug or name {name!r}.")
        try:
            built = context_build(
                agent=agent,
                workspace=workspace,
                workspace_path=options["workspace_path"],
                task=options["task"],
                paths=scope_paths(options["task"], options["path"]),
                budgets=parse_budgets(options["budget"]),
            )
        except ContextError as error:
            raise CommandError(str(error)) from None
        report = context_report(built)
        if options["json"]:
            self.stdout.write(json.dumps(report, ensure_ascii=False, indent=2))
            return
        self._print(report)

    def _print(self, report: dict[str, Any]) -> None:
        unit = " (estimated)" if report["estimated"] else ""
        self.stdout.write(f"Workspace {report['workspace']} · tokenizer {report['tokenizer']}")
        paths = ", ".join(report["paths"]) or "none (the root's instructions only)"
        self.stdout.write(f"Instruction files scoped to the task's paths: {paths}")
        for layer in report["layers"]:
            flag = " · truncated" if layer["truncated"] else ""
            self.stdout.write(
                f"\n{layer['position']:>2}. {layer['name']} [{layer['strategy']}] "
                f"{layer['tokens']}/{layer['budget']} tokens{unit}{flag}"
            )
            for kept in layer["kept"]:
                cut = ", truncated" if kept["truncated"] else ""
                self.stdout.write(f"     kept    {kept['source_id']} ({kept['tokens']}{cut})")
            for dropped in layer["dropped"]:
                self.stdout.write(
                    f"     dropped {dropped['source_id']} ({dropped['tokens']}): "
                    f"{dropped['reason']}"
                )
        for conflict in report["conflicts"]:
            self.stdout.write(f"\nConflict at {conflict['location']}: {conflict['source_ids']}")
        self.stdout.write(f"\n--- prompt: {report['tokens']} tokens{unit} ---\n")
        self.stdout.write(report["prompt"])
