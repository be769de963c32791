"""Files at a location Spark and pyarrow both understand: local paths, `file:` URIs and the object
stores pyarrow supports (credentials from the environment). On Databricks, `dbfs:/x` is read
through its FUSE mount `/dbfs/x`; `/Volumes/...` and `/dbfs/...` paths are local paths."""

from __future__ import annotations

import contextlib
import os
import uuid

from pyarrow import fs


def normalize_location(location: str) -> str:
    """`location` as Spark and pyarrow both read it: local paths made absolute, `dbfs:/` via FUSE."""
    if location.startswith("dbfs:/"):
        return "/dbfs/" + location[len("dbfs:/"):].lstrip("/")
    if ":" not in location.split("/", 1)[0]:
        return os.path.abspath(location)
    return location


def read_text(location: str) -> str | None:
    """The UTF-8 text of the file at `location`, None when there is none."""
    filesystem, path = fs.FileSystem.from_uri(normalize_location(location))
    try:
        with filesystem.open_input_stream(path) as stream:
            return bytes(stream.read()).decode("utf-8")
    except FileNotFoundError:
        return None


def write_text(location: str, text: str) -> None:
    """Write `text` to the file at `location` whole: a temporary file of its own beside it, then
    moved over it (a reader sees the old file or the new one, never half of one, where a move is
    a rename)."""
    filesystem, path = fs.FileSystem.from_uri(normalize_location(location))
    directory, name = path.rsplit("/", 1)
    filesystem.create_dir(directory, recursive=True)
    temporary = f"{directory}/.{name}-{uuid.uuid4().hex}.tmp"
    try:
        with filesystem.open_output_stream(temporary) as stream:
            stream.write(text.encode("utf-8"))
        filesystem.move(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            filesystem.delete_file(temporary)
        raise
