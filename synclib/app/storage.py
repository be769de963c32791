"""The job's object-store locations: checked before Spark starts, then configured for every client.

`check_storage` lists each `s3://`/`s3a://` location (the table, the dead-letter table, the
checkpoint) with the `storage.s3` settings and raises `StorageUnavailable`, one line naming the
location and the setting to check, when the server cannot be reached or refuses the
credentials. A server that answers but is throttling or failing (503 SlowDown, 5xx) is asked again
under the job's retry policy (`storage.s3.retry_deadline`), as the job's own requests are; a
server that cannot be reached at all is reported at once (most often a wrong endpoint).
`synclib.app.session.use_storage` then sets the same settings for the session.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

from pyarrow import fs

from synclib.locations import s3_filesystem
from synclib.settings import ForwarderConfig
from synclib.settings.storage import is_s3
from synclib.store_retry import ObjectStoreUnavailable, RetryPolicy, send

DEFAULT_TIMEOUT_S = 10.0
ANSWERED = ("slow-down", "503", "5xx")  # failures the check retries: the server is there, and busy


class StorageUnavailable(RuntimeError):
    """An object-store location cannot be used with the job's settings (one line, no secret)."""


def s3_locations(config: ForwarderConfig) -> dict[str, str]:
    """{setting: location} of the job's `s3://` and `s3a://` locations."""
    locations = {"sink.path": config.sink.path, "checkpoint.location": config.checkpoint.location}
    if config.sink.dead_letters.enabled:
        locations["sink.dead_letters.path"] = config.sink.dead_letters_path
    return {setting: location for setting, location in locations.items() if location and is_s3(location)}


def check_storage(config: ForwarderConfig, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Raise `StorageUnavailable` unless every S3 location of the job can be listed."""
    locations = s3_locations(config)
    if not locations:
        return
    s3 = config.storage.s3
    problem = s3.problem()
    if problem is not None:
        setting, what = problem
        raise StorageUnavailable(f"cannot use {next(iter(locations.values()))}: {setting}: {what}")
    variables = s3.environment()
    filesystem = s3_filesystem(variables, timeout_s)
    endpoint = variables.get("AWS_ENDPOINT_URL", "AWS S3")
    policy = RetryPolicy.of(variables)
    for setting, location in locations.items():
        parts = urlsplit(location)
        prefix = f"{parts.netloc}{parts.path}".rstrip("/")
        try:
            send(endpoint, f"LIST {location}", functools.partial(
                filesystem.get_file_info, fs.FileSelector(prefix, allow_not_found=True)), policy, ANSWERED)
            bucket = send(endpoint, f"HEAD {parts.netloc}", functools.partial(filesystem.get_file_info, parts.netloc),
                          policy, ANSWERED).type
        except ObjectStoreUnavailable as exc:
            raise StorageUnavailable(f"cannot list {location} ({setting}): {exc}") from None
        except OSError as exc:
            raise StorageUnavailable(
                f"cannot list {location} ({setting}) at {endpoint}: {_cause(exc)}; check "
                f"{_setting_to_check(str(exc))}") from None
        if bucket == fs.FileType.NotFound:
            raise StorageUnavailable(f"cannot use {location} ({setting}): bucket {parts.netloc!r} does not exist "
                                     f"at {endpoint}; check {setting}")


def _cause(exc: OSError) -> str:
    """The server's or the connection's answer, on one line and without the SDK's request details."""
    text = " ".join(str(exc).split())
    for marker in ("AWS Error ", "curlCode: "):
        if marker in text:
            return text[text.index(marker):][:160]
    return text[:160]


def _setting_to_check(error: str) -> str:
    lowered = error.lower()
    if any(word in lowered for word in ("signature", "accessdenied", "access denied", "invalidaccesskeyid",
                                        "credential", "forbidden", "403")):
        return "storage.s3.access_key_id and storage.s3.secret_access_key (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
    if "nosuchbucket" in lowered or "bucket does not exist" in lowered:
        return "the bucket of the location"
    return "storage.s3.endpoint (or AWS_ENDPOINT_URL) and storage.s3.region"

