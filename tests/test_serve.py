"""`make run`'s last step: daphne, two workers and beat as one group that Ctrl-C stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

from tests.stack import ROOT, free_port, wait_until
from tests.test_settings_env import VARIABLES


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has stopped all the same.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[-1][0] != "Z"


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_ctrl_c_stops_web_workers_and_beat_cleanly(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(HARNESS_VAR_DIR=str(tmp_path / "var"), PYTHONUNBUFFERED="1")
    env["HARNESS_RUN_PROCESSES"] = "2"
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
    serve = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def ready() -> bool:
            text = (tmp_path / "serve.log").read_text(errors="replace")
            if "ready." not in text or "beat: Starting" not in text:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_until(ready, timeout=120, what="web, worker and beat")  # a loaded machine
        group = children_of(serve.pid)
        descendants = group + [c for pid in group for c in children_of(pid)]
        assert len(group) == 5  # web, two run workers, the housekeeping worker, beat
        serve.send_signal(signal.SIGINT)
        assert serve.wait(timeout=40) == 0
        time.sleep(0.5)
        assert [pid for pid in descendants if alive(pid)] == []
        text = (tmp_path / "serve.log").read_text(errors="replace")
        assert "Stopped." in text
        assert "killing it" not in text
    finally:
        if serve.poll() is None:
            serve.kill()


def test_make_run_serves_where_it_is_told_and_links_follow_the_served_address(monkeypatch):
    from harness_console.management.commands.serve import child_environment, served_base_url

    dry = subprocess.run(
        ["make", "-n", "run", "PORT=8100", "HOST=0.0.0.0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "manage.py serve --host 0.0.0.0 --port 8100" in dry
    default = subprocess.run(
        ["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "manage.py serve --host 127.0.0.1 --port 8000" in default
    anywhere = "0.0.0.0"  # noqa: S104 -- every interface: a value tested, not bound to
    assert served_base_url(anywhere, 8100) == "http://127.0.0.1:8100"
    assert served_base_url("192.168.1.7", 8000) == "http://192.168.1.7:8000"
    assert served_base_url("::", 8000) == "http://[::1]:8000"
    assert served_base_url("fe80::1", 8000) == "http://[fe80::1]:8000"
    monkeypatch.delenv("HARNESS_BASE_URL", raising=False)
    assert child_environment(anywhere, 8100)["HARNESS_BASE_URL"] == "http://127.0.0.1:8100"
    monkeypatch.setenv("HARNESS_BASE_URL", "https://console.example.com")  # behind a proxy
    assert child_environment(anywhere, 8100)["HARNESS_BASE_URL"] == "https://console.example.com"


def test_serve_starts_one_run_worker_per_process_it_is_given(settings):
    """HARNESS_RUN_PROCESSES run workers, each a Celery node of its own on the runs queue
    with the threads pool; one housekeeping worker whatever their number."""
    from harness_console.management.commands.serve import commands

    settings.HARNESS_RUN_PROCESSES = 3
    argv = commands(host="127.0.0.1", port=8000, worker_name="runs@box")
    runs = {name: cmd for name, cmd in argv.items() if name.startswith("worker")}
    assert sorted(runs) == ["worker", "worker-2", "worker-3"]
    names = [cmd[cmd.index("--hostname") + 1] for cmd in runs.values()]
    assert names == ["runs@box", "runs-2@box", "runs-3@box"]
    assert all(cmd[cmd.index("--queues") + 1] == settings.RUNS_QUEUE for cmd in runs.values())
    assert sorted(set(argv) - set(runs)) == ["beat", "housekeeping", "web"]
    settings.HARNESS_RUN_PROCESSES = 1
    assert [name for name in commands(host="127.0.0.1", port=8000) if "worker" in name] == [
        "worker"
    ]
