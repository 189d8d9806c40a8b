"""Starts the real console stack as subprocesses: daphne, the two Celery workers and beat.

pytest-django's live server speaks no WebSockets, and the loop must run in a real worker, so
the tests (and the benchmarks) start both processes against the test databases, exactly as
``make run`` starts them against the real ones.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness_console.management.commands.serve import commands

# Debian's Chromium, as the probe of this machine starts it (NOTES.md).
CHROMIUM_EXECUTABLE = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def off_loop(fn, /, **kwargs):
    """Playwright's sync API keeps an event loop in the calling thread, where services cannot
    publish (async_to_sync refuses): call them from a plain thread, as a worker would."""
    from django.db import connection

    def call():
        try:
            return fn(**kwargs)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check, *, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise TimeoutError(f"Timed out after {timeout} s waiting for {what}.")


@dataclass
class LiveStack:
    """daphne on a free port, the run worker, the housekeeping worker and beat (the
    sweeper), on the test databases: what ``serve`` starts.

    ``extra_env`` reaches every process (the tests point the Anthropic SDK at a local fake
    server this way); workers can be killed with SIGKILL and started again, and more added.
    """

    log_dir: Path
    port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    generation: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["HARNESS_USE_TEST_DATABASES"] = "true"
        env["DJANGO_SETTINGS_MODULE"] = "harness_console.settings"
        env["PYTHONUNBUFFERED"] = "1"
        # One run worker, as serve starts on a one-core machine: the tests of killed and
        # frozen workers say which worker holds the runs; they start others by name.
        env["HARNESS_RUN_PROCESSES"] = "1"
        env.update(self.extra_env)
        return env

    def start(self, *, collectstatic: bool) -> LiveStack:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if collectstatic:
            subprocess.run(
                [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
                cwd=ROOT,
                env=self.env(),
                check=True,
            )
        argv = commands(host="127.0.0.1", port=self.port, worker_name=f"test-{self.port}@%h")
        self._spawn("web", argv["web"])
        self._spawn("beat", argv["beat"])
        self.start_worker("housekeeping", kind="housekeeping")
        self.start_worker("worker")
        wait_until(self._web_ready, timeout=120, what="daphne to answer")
        return self

    def start_worker(self, name: str = "worker", *, kind: str = "worker") -> None:
        """A Celery worker as serve starts it (a fresh log each time); returns once it
        consumes tasks. ``kind``: "worker" drives runs, "housekeeping" takes the sweepers
        and the default queue."""
        self.generation += 1
        argv = commands(
            host="127.0.0.1",
            port=self.port,
            worker_name=f"test-{self.port}-{name}-{self.generation}@%h",
        )[kind]
        self._spawn(name, argv)
        wait_until(lambda: "ready." in self.log(name), timeout=120, what=f"the Celery {name}")

    def kill_worker(self, name: str = "worker") -> None:
        """SIGKILL to the worker's whole process group: no warm shutdown, no cleanup."""
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def stop_worker(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = self.log_dir / f"{name}.log"
        if log.exists():  # keep the earlier life's log for a failure report
            log.rename(self.log_dir / f"{name}.{self.generation}.old.log")
        out = open(log, "wb")  # noqa: SIM115 - kept open for the child
        self.processes[name] = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _web_ready(self) -> bool:
        self._check_alive()
        try:
            with urllib.request.urlopen(f"{self.url}/login/", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited early:\n{self.log(name)[-3000:]}")

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM to each main process (a worker's pool children must not get it), then wait."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def clear_broker_folder(var_dir: Path) -> None:
    """The filesystem broker keeps messages of an earlier session; a fresh test run starts empty."""
    for folder in ("queue", "control"):
        path = var_dir / "broker" / folder
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
