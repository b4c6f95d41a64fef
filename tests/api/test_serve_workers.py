"""`registry serve --workers N`: N processes answer on one port and stop together."""

from __future__ import annotations

import collections
import http.client
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


@pytest.mark.slow
def test_keep_alive_connections_even_out_over_the_workers(sqlite_url: str) -> None:
    """24 keep-alive connections, split by the kernel's hash however it falls, end up within
    SLACK of an even split: a process over its share closes connections after answering,
    and they reconnect. The process answering is told by its request ids' prefix."""
    from registry.api.balance import SLACK

    port = _free_port()
    env = {**os.environ, "REGISTRY_DATABASE_URL": sqlite_url}
    argv = [sys.executable, "-m", "registry.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"]
    primary = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conns: list[http.client.HTTPConnection] = []
    try:
        deadline = time.monotonic() + 60
        while len(_listening(port)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_listening(port)) == 2, "both processes listen"
        shares_files = [a for a in _open_files(primary.pid) if a.endswith(".connections")]
        assert len(shares_files) == 1
        conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(24)]
        owner: dict[int, str] = {}
        closed = 0
        for _ in range(30):  # rounds of one request per connection
            closed_now = 0
            for i, conn in enumerate(conns):
                conn.request("GET", "/healthz")
                resp = conn.getresponse()
                resp.read()
                assert resp.status == 200
                owner[i] = resp.getheader("X-Request-Id", "")[:20]
                if (resp.getheader("Connection") or "").lower() == "close":
                    conn.close()
                    conns[i] = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                    closed_now += 1
            closed += closed_now
            if closed_now == 0 and len(set(owner.values())) == 2:
                break
        split = sorted(collections.Counter(owner.values()).values())
        assert len(split) == 2 and split[1] <= 12 + SLACK, (split, closed)
        primary.send_signal(signal.SIGTERM)
        assert primary.wait(30) == 0
        assert not Path(shares_files[0]).exists(), "the primary removes the counts file"
    finally:
        for conn in conns:
            conn.close()
        if primary.poll() is None:
            primary.kill()
            primary.wait()


def _listening(port: int) -> list[str]:
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return [r[9] for r in rows if r[3] == "0A" and int(r[1].rpartition(":")[2], 16) == port]


def _open_files(pid: int) -> list[str]:
    """The paths a process holds open or mapped."""
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return [line.split(maxsplit=5)[5] for line in maps if len(line.split(maxsplit=5)) == 6]


def test_workers_must_be_positive() -> None:
    done = subprocess.run([sys.executable, "-m", "registry.cli", "serve", "--workers", "0"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "--workers" in done.stderr
