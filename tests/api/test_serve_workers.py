"""`registry serve --workers N`: N processes answer on one port and stop together."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads children from /proc")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        kids += [int(k) for k in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return kids


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.slow
def test_two_workers_share_the_port_and_stop_together(sqlite_url: str) -> None:
    port = _free_port()
    env = {**os.environ, "REGISTRY_DATABASE_URL": sqlite_url}
    argv = [sys.executable, "-m", "registry.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"]
    primary = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        replicas: list[int] = []
        while time.monotonic() < deadline and not replicas:
            time.sleep(0.2)
            replicas = _children(primary.pid)
        assert len(replicas) == 1, "the primary starts one replica"
        answered = 0
        while time.monotonic() < deadline and answered < 20:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/artifacts", timeout=5) as resp:
                    assert resp.status == 200
                    answered += 1
            except OSError:
                time.sleep(0.2)
        assert answered == 20
        primary.send_signal(signal.SIGTERM)
        assert primary.wait(30) == 0
        assert _gone(replicas[0]), "the replica stops with the primary"
    finally:
        if primary.poll() is None:
            primary.kill()
            primary.wait()


def test_workers_must_be_positive() -> None:
    done = subprocess.run([sys.executable, "-m", "registry.cli", "serve", "--workers", "0"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "--workers" in done.stderr
