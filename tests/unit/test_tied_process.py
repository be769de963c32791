"""Processes the tests and the job start (brokers, forwarder runs) end when their starter is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.procmem import stat_fields
from synclib.embedded.broker import tied_to_this_process

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 10.0
UNTIED = tied_to_this_process(["true"]) == ["true"]  # no setpriv with --pdeathsig here

STARTER = """
import subprocess, sys, time
from harness.procmem import stat_fields
from synclib.embedded.broker import tied_to_this_process
child = subprocess.Popen(tied_to_this_process(["sleep", "300"]))
print(child.pid, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for init to reap it)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


@pytest.mark.skipif(UNTIED or not os.path.isdir("/proc"),
                    reason="needs Linux's /proc and util-linux's setpriv with --pdeathsig")
def test_a_tied_process_ends_when_its_starter_is_killed() -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert starter.stdout is not None
        child = int(starter.stdout.readline())
        assert alive(child)
        starter.send_signal(signal.SIGKILL)
        starter.wait(DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), f"process {child} outlived its starter by {DEADLINE_S} s"
    finally:
        starter.kill()


@pytest.mark.skipif(UNTIED, reason="needs util-linux's setpriv with --pdeathsig")
def test_a_tied_command_does_not_run_once_its_starter_is_no_longer_its_parent(tmp_path: Path) -> None:
    """As when the starter dies before the parent-death signal is set (the child is then an
    orphan, which the signal would never reach): here another process starts the command."""
    ran = tmp_path / "ran"
    command = tied_to_this_process(["touch", str(ran)])
    other = subprocess.run([sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))",
                            *command], check=False)
    assert other.returncode != 0 and not ran.exists()
    subprocess.run(command, check=True)
    assert ran.exists()


def test_a_command_started_off_the_main_thread_is_left_as_it_is() -> None:
    commands: list[list[str]] = []
    worker = threading.Thread(target=lambda: commands.append(tied_to_this_process(["sleep", "1"])))
    worker.start()
    worker.join()
    assert commands == [["sleep", "1"]]
