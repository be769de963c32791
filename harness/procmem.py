"""Peak resident memory and CPU time of a Spark driver's process tree, from /proc (Linux; no psutil).

`VmHWM` is a process's peak RSS. Writing `5` to `/proc/<pid>/clear_refs` resets it to the
current RSS, so one long-lived process tree can be measured phase by phase. A sampler
thread keeps the highest value seen per process, and its latest CPU time, so processes
that exit mid-phase count (their CPU time up to the last sample).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from synclib.background import BackgroundThread

KIB = 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessPeak:
    pid: int
    role: str
    peak_bytes: int


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as file:
            return file.read().decode("utf-8", "replace")
    except OSError:
        return None


def peak_rss(pid: int) -> int | None:
    """VmHWM of `pid` in bytes; None when the process is gone."""
    status = _read(f"/proc/{pid}/status")
    if status is None:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * KIB
    return None


def reset_peak(pid: int) -> bool:
    """Reset VmHWM of `pid` to its current RSS; False when not permitted or gone."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as file:
            file.write("5")
        return True
    except OSError:
        return False


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after `(comm)` (state first, then ppid, ...; comm may hold
    spaces and parentheses); None when the process is gone."""
    stat = _read(f"/proc/{pid}/stat")
    return None if stat is None else stat.rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of `pid`; None when the process is gone."""
    fields = stat_fields(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(int(entry))):
            parents[int(entry)] = int(fields[1])
    return parents


def descendants(root: int, exclude: Iterable[int] = (), parents: Mapping[int, int] | None = None) -> list[int]:
    """`root` and every process below it, skipping the subtrees of `exclude`; `parents`: a
    snapshot from `_parents()` to reuse (default: a new one)."""
    children: dict[int, list[int]] = {}
    for pid, parent in (_parents() if parents is None else parents).items():
        children.setdefault(parent, []).append(pid)
    skipped, found, todo = set(exclude), [], [root]
    while todo:
        pid = todo.pop()
        if pid in skipped:
            continue
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


JVM_FORK = "jvm-fork"  # a process the JVM forked, not yet its own program: not measured


def argv(pid: int) -> list[str]:
    """The command line of `pid`, empty when it is gone."""
    return [a for a in (_read(f"/proc/{pid}/cmdline") or "").split("\0") if a]


def _program(command: Sequence[str]) -> str:
    return os.path.basename(command[0]) if command else ""


def _is_python_worker(command: Sequence[str]) -> bool:
    return any("pyspark.daemon" in a or "pyspark.worker" in a for a in command)


def role(pid: int, jvm_pid: int, driver_pid: int) -> str:
    """jvm, driver (the Python driver), python-worker (processes forked by pyspark.daemon:
    task workers, and the per-call workers Spark uses to plan and commit a Python data source),
    python-driver-runner (other Python processes, e.g. a streaming source's planner), or
    `JVM_FORK`: a child the JVM has forked (a Python worker, another command it starts)
    and that has not executed its program yet, whose VmHWM is the JVM's own peak."""
    if pid == jvm_pid:
        return "jvm"
    if pid == driver_pid:
        return "driver"
    command = argv(pid)
    program = _program(command)
    if program.startswith("java"):
        return JVM_FORK
    if _is_python_worker(command):
        return "python-worker"
    return "python-driver-runner" if program.startswith("python") else "other"


def executor_role(pid: int, parent_is_daemon: bool) -> str:
    """Below a Spark standalone worker: executor-jvm (CoarseGrainedExecutorBackend, started by
    the worker daemon), executor-python-worker (its pyspark.daemon and the task workers it
    forks), `JVM_FORK` (any other Java process there: a daemon's or an executor's child before
    it executes its program) or executor-other."""
    command = argv(pid)
    if _program(command).startswith("java"):
        executor = parent_is_daemon and any("CoarseGrainedExecutorBackend" in a for a in command)
        return "executor-jvm" if executor else JVM_FORK
    return "executor-python-worker" if _is_python_worker(command) else "executor-other"


class TreeMemory(BackgroundThread):
    """Peak RSS and CPU time per process of the tree under the JVM (plus the Python driver)
    over a phase; `others` ({pid: role}, e.g. an embedded broker) are counted for CPU time.
    `roots` ({pid: role}, the daemons of a Spark standalone cluster) add their whole trees,
    memory and CPU: the root with its role, the processes below it with `executor_role`'s.

    In spark-submit the JVM starts the Python driver; in-process (pytest) the driver starts
    the JVM. Either way, children of the Python driver (an embedded broker, the standalone
    daemons) are excluded from the driver's tree.
    """

    def __init__(self, jvm_pid: int, others: Mapping[int, str] | None = None, interval_s: float = 0.2,
                 roots: Mapping[int, str] | None = None) -> None:
        super().__init__("tree-memory")
        self._jvm = jvm_pid
        self._driver = os.getpid()
        self._others = dict(others or {})
        self._roots = dict(roots or {})
        self._interval_s = interval_s
        self._peaks: dict[int, ProcessPeak] = {}
        self._cpu_start: dict[int, float] = {}
        self._cpu_last: dict[int, tuple[str, float]] = {}

    def _tree(self, parents: Mapping[int, int]) -> dict[int, bool]:
        """pid -> whether it is in a standalone daemon's tree rather than the driver's."""
        excluded = [pid for pid, parent in parents.items() if parent == self._driver and pid != self._jvm]
        tree = dict.fromkeys([*descendants(self._jvm, [*excluded, self._driver], parents), self._driver], False)
        for root in self._roots:
            tree.update(dict.fromkeys(descendants(root, (), parents), True))
        return tree

    def _role(self, pid: int, in_cluster: bool, parents: Mapping[int, int]) -> str:
        if not in_cluster:
            return role(pid, self._jvm, self._driver)
        return self._roots.get(pid) or executor_role(pid, parents.get(pid) in self._roots)

    def _sample(self) -> None:
        parents = _parents()
        for pid, in_cluster in self._tree(parents).items():
            name = self._role(pid, in_cluster, parents)
            if name == JVM_FORK:
                continue
            peak = peak_rss(pid)
            if peak is not None and peak > self._peaks.get(pid, ProcessPeak(pid, "", 0)).peak_bytes:
                self._peaks[pid] = ProcessPeak(pid, name, peak)
            self._sample_cpu(pid, name)
        for pid, name in self._others.items():
            self._sample_cpu(pid, name)

    def _sample_cpu(self, pid: int, name: str) -> None:
        seconds = cpu_seconds(pid)
        if seconds is not None:
            self._cpu_start.setdefault(pid, seconds)
            self._cpu_last[pid] = (name, seconds)

    def _work(self) -> None:
        while not self._stopping.wait(self._interval_s):
            self._sample()

    def __enter__(self) -> TreeMemory:
        for pid in self._tree(_parents()):
            reset_peak(pid)
        self._sample()
        return super().__enter__()

    def __exit__(self, *exc_info: object) -> None:
        super().__exit__(*exc_info)
        self._sample()

    def peaks(self) -> list[ProcessPeak]:
        return sorted(self._peaks.values(), key=lambda p: (p.role, p.pid))

    def summary_mib(self) -> dict[str, float]:
        """Per role the largest single-process peak, and `total`: the sum of all peaks."""
        by_role: dict[str, float] = {}
        for peak in self._peaks.values():
            by_role[peak.role] = max(by_role.get(peak.role, 0.0), peak.peak_bytes / 2**20)
        by_role["total"] = sum(p.peak_bytes for p in self._peaks.values()) / 2**20
        return {k: round(v, 1) for k, v in sorted(by_role.items())}

    def cpu_seconds_by_role(self) -> dict[str, float]:
        """CPU seconds used during the phase, summed per role (processes started during the
        phase count from their first sample)."""
        used: dict[str, float] = {}
        for pid, (name, seconds) in self._cpu_last.items():
            used[name] = used.get(name, 0.0) + seconds - self._cpu_start[pid]
        return {k: round(v, 2) for k, v in sorted(used.items())}
