"""Start daphne, the two Celery workers and Celery beat as one supervised group.

Why not honcho: it signals each child's whole process group and kills after 5 s, while a
Celery worker must get SIGTERM on its main process only and needs 7–9 s for a warm shutdown
(NOTES.md). Here Ctrl-C (or SIGTERM) sends SIGTERM to each child's main process, waits for
all of them, and kills a process group only if it is still there after the grace period.
If any child dies on its own, the others are stopped too, and the exit status says so.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

GRACE_SECONDS = 20


HOUSEKEEPING_THREADS = 4


def commands(*, host: str, port: int, worker_name: str = "worker@%h") -> dict[str, list[str]]:
    """The four processes of the console; the test harness and the benches start them from
    here too, so they run what ``make run`` runs.

    ``worker`` drives runs: the threads pool (settings: CELERY_WORKER_POOL) with
    HARNESS_RUN_THREADS threads (CELERY_WORKER_CONCURRENCY), on the runs queue only; and
    ``worker-2`` … up to HARNESS_RUN_PROCESSES, the same on the machine's other cores, each
    a Celery node of its own (``name-2@host``). ``housekeeping`` is a small threads pool for
    beat's sweepers and everything else, so a sweeper never waits behind a backlog of runs.
    Both are the README's production lines.
    """
    python = sys.executable
    celery = [python, "-m", "celery", "-A", "harness_console"]
    name, _, host_part = worker_name.partition("@")
    # One machine: no peers to gossip or mingle with, so the workers start faster.
    alone = ["--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    run_worker = [*celery, "worker", *alone, "--queues", settings.RUNS_QUEUE, "--hostname"]
    more_run_workers = {
        f"worker-{i}": [*run_worker, f"{name}-{i}@{host_part or '%h'}"]
        for i in range(2, settings.HARNESS_RUN_PROCESSES + 1)
    }
    return {
        "web": [
            python,
            "-m",
            "daphne",
            "-b",
            host,
            "-p",
            str(port),
            "harness_console.asgi:application",
        ],
        "worker": [*run_worker, worker_name],
        **more_run_workers,
        "housekeeping": [
            *celery,
            "worker",
            *alone,
            "--queues",
            f"{settings.HOUSEKEEPING_QUEUE},{settings.CELERY_TASK_DEFAULT_QUEUE}",
            "--concurrency",
            str(HOUSEKEEPING_THREADS),
            "--hostname",
            f"{name}-housekeeping@{host_part or '%h'}",
        ],
        "beat": [
            *celery,
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            settings.CELERY_BEAT_SCHEDULE_FILENAME,
        ],
    }


def served_base_url(host: str, port: int) -> str:
    """Where the console is reached when served on ``host:port``: an address that listens on
    every interface is reached on this machine at 127.0.0.1; an IPv6 one in brackets."""
    every_interface = ("", "0.0.0.0")  # noqa: S104 -- recognised, not bound to
    shown = "127.0.0.1" if host in every_interface else ("[::1]" if host == "::" else host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def child_environment(host: str, port: int) -> dict[str, str]:
    """The children's environment: links in emails and webhooks follow the served address
    unless ``HARNESS_BASE_URL`` already says where the console is reached (behind a proxy)."""
    env = dict(os.environ)
    env.setdefault("HARNESS_BASE_URL", served_base_url(host, port))
    return env


class Command(BaseCommand):
    help = (
        "Run the console: daphne on HOST:PORT, the run worker, the housekeeping worker and "
        "Celery beat. Ctrl-C stops all."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        env = child_environment(host, port)
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        # Before the children start: a Ctrl-C while they did raised here, and left the
        # ones started (each in a session of its own) running.
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        children = {
            name: subprocess.Popen(argv, start_new_session=True, env=env)
            for name, argv in commands(host=host, port=port).items()
        }
        died = self._wait_for_web(children, host, port, lambda: stopping)
        if died is None and not stopping:
            shown = served_base_url(host, port)
            self.stdout.write(f"Harness Console on {shown}/  (Ctrl-C stops it)")
        while not stopping and died is None:
            died = next((n for n, p in children.items() if p.poll() is not None), None)
            time.sleep(0.2)
        if died:
            self.stderr.write(f"{died} exited with status {children[died].returncode}; stopping.")
        self._stop_all(children)
        if died:
            sys.exit(1)

    @staticmethod
    def _wait_for_web(
        children: dict[str, subprocess.Popen], host: str, port: int, stopping: Any
    ) -> str | None:
        """Print the URL only once daphne accepts connections; return a child that died."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stopping():
            died = next((n for n, p in children.items() if p.poll() is not None), None)
            if died:
                return died
            try:
                socket.create_connection((host, port), timeout=0.5).close()
                return None
            except OSError:
                time.sleep(0.1)
        return None

    def _stop_all(self, children: dict[str, subprocess.Popen]) -> None:
        self.stdout.write("Stopping web, workers and beat (the workers finish their tasks first)…")
        for process in children.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for name, process in children.items():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop in {GRACE_SECONDS} s; killing it.")
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.stdout.write("Stopped.")
