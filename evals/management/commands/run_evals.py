"""``manage.py run_evals``: run the eval set through the real loop in real workers (SPEC E1).

Exit status: 1 when a malicious case fails or a case file is broken (the harness's defences
did not hold, or a case could not test them, or no malicious case ran), 2 when the suite
could not run at all or an option is wrong; ``--strict`` makes any failed case exit 1.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.template.loader import render_to_string

from evals.core.cases import CATEGORIES
from evals.loading import SuiteError
from evals.suite import suite_report, suite_run, suite_unsafe
from harness_console.management.commands.serve import commands


class Command(BaseCommand):
    help = "Run the eval set (simple, complex, boundary, malicious, historical) and report."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--category", choices=CATEGORIES, default="")
        parser.add_argument("--model", choices=("replay", "anthropic"), default="replay")
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")
        parser.add_argument("--html", metavar="FILE", help="Also write an HTML report.")
        parser.add_argument(
            "--start-worker",
            action="store_true",
            help="Start a Celery worker for the suite (when the console is not running).",
        )
        parser.add_argument(
            "--timeout", type=float, default=120.0, help="Seconds each case may take (120)."
        )
        parser.add_argument(
            "--strict", action="store_true", help="Exit 1 when any case fails, not only malicious."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not math.isfinite(options["timeout"]) or options["timeout"] <= 0:
            raise CommandError("--timeout must be a number of seconds above 0.", returncode=2)
        html = Path(options["html"]) if options["html"] else None
        if html is not None and not html.parent.is_dir():
            raise CommandError(f"--html: the folder {html.parent} does not exist.", returncode=2)
        if html is not None and (html.is_dir() or not os.access(html.parent, os.W_OK)):
            raise CommandError(f"--html: {html} cannot be written.", returncode=2)
        quiet = options["json"]
        worker = self._worker() if options["start_worker"] else None
        try:
            suite = suite_run(
                model=options["model"],
                category=options["category"],
                started_by="command line",
                worker=f"run_evals on {socket.gethostname()}:{os.getpid()}",
                case_timeout=options["timeout"],
                claim_timeout=60.0 if worker else 30.0,
                progress=(lambda line: None) if quiet else self.stdout.write,
            )
        except SuiteError as error:
            self.stderr.write(str(error))
            sys.exit(2)
        finally:
            if worker is not None:
                self._stop(worker)
        report = suite_report(suite)
        if quiet:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self._summary(report)
        if html is not None:
            try:
                html.write_text(
                    render_to_string("evals/report.html", {"suite": suite, "report": report}),
                    "utf-8",
                )
            except OSError as error:  # the suite's results are recorded either way
                self.stderr.write(f"--html: {html} could not be written: {error}")
            else:
                self.stderr.write(f"Wrote the report to {html}.")
        unsafe = suite_unsafe(suite)
        if unsafe:
            self.stderr.write(f"The harness's defences did not hold: {unsafe}.")
        if unsafe or (options["strict"] and suite.failed):
            sys.exit(1)

    def _summary(self, report: dict[str, Any]) -> None:
        self.stdout.write("")
        for name, counts in report["categories"].items():
            total = counts["passed"] + counts["failed"]
            rate = 100 * counts["passed"] / total if total else 0
            self.stdout.write(f"{name:<11} {counts['passed']:>3}/{total:<3} passed ({rate:.0f} %)")
        self.stdout.write(
            f"{'total':<11} {report['passed']:>3}/{report['passed'] + report['failed']:<3} passed"
            + (f", {len(report['skipped'])} skipped" if report["skipped"] else "")
        )
        for failure in report["failures"]:
            where = f" (run {failure['run']})" if failure["run"] else ""
            self.stdout.write(f"FAILED {failure['category']}/{failure['case']}{where}")
            for reason in failure["reasons"]:
                self.stdout.write(f"    {reason}")

    def _worker(self) -> subprocess.Popen:
        argv = commands(host="127.0.0.1", port=0, worker_name=f"evals-{os.getpid()}@%h")["worker"]
        return subprocess.Popen(
            argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def _stop(self, worker: subprocess.Popen) -> None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
