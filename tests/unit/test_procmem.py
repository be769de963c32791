"""The benchmarks' process roles: a child the JVM forked and that has not executed its own program
yet carries the JVM's VmHWM, so it must not be measured as the Python driver or a Python process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from harness import procmem

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads Linux's /proc")


@contextmanager
def process(argv0: str, *args: str) -> Iterator[int]:
    """A sleeping process whose command line is `argv0`, `-c`, its program, then `args`."""
    child = subprocess.Popen(["bash", "-c", 'exec -a "$0" "$1" -c "import time; time.sleep(30)" "${@:2}"',
                              argv0, sys.executable, *args])
    try:
        deadline = time.monotonic() + 10
        while procmem.argv(child.pid)[:1] != [argv0] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procmem.argv(child.pid)[3:] == list(args)
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_a_jvm_fork_naming_python_and_the_job_in_its_arguments_is_not_a_python_process() -> None:
    # A forked JVM's command line: the classpath names the venv's pyspark, the arguments the job.
    java = "/usr/lib/jvm/java-17/bin/java"
    with process(java, "-cp", "/venv/lib/python3.11/site-packages/pyspark/jars/*", "jobs/forwarder.py") as pid:
        assert procmem.role(pid, jvm_pid=1, driver_pid=-1) == procmem.JVM_FORK


def test_python_processes_by_program() -> None:
    with process(sys.executable, "-m", "pyspark.daemon") as pid:
        assert procmem.role(pid, jvm_pid=1, driver_pid=-1) == "python-worker"
    with process(sys.executable, "-m", "pyspark.sql.streaming.python_streaming_source_runner") as pid:
        assert procmem.role(pid, jvm_pid=1, driver_pid=-1) == "python-driver-runner"
        assert procmem.role(pid, jvm_pid=1, driver_pid=pid) == "driver"
