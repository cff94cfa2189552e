"""The temporary Prefect server dies with the command: after SIGKILL (parent-death signal) and
within 5 s of SIGTERM. Real ``fairpca audit`` processes; bounded polling, no fixed sleeps."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairpca.flows.server import STOP_SECONDS, dying_with_parent

FAIRPCA = [sys.executable, "-c", "from fairpca.flows.entry import main; main()"]
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="parent-death signal and /proc are Linux"
)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux ``/proc``), children first."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie that only waits to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_until(condition, seconds: float, step: float = 0.05) -> float:
    """Poll ``condition`` for up to ``seconds``; the time it took (raises on timeout)."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > seconds:
            raise AssertionError(f"not within {seconds} s")
        time.sleep(step)
    return time.monotonic() - started


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _audit_with_server_up(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    """``fairpca audit`` on the bundled German data, once its temporary server answers:
    the process and the server's processes."""
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / ".prefect-home")}
    env.pop("PREFECT_API_URL", None)
    log = tmp_path / "cli.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [*FAIRPCA, "audit", "--dataset", "german", "-k", "2", "--variants", "pca,fair_pca",
             "--lambdas", "0", "--classifiers", "logreg", "--tracking-uri",
             f"sqlite:///{tmp_path}/m.db", "--output-dir", str(tmp_path / "out")],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def port() -> int | None:
        found = re.search(r"temporary server on http://127\.0\.0\.1:(\d+)", log.read_text())
        assert process.poll() is None, log.read_text()
        return int(found.group(1)) if found else None

    _wait_until(lambda: port() is not None, 180, step=0.2)
    _wait_until(lambda: _answers(port()), 120, step=0.2)
    servers = _descendants(process.pid)
    assert servers, "no temporary server process"
    return process, servers


@pytest.mark.slow
@linux_only
def test_sigkill_of_the_command_leaves_no_server_process(tmp_path):
    process, servers = _audit_with_server_up(tmp_path)
    process.kill()
    process.wait(timeout=10)
    took = _wait_until(lambda: not any(_alive(pid) for pid in servers), 10)
    print(f"server gone {took:.2f} s after SIGKILL")  # shown with -s


@pytest.mark.slow
@linux_only
def test_sigterm_stops_the_server_within_5_s_and_ends_the_command(tmp_path):
    process, servers = _audit_with_server_up(tmp_path)
    process.send_signal(signal.SIGTERM)
    took = _wait_until(lambda: not any(_alive(pid) for pid in servers), STOP_SECONDS)
    print(f"server gone {took:.2f} s after SIGTERM")
    assert process.wait(timeout=60) == 128 + signal.SIGTERM


@linux_only
def test_a_wrapped_command_is_killed_when_its_parent_is_killed(tmp_path):
    spawn = (
        "import subprocess, sys\n"
        "from fairpca.flows.server import dying_with_parent\n"
        "child = subprocess.Popen(dying_with_parent([sys.executable, *sys.argv[1:]]))\n"
        "print(child.pid, flush=True)\n"
        "child.wait()\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", spawn, "-c", "import time; time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    child = int(parent.stdout.readline())
    sleeping = [sys.executable, "-c", "import time; time.sleep(600)"]
    cmdline = Path(f"/proc/{child}/cmdline")
    _wait_until(lambda: cmdline.read_text().split("\0")[:-1] == sleeping, 30)  # exec'd
    parent.kill()
    parent.wait(timeout=10)
    _wait_until(lambda: not _alive(child), 10)


def test_other_commands_and_platforms_are_left_unwrapped(monkeypatch):
    assert dying_with_parent(["/bin/true"]) == ["/bin/true"]
    monkeypatch.setattr(sys, "platform", "darwin")
    assert dying_with_parent([sys.executable, "-V"]) == [sys.executable, "-V"]


def test_a_command_spawned_outside_the_main_thread_is_left_unwrapped():
    import threading

    box = {}
    thread = threading.Thread(target=lambda: box.update(cmd=dying_with_parent([sys.executable])))
    thread.start()
    thread.join()
    assert box["cmd"] == [sys.executable]
