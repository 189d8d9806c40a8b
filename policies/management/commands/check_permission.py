"""Print the decision a policy gives a tool call, the rule that decided and why (SPEC P6)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from policies.core.paths import PathRefused
from policies.core.permissions import PolicyError
from policies.permissions import parse_arguments, permission_check, policy_load, verdict_report


class Command(BaseCommand):
    help = "Decide a tool call under a policy: allow, ask, ask_strong or deny, with the rule."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--policy", required=True)
        parser.add_argument("--tool", required=True)
        parser.add_argument("--path", help="A path relative to the workspace.")
        # Django reserves the name "args" for positional arguments: keep its own dest.
        parser.add_argument("--args", dest="tool_args", help="The call's arguments as JSON.")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            verdict = permission_check(
                policy=policy_load(options["policy"]),
                tool=options["tool"],
                path=options["path"],
                arguments=parse_arguments(options["tool_args"]),
            )
        except (PolicyError, PathRefused) as error:
            if options["json"]:
                self.stdout.write(
                    json.dumps(
                        {
                            "decision": "deny",
                            "human_only": False,
                            "rule": None,
                            "reason": str(error),
                        }
                    )
                )
            raise CommandError(str(error)) from None
        report = verdict_report(verdict)
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
            return
        human = " (a person must decide: nothing may stand in)" if report["human_only"] else ""
        self.stdout.write(f"{report['decision']}{human}")
        self.stdout.write(f"rule:   {report['rule'] or '(none)'}")
        self.stdout.write(f"reason: {report['reason']}")
        for item in report["considered"]:
            mark = "✓" if item["matched"] else "·"
            self.stdout.write(f"  {mark} {item['rule']}: {item['why']}")
