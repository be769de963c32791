"""What the forwarder job's files say, read while it is frozen or after it is killed: the window
it is in (from Spark's checkpoint and the Delta log; the windows are described in
`harness.crash_harness`), and the Delta table checked against the leader's commits."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from deltalake import DeltaTable

from synclib import spark_checkpoint
from synclib.delta.maintenance import COMPACTED_FILE, MAINTENANCE_APP_ID
from synclib.delta.table import read_arrow, read_table_offsets

PLANNING, READING, DELTA_COMMITTED, MAINTENANCE = "planning", "reading", "delta-committed", "maintenance"
WINDOWS = (PLANNING, READING, DELTA_COMMITTED, MAINTENANCE)

_BATCH_FILE = re.compile(r"[0-9]+")
_DELTA_COMMIT_FILE = re.compile(r"[0-9]{20}\.json")

Row = tuple[int, int]  # (partition, offset) of an event in the table


def _last_batch(directory: Path) -> int | None:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    batches = [int(n) for n in names if _BATCH_FILE.fullmatch(n)]
    return max(batches) if batches else None


def delta_batches(table: Path) -> list[tuple[str, int]]:
    """(app id, batch id) of every Delta commit writing a batch, oldest first (compaction claims,
    which carry the maintenance transaction, are not batches)."""
    log = table / "_delta_log"
    try:
        names = sorted(n for n in os.listdir(log) if _DELTA_COMMIT_FILE.fullmatch(n))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        for line in (log / name).read_text().splitlines():
            txn = json.loads(line).get("txn") if line.strip() else None
            if txn is not None and txn["appId"] != MAINTENANCE_APP_ID:
                found.append((txn["appId"], int(txn["version"])))
    return found


@dataclass(frozen=True)
class BatchState:
    """The last batch planned (`offsets/`), checkpointed (`commits/`) and in Delta, and whether
    a compacted file awaits its maintenance commit."""

    planned: int | None
    checkpointed: int | None
    in_delta: int | None
    compacting: bool = False

    @property
    def window(self) -> str | None:
        if self.compacting:
            return MAINTENANCE
        if self.planned is None:
            return None
        if self.planned == self.checkpointed:
            return PLANNING
        return DELTA_COMMITTED if self.in_delta == self.planned else READING


class JobFiles:
    """Fast reads of the job's checkpoint and Delta log (only the newest commit file is parsed)."""

    def __init__(self, checkpoint: Path, table: Path) -> None:
        self.checkpoint = checkpoint
        self.table = table
        self._delta_file: str | None = None
        self._delta_batch: int | None = None
        self._compacted: set[str] = set()  # compacted files that Delta commits added
        self._scanned: set[str] = set()  # commit files read for them
        self._orphans: set[str] = set()  # compacted files of killed maintenance passes, never committed

    def planned_ends(self, topic: str) -> dict[int, int]:
        """The end offsets of `topic` that Spark logged for the newest batch (`offsets/N`)."""
        batch = _last_batch(self.checkpoint / "offsets")
        ends = None if batch is None else spark_checkpoint.batch_offsets(str(self.checkpoint), batch)
        return {int(p): end for p, end in (json.loads(ends).get(topic, {}) if ends else {}).items()}

    def state(self) -> BatchState:
        planned = _last_batch(self.checkpoint / "offsets")
        checkpointed = _last_batch(self.checkpoint / "commits")
        return BatchState(planned, checkpointed, self._last_delta_batch() if planned != checkpointed else None,
                          bool(self.pending_compacted()))

    def _commit_files(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.table / "_delta_log") if _DELTA_COMMIT_FILE.fullmatch(n))
        except FileNotFoundError:
            return []

    def _last_delta_batch(self) -> int | None:
        """The transaction version of the newest Delta commit carrying one (maintenance commits carry none)."""
        names = self._commit_files()
        newest = names[-1] if names else None
        if newest is not None and newest != self._delta_file:
            self._delta_file, self._delta_batch = newest, None
            for name in reversed(names):
                versions = [json.loads(line)["txn"]["version"]
                            for line in (self.table / "_delta_log" / name).read_text().splitlines() if '"txn"' in line]
                if versions:
                    self._delta_batch = versions[0]
                    break
        return self._delta_batch

    def pending_compacted(self) -> set[str]:
        """Compacted files in the table directory that no Delta commit adds (yet), orphans left out."""
        try:
            written = {n for n in os.listdir(self.table) if COMPACTED_FILE.fullmatch(n)} - self._orphans
        except FileNotFoundError:
            return set()
        if written <= self._compacted:
            return set()
        for name in self._commit_files():
            if name not in self._scanned:
                self._scanned.add(name)
                for line in (self.table / "_delta_log" / name).read_text().splitlines():
                    add = json.loads(line).get("add") if '"add"' in line else None
                    if add is not None:
                        self._compacted.add(add["path"])
        return written - self._compacted

    def orphan_pending(self) -> None:
        """After a kill: the pending compacted files will never be committed (vacuum leaves them)."""
        self._orphans |= self.pending_compacted()


def table_rows(table: Path) -> Counter[Row]:
    """How many times each (partition, offset) is in the Delta table."""
    if not DeltaTable.is_deltatable(str(table)):
        return Counter()
    rows = read_arrow(str(table), columns=["partition", "offset"]).to_pydict()
    return Counter(zip(rows["partition"], rows["offset"], strict=True))


@dataclass(frozen=True)
class Verdict:
    """A Delta table against the leader's commits and against the end offsets its newest
    synclib commit records (what it says it holds); every count is 0 when nothing is wrong."""

    rows: int
    duplicates: int  # extra copies of a (partition, offset)
    beyond: int  # rows at or beyond the leader's commit of their partition
    gaps: int  # offsets missing below the recorded end offsets
    unrecorded: int  # rows at or beyond the recorded end offsets
    recorded: dict[int, int]  # the recorded end offset per partition

    @property
    def ok(self) -> bool:
        return self.duplicates == self.beyond == self.gaps == self.unrecorded == 0

    def covers(self, offsets: Mapping[int, int]) -> bool:
        """The table records (so, when `ok`, holds) every offset below `offsets`."""
        return all(self.recorded.get(p, 0) >= end for p, end in offsets.items())

    def holds_exactly(self, committed: Mapping[int, int]) -> bool:
        """`ok`, and it holds exactly the offsets below the leader's `committed` ones."""
        return self.ok and all(self.recorded.get(p, 0) == end for p, end in committed.items())


def verify_table(table: Path, topic: str, committed: Mapping[int, int]) -> Verdict:
    """Check the table's rows of `topic` against the leader's `committed` offsets and its own record."""
    rows = table_rows(table)
    recorded = {p: end for (t, p), end in (read_table_offsets(str(table)) or {}).items() if t == topic}
    return Verdict(
        rows=sum(rows.values()),
        duplicates=sum(n - 1 for n in rows.values() if n > 1),
        beyond=sum(n for (p, offset), n in rows.items() if offset >= committed.get(p, 0)),
        gaps=sum(1 for p, end in recorded.items() for offset in range(end) if (p, offset) not in rows),
        unrecorded=sum(n for (p, offset), n in rows.items() if offset >= recorded.get(p, 0)),
        recorded=recorded,
    )


