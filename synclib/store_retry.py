"""One retry policy for every request the job sends to the object store (`storage.s3.retry_deadline`,
`storage.s3.retry_attempts`), and synclib's own requests sent under it.

The policy travels as two variables beside the `AWS_*` ones (`S3Config.environment()` sets them, so
the driver, the source's planner and the Python workers read the same); each client gets it in its
own terms (`synclib.settings.storage` maps it once): obstore (synclib's own requests, `send`),
deltalake's object_store (`delta_storage_options`), pyarrow's S3 filesystem (`attempts`) and S3A
(`fs.s3a.retry.*`).

`send` retries a transient failure (S3's 503 `SlowDown` and other 5xx answers, a connection reset
or refused, a timeout) with exponential backoff and full jitter until the deadline or the attempts
run out, then raises `ObjectStoreUnavailable`: one line naming the store, the request and how long it
failed. Every request synclib sends itself is safe to send again: GET and HEAD read; a PUT of a
whole object (the run marker, synclib's checkpoint files) writes the same bytes again; a
put-if-absent (a Delta log entry) that meets its own first attempt is recognised by its bytes
(`synclib.delta.log_store`). Errors and retries are counted by kind (`counts`: the metrics)."""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEADLINE_VARIABLE, ATTEMPTS_VARIABLE = "SYNCLIB_S3_RETRY_DEADLINE_S", "SYNCLIB_S3_RETRY_ATTEMPTS"
DEADLINE_S = 60.0  # an S3 throttling episode or a node's restart passes in seconds; a regional outage does not
ATTEMPTS = 10
FIRST_BACKOFF_S = 0.1  # object_store's first backoff
MAX_BACKOFF_S = 15.0  # object_store's cap
# The AWS SDK's standard retries of a throttled request (pyarrow's S3 filesystem), which know no
# deadline: up to 1 s before the first retry, doubling, capped at 20 s (measured behind the fault
# proxy: 4 retries took 11 s).
SDK_FIRST_BACKOFF_S, SDK_MAX_BACKOFF_S = 1.0, 20.0
# What a message of obstore (object_store), deltalake, pyarrow (the AWS C++ SDK's error names) or S3A
# says of a transient failure, in order: the first match names the kind.
_KINDS = (
    ("slow-down", re.compile(r"SlowDown|Slow Down|SLOW_DOWN|Throttl|THROTTL|\b429\b|TooManyRequests")),
    ("503", re.compile(r"\b503\b|Service Unavailable|SERVICE_UNAVAILABLE")),
    ("5xx", re.compile(r"status code: 5\d\d|\b50[0-24-9] [A-Z]|InternalError|INTERNAL_FAILURE|AWSStatus500")),
    ("timeout", re.compile(r"[Tt]imed? ?out|kind: Timeout")),
    ("connection", re.compile(r"error sending request|kind: (Interrupted|Connect|Request)|[Cc]onnection "
                              r"(reset|refused|closed|aborted)|[Bb]roken pipe|Unable to execute HTTP request")),
)
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
UNAVAILABLE = "object store unavailable"  # how `ObjectStoreUnavailable`'s line starts, wherever it is wrapped


class ObjectStoreUnavailable(RuntimeError):
    """A request failed transiently past the retry deadline (one line)."""


@dataclass(frozen=True)
class RetryPolicy:
    deadline_s: float = DEADLINE_S
    attempts: int = ATTEMPTS

    @classmethod
    def of(cls, environ: Mapping[str, str] | None = None) -> RetryPolicy:
        """The policy the job set in `environ` (default: os.environ), else the defaults."""
        env = os.environ if environ is None else environ
        return cls(float(env.get(DEADLINE_VARIABLE, DEADLINE_S)), int(env.get(ATTEMPTS_VARIABLE, ATTEMPTS)))

    def sdk_attempts(self) -> int:
        """Attempts for the AWS SDK's standard retries: as many as fit in the deadline at their
        longest backoffs, at most `attempts` (7 at the defaults)."""
        attempts, waited = 1, 0.0
        while attempts < self.attempts:
            waited += min(SDK_MAX_BACKOFF_S, SDK_FIRST_BACKOFF_S * 2 ** (attempts - 1))
            if waited > self.deadline_s:
                break
            attempts += 1
        return attempts

    def backoff_s(self, retry: int) -> float:
        """The pause before retry number `retry` (1, 2, ...): exponential, with full jitter."""
        return random.uniform(0, min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** retry))


def delta_storage_options(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """deltalake's storage options for the job's policy (object_store's retry settings, which delta-rs
    reads from storage options only, not from the environment)."""
    policy = RetryPolicy.of(environ)
    return {"max_retries": str(policy.attempts - 1), "retry_timeout": f"{policy.deadline_s:g}s",
            "backoff_config.init_backoff": f"{FIRST_BACKOFF_S * 1000:g}ms",
            "backoff_config.max_backoff": f"{MAX_BACKOFF_S:g}s", "backoff_config.base": "2"}


def transient_kind(error: BaseException) -> str | None:
    """The kind of a transient failure (`slow-down`, `503`, `5xx`, `timeout`, `connection`), None
    for an answer that another attempt would not change (404, 403, 412, ...)."""
    if isinstance(error, ObjectStoreUnavailable):  # retried to its deadline already
        return None
    text = str(error).split("Debug source:", 1)[0]  # obstore's debug dump names its retry_timeout setting
    if isinstance(error, (ConnectionError, TimeoutError)):
        return "timeout" if isinstance(error, TimeoutError) else "connection"
    return next((name for name, pattern in _KINDS if pattern.search(text)), None)


_OTHER_CLIENTS = re.compile(r"Generic S3 error|s3a://|S3AFileSystem|AWSS3IOException|AWSServiceThrottledException|"
                            r"software\.amazon\.awssdk|AWS Error [A-Z_]+ during \w+ operation")


def storage_failure(failure: str) -> str | None:
    """The one line to say when a query failed on the object store (`failure`: its error's text, from
    any process): `ObjectStoreUnavailable`'s own line, or the first line of deltalake's, pyarrow's
    or S3A's error when it is a transient failure their retries gave up on; None for any other failure."""
    for line in failure.splitlines():
        if UNAVAILABLE in line:
            return line[line.index(UNAVAILABLE):].strip()
    for line in failure.splitlines():
        if _OTHER_CLIENTS.search(line) and (kind := transient_kind(RuntimeError(line))) is not None:
            return f"{UNAVAILABLE}: {kind}: {_short(RuntimeError(line.strip()))}"
    return None


_lock = threading.Lock()
_errors: Counter[str] = Counter()
_retries: Counter[str] = Counter()


def counts() -> tuple[dict[str, int], dict[str, int]]:
    """(transient errors by kind, retries by kind) of synclib's own requests in this process."""
    with _lock:
        return dict(_errors), dict(_retries)


def _short(error: BaseException) -> str:
    """The error's first words on one line: the status or the transport's complaint, no debug dump."""
    text = " ".join(_COLOURS.sub("", str(error)).split())  # deltalake's errors come with terminal colours
    text = text.split(" Debug source:", 1)[0].split("<?xml", 1)[0]
    return text[:300].rstrip(": ")


def send(store: str, request: str, call: Callable[[], T], policy: RetryPolicy | None = None,
         kinds: Collection[str] | None = None) -> T:
    """`call()` (one request `request` to `store`), retried on transient failures (of `kinds` only,
    when given) under `policy` (default: the job's, `RetryPolicy.of()`); past it `ObjectStoreUnavailable`."""
    policy = RetryPolicy.of() if policy is None else policy
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return call()
        except Exception as error:
            kind = transient_kind(error)
            if kind is None or (kinds is not None and kind not in kinds):
                raise
            attempt += 1
            with _lock:
                _errors[kind] += 1
            elapsed = time.monotonic() - started
            pause = policy.backoff_s(attempt)
            if attempt >= policy.attempts or elapsed + pause > policy.deadline_s:
                raise ObjectStoreUnavailable(
                    f"{UNAVAILABLE}: {store}: {request} failed for {elapsed:.1f} s ({attempt} attempts, the last: "
                    f"{kind}: {_short(error)}); the retry deadline is {policy.deadline_s:g} s "
                    f"(storage.s3.retry_deadline)") from None
            with _lock:
                _retries[kind] += 1
            logger.info("%s: %s: %s (%s), retry %d in %.2f s", store, request, kind, _short(error), attempt, pause)
            time.sleep(pause)  # the backoff itself, not a wait for a condition
