"""Drop cached instruction loads, after editing AGENTS.md files outside the console."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from policies.instruction_cache import instructions_invalidate

from ...models import Agent


class Command(BaseCommand):
    help = "Drop cached instructions of one agent (--agent SLUG) or of every agent."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--agent", help="Only this agent's slug.")

    def handle(self, *args: Any, agent: str | None = None, **options: Any) -> None:
        if agent is None:
            instructions_invalidate()
            self.stdout.write("Dropped the cached instructions of every agent.")
            return
        try:
            found = Agent.objects.get(slug=agent)
        except Agent.DoesNotExist:
            raise CommandError(f"No agent with the slug {agent!r}.") from None
        instructions_invalidate(agent_id=found.pk)
        self.stdout.write(f"Dropped the cached instructions of {found.slug}.")
