from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Migrate every configured database (embedded: also the channel layer file)."

    def handle(self, *args: Any, **options: Any) -> None:
        for alias in settings.DATABASES:
            call_command(
                "migrate", database=alias, interactive=False, verbosity=options["verbosity"]
            )
