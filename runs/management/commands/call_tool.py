"""Run one tool outside a run, under a policy, and print its output (SPEC T4).

No approver is present here, so any decision but allow is refused. A refusal or a tool
error prints ``ok: false`` with the reason and exits non-zero.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from policies.core.default_policy import DEFAULT_POLICY_NAME
from policies.core.permissions import PolicyError
from policies.models import Workspace
from policies.permissions import parse_arguments, policy_load
from runs.tools.call import tool_call_run
from runs.tools.record import tool_output


class Command(BaseCommand):
    help = "Run one tool on a workspace under a policy; only an allow decision runs."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--workspace", required=True, help="A workspace's slug or name.")
        parser.add_argument("--tool", required=True)
        # Django reserves the name "args" for positional arguments: keep its own dest.
        parser.add_argument("--args", dest="tool_args", default="{}", help="Arguments as JSON.")
        parser.add_argument("--policy", default=DEFAULT_POLICY_NAME)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["workspace"]
        workspace = Workspace.objects.filter(Q(slug=name) | Q(name=name)).first()
        if workspace is None:
            raise CommandError(f"No workspace with the slug or name {name!r}.")
        try:
            policy = policy_load(options["policy"])
            arguments = parse_arguments(options["tool_args"])
        except PolicyError as error:
            raise CommandError(str(error)) from None
        record = tool_call_run(
            workspace=workspace, tool=options["tool"], arguments=arguments, policy=policy
        )
        output = tool_output(record)
        if options["json"]:
            self.stdout.write(json.dumps(output, ensure_ascii=False, indent=2))
        else:
            for key, value in output.items():
                if value not in (None, [], ""):
                    shown = (
                        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                    )
                    self.stdout.write(f"{key}: {shown}")
        if not output["ok"]:
            raise CommandError(output.get("error") or "The call failed.")
